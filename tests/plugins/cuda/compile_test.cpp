// NVRTC compilation: CUBIN output, the full log on failure, the target architecture and its
// fallbacks, toolkit headers, and the user's compile options.
#include "cuda_test_support.hpp"

#include "cuda_plugin/detail/compile_settings.hpp"
#include "cuda_plugin/detail/nvrtc_program.hpp"

#include <algorithm>
#include <cstring>

#include <gmock/gmock.h>

namespace keval::cuda_plugin::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kAdd = R"(
extern "C" __global__ void vector_add(const float* x, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + 1.0f;
})";

std::string str(const boost::json::value& v) {
  return std::string(v.as_string());
}

TEST(CudaCompile, ProducesACubinForTheRequestedArchitecture) {
  const CompiledKernel k = compile({kAdd});
  ASSERT_GE(k.cubin.size(), 4u);
  EXPECT_EQ(std::memcmp(k.cubin.data(),
                        "\x7f"
                        "ELF",
                        4),
            0)
      << "a CUBIN is an ELF image, not PTX";
  EXPECT_EQ(k.lowered_name, "vector_add");
  EXPECT_EQ(k.name, "vector_add");
  EXPECT_EQ(k.target, "sm_90");
  const auto info = info_of(k);
  EXPECT_EQ(str(info.at("kernel_name")), "vector_add");
  EXPECT_EQ(str(info.at("lowered_name")), "vector_add");
  EXPECT_EQ(str(info.at("target")), "sm_90");
  EXPECT_EQ(info.at("cuda_arch").to_number<int>(), 90);
  EXPECT_EQ(str(info.at("cuda_arch_source")), "worker");
  EXPECT_EQ(str(info.at("nvrtc_version")), detail::nvrtc_version().text());
  EXPECT_GT(info.at("compile_time_ms").to_number<double>(), 0.0);
  EXPECT_EQ(info.at("kernels").as_array().size(), 1u);
  EXPECT_FALSE(info.contains("compile_log")) << "a clean compile has no log";
}

TEST(CudaCompile, TargetsOtherArchitectures) {
  Source s{kAdd};
  s.cuda_arch = 80;
  EXPECT_EQ(compile(s).target, "sm_80");
}

TEST(CudaCompile, SyntaxErrorIsACompileErrorWithTheFullLog) {
  const auto e = compile_error({R"(
extern "C" __global__ void k(float* x) {
  x[0] = y;
  x[1] = z;
})"});
  EXPECT_EQ(e.code(), KEVAL_ERROR_COMPILE);
  EXPECT_STREQ(e.what(), "NVRTC compilation failed");
  // Both errors: the log is complete, not its first line.
  EXPECT_THAT(e.details(), HasSubstr("identifier \"y\" is undefined"));
  EXPECT_THAT(e.details(), HasSubstr("identifier \"z\" is undefined"));
  EXPECT_THAT(e.details(), HasSubstr("custom.cu(3)")) << "positions name the side's file";
}

TEST(CudaCompile, WarningsLandInTheInfoLog) {
  const auto info = info_of(compile({R"(
extern "C" __global__ void k(float* x) {
  int unused_variable;
  x[0] = 1.0f;
})"}));
  ASSERT_TRUE(info.contains("compile_log"));
  EXPECT_THAT(str(info.at("compile_log")), HasSubstr("unused_variable"));
}

TEST(CudaCompile, ToolkitHeadersForHalfAndBfloat16Resolve) {
  const CompiledKernel k = compile({R"(
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void halves(const __half* x, __nv_bfloat16* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(__half2float(x[i]) * 2.0f);
})"});
  EXPECT_EQ(k.name, "halves");
}

TEST(CudaCompile, IncludeDirsComeFromTheEnvironmentWhenSet) {
  const auto baked = detail::toolkit_include_dirs(nullptr);
  ASSERT_FALSE(baked.empty()) << "the toolkit include dir is baked in at build time";
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(baked.front()) / "cuda_fp16.h"));
  EXPECT_EQ(detail::toolkit_include_dirs("/opt/a:/opt/b"),
            (std::vector<std::string>{"/opt/a", "/opt/b"}));
  EXPECT_EQ(detail::toolkit_include_dirs(""), baked);

  // A wrong override really is used: the toolkit header is then missing.
  ScopedEnv env("KEVAL_CUDA_INCLUDE", "/nonexistent-keval-include");
  const auto e = compile_error({"#include <cuda_fp16.h>\n" + std::string(kAdd)});
  EXPECT_EQ(e.code(), KEVAL_ERROR_COMPILE);
  EXPECT_THAT(e.details(), HasSubstr("cuda_fp16.h"));
}

TEST(CudaCompile, CompileOptionsFromMetadataAreHonoured) {
  Source s{R"(
#ifndef SCALE
#error "SCALE must be defined"
#endif
extern "C" __global__ void scaled(float* x, float* out, int n) { out[0] = x[0] * SCALE; })"};
  EXPECT_THAT(compile_error(s).details(), HasSubstr("SCALE must be defined"));
  s.metadata = R"({"compile_options": ["-DSCALE=3.0f", "-lineinfo"]})";
  const auto info = info_of(compile(s));
  const auto& options = info.at("compile_options").as_array();
  EXPECT_NE(std::find(options.begin(), options.end(), boost::json::value("-DSCALE=3.0f")),
            options.end());
  EXPECT_NE(std::find(options.begin(), options.end(), boost::json::value("-std=c++17")),
            options.end());
  EXPECT_EQ(std::find(options.begin(), options.end(), boost::json::value("-default-device")),
            options.end());
}

TEST(CudaCompile, AnUnknownOptionIsACompileError) {
  Source s{kAdd};
  s.metadata = R"({"compile_options": ["--no-such-nvrtc-option"]})";
  const auto e = compile_error(s);
  EXPECT_EQ(e.code(), KEVAL_ERROR_COMPILE);
  EXPECT_FALSE(e.details().empty());
}

TEST(CudaCompile, CompileOptionsMustBeStrings) {
  Source s{kAdd};
  s.metadata = R"({"compile_options": "-DX=1"})";
  EXPECT_EQ(compile_error(s).code(), KEVAL_ERROR_INVALID_REQUEST);
  s.metadata = R"({"compile_options": ["-DX=1", 3]})";
  const auto e = compile_error(s);
  EXPECT_EQ(e.code(), KEVAL_ERROR_INVALID_REQUEST);
  EXPECT_THAT(e.what(), HasSubstr("compile_options[1]"));
}

TEST(CudaCompile, AUserArchitectureReplacesKevals) {
  Source s{R"(
extern "C" __global__ void k(float* x, float* out, int n) {
#if __CUDA_ARCH__ != 800
#error "expected sm_80"
#endif
  out[0] = x[0];
})"};
  s.metadata = R"({"compile_options": ["-arch=sm_80"]})";
  const CompiledKernel k = compile(s);
  EXPECT_EQ(k.target, "sm_80");
  const auto info = info_of(k);
  EXPECT_EQ(str(info.at("cuda_arch_source")), "compile_options");
  for (const auto& o : info.at("compile_options").as_array())
    EXPECT_NE(str(o), "-arch=sm_90") << "keval's -arch must not be passed as well";

  s.metadata = R"({"compile_options": ["--gpu-architecture=compute_80"]})";
  const auto e = compile_error(s);
  EXPECT_EQ(e.code(), KEVAL_ERROR_INVALID_REQUEST);
  EXPECT_THAT(e.what(), HasSubstr("CUBIN"));
}

TEST(CudaCompile, AnArchitectureNvrtcCannotTargetIsUnsupported) {
  Source s{kAdd};
  s.cuda_arch = 30; // Kepler: long gone from NVRTC
  const auto e = compile_error(s);
  EXPECT_EQ(e.code(), KEVAL_ERROR_UNSUPPORTED);
  EXPECT_THAT(e.what(), HasSubstr("sm_30"));
}

TEST(CudaArch, TheWorkersArchitectureWins) {
  const auto choice = detail::resolve_arch(86, "75");
  EXPECT_EQ(choice.arch, 86);
  EXPECT_EQ(choice.source, "worker");
}

TEST(CudaArch, WithoutOneTheEnvironmentDecides) {
  for (const char* written : {"80", "sm_80", "8.0"}) {
    const auto choice = detail::resolve_arch(0, written);
    EXPECT_EQ(choice.arch, 80) << written;
    EXPECT_EQ(choice.source, "KEVAL_CUDA_ARCH") << written;
  }
  EXPECT_EQ(detail::resolve_arch(0, "12.0").arch, 120);
}

TEST(CudaArch, WithoutEitherItIsHopper) {
  const auto choice = detail::resolve_arch(0, nullptr);
  EXPECT_EQ(choice.arch, 90);
  EXPECT_EQ(choice.source, "default");
  EXPECT_EQ(detail::resolve_arch(0, "").source, "default");
}

TEST(CudaArch, AnUnreadableEnvironmentValueIsADeploymentError) {
  for (const char* written : {"hopper", "sm_", "9", "90x"})
    EXPECT_EQ(error_of([&] { detail::resolve_arch(0, written); }).code(), KEVAL_ERROR_INTERNAL)
        << written;
}

TEST(CudaArch, CompileRecordsTheFallbackItUsed) {
  Source s{kAdd};
  s.cuda_arch = 0;
  {
    ScopedEnv env("KEVAL_CUDA_ARCH", "sm_80");
    const auto info = info_of(compile(s));
    EXPECT_EQ(str(info.at("target")), "sm_80");
    EXPECT_EQ(str(info.at("cuda_arch_source")), "KEVAL_CUDA_ARCH");
  }
  {
    ScopedEnv env("KEVAL_CUDA_ARCH", std::nullopt);
    const auto info = info_of(compile(s));
    EXPECT_EQ(str(info.at("target")), "sm_90");
    EXPECT_EQ(str(info.at("cuda_arch_source")), "default");
  }
}

TEST(CudaCompile, MetadataMustBeAnObject) {
  Source s{kAdd};
  s.metadata = "[1, 2]";
  EXPECT_EQ(compile_error(s).code(), KEVAL_ERROR_INVALID_REQUEST);
}

TEST(CudaCompile, TheCubinIsLeftInTheWorkDir) {
  WorkDir dir;
  const std::string work_dir = dir.path().string();
  sdk::CompileInput in;
  in.source_code = kAdd;
  in.metadata_json = "{}";
  in.io_contract_json = kVectorIo;
  in.work_dir = work_dir;
  in.cuda_arch = 90;
  in.side = "ref";
  const CompiledKernel k = compile_cuda_source(in);
  EXPECT_EQ(std::filesystem::file_size(dir.path() / "kernel.cubin"), k.cubin.size());
}

TEST(Nvrtc, ReportsItsVersionAndArchitectures) {
  EXPECT_GE(detail::nvrtc_version().major, 12);
  const auto archs = detail::nvrtc_supported_archs();
  EXPECT_NE(std::find(archs.begin(), archs.end(), 90), archs.end());
}

} // namespace
} // namespace keval::cuda_plugin::test
