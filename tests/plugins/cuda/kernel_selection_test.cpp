// Kernel discovery from the CUBIN's symbol table, and choosing one: by each name form, by the
// only kernel, through an NVRTC name expression, or failing with the candidates.
#include "cuda_test_support.hpp"

#include "cuda_plugin/detail/kernel_discovery.hpp"

#include <gmock/gmock.h>

namespace keval::cuda_plugin::test {
namespace {

using ::testing::HasSubstr;

// Every kind of kernel, plus things that must not count as one.
constexpr const char* kMixed = R"(
extern "C" __global__ void c_kernel(const float* x, float* out, int n) { out[0] = x[0]; }

__global__ void cpp_kernel(const float* x, float* out, int n) { out[0] = x[0] * 2; }

namespace ops {
__global__ void inner(const float* x, float* out, int n) { out[0] = x[0] * 3; }
}

template <typename T, int K>
__global__ void tk(const T* x, T* out, int n) { out[0] = x[0] * T(K); }
template __global__ void tk<float, 4>(const float*, float*, int);

__device__ __noinline__ float helper(float v) { return v * v; }
__device__ float device_table[16];
__constant__ float constant_table[16];
)";

std::string metadata_naming(const std::string& name) {
  return R"({"kernel_name": ")" + name + R"("})";
}

CompiledKernel compile_named(const char* source, const std::string& name) {
  return compile({source, metadata_naming(name)});
}

TEST(KernelDiscovery, FindsExternCCppNamespacedAndTemplateKernelsOnly) {
  const auto e = compile_error({kMixed});
  EXPECT_EQ(e.code(), KEVAL_ERROR_COMPILE);
  EXPECT_EQ(std::string(e.what()), "source defines 4 kernels (c_kernel, cpp_kernel, ops::inner, "
                                   "tk<float, 4>); set metadata.kernel_name");
}

TEST(KernelDiscovery, ReadsSymbolsAndDemangles) {
  const CompiledKernel k = compile_named(kMixed, "cpp_kernel");
  EXPECT_EQ(k.lowered_name, "_Z10cpp_kernelPKfPfi");
  EXPECT_EQ(k.name, "cpp_kernel");
  const auto info = info_of(k);
  EXPECT_EQ(std::string(info.at("signature").as_string()), "cpp_kernel(float const*, float*, int)");
  EXPECT_EQ(info.at("kernels").as_array().size(), 4u);
}

TEST(KernelSelection, ByExternCName) {
  const CompiledKernel k = compile_named(kMixed, "c_kernel");
  EXPECT_EQ(k.lowered_name, "c_kernel");
  EXPECT_EQ(k.name, "c_kernel");
}

TEST(KernelSelection, ByMangledName) {
  EXPECT_EQ(compile_named(kMixed, "_ZN3ops5innerEPKfPfi").name, "ops::inner");
}

TEST(KernelSelection, ByDemangledNameWithoutParameters) {
  EXPECT_EQ(compile_named(kMixed, "ops::inner").lowered_name, "_ZN3ops5innerEPKfPfi");
  EXPECT_EQ(compile_named(kMixed, "cpp_kernel").lowered_name, "_Z10cpp_kernelPKfPfi");
}

TEST(KernelSelection, ByTemplateIdOfAnInstantiatedTemplate) {
  const CompiledKernel k = compile_named(kMixed, "tk<float, 4>");
  EXPECT_EQ(k.name, "tk<float, 4>");
  EXPECT_FALSE(info_of(k).contains("name_expression")) << "already compiled: no second compile";
  EXPECT_EQ(compile_named(kMixed, "tk<float,4>").lowered_name, k.lowered_name)
      << "spaces do not matter";
}

TEST(KernelSelection, ByFullSignature) {
  EXPECT_EQ(compile_named(kMixed, "cpp_kernel(float const*, float*, int)").name, "cpp_kernel");
}

TEST(KernelSelection, TheOnlyKernelNeedsNoName) {
  const CompiledKernel k = compile({R"(
__device__ float twice(float v) { return 2 * v; }
__global__ void only(const float* x, float* out, int n) { out[0] = twice(x[0]); })"});
  EXPECT_EQ(k.name, "only");
}

TEST(KernelSelection, LaunchKernelNameIsAFallbackForMetadata) {
  Source s{kMixed};
  s.io = R"({"args": [], "launch": {"grid": 1, "block": 1, "kernel_name": "ops::inner"}})";
  EXPECT_EQ(compile(s).name, "ops::inner");
  s.metadata = metadata_naming("c_kernel");
  EXPECT_EQ(compile(s).name, "c_kernel") << "metadata wins";
}

TEST(KernelSelection, AnUnknownNameListsTheCandidates) {
  const auto e = compile_error({kMixed, metadata_naming("missing_kernel")});
  EXPECT_EQ(e.code(), KEVAL_ERROR_COMPILE);
  EXPECT_EQ(std::string(e.what()), "kernel_name 'missing_kernel' not found: source defines 4 "
                                   "kernels (c_kernel, cpp_kernel, ops::inner, tk<float, 4>)");
}

TEST(KernelSelection, OverloadsSharingANameAreAmbiguousUntilNamedBySignature) {
  constexpr const char* kOverloads = R"(
__global__ void k(float* x) { x[0] = 1; }
__global__ void k(double* x) { x[0] = 2; })";
  const auto e = compile_error({kOverloads, metadata_naming("k")});
  EXPECT_EQ(e.code(), KEVAL_ERROR_COMPILE);
  EXPECT_THAT(e.what(), HasSubstr("matches 2 kernels (k(double*), k(float*))"));
  EXPECT_EQ(compile({kOverloads, metadata_naming("k(double*)")}).lowered_name, "_Z1kPd");
}

TEST(KernelSelection, NoGlobalFunctionIsACompileError) {
  const auto e = compile_error({"__device__ float square(float v) { return v * v; }"});
  EXPECT_EQ(e.code(), KEVAL_ERROR_COMPILE);
  EXPECT_STREQ(e.what(), "No __global__ functions found");
}

TEST(KernelSelection, AnUninstantiatedTemplateAloneHasNoKernel) {
  const auto e = compile_error({"template <class T> __global__ void scale(T* x) { x[0] *= 2; }"});
  EXPECT_STREQ(e.what(), "No __global__ functions found");
  EXPECT_THAT(e.details(), HasSubstr("kernel_name")) << "the message says how to instantiate it";
}

constexpr const char* kScaleTemplate = R"(
template <typename T>
__global__ void scale(const T* x, T* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] * T(2);
})";

TEST(NameExpression, InstantiatesATemplateTheSourceNeverInstantiates) {
  const CompiledKernel k = compile_named(kScaleTemplate, "scale<float>");
  EXPECT_EQ(k.lowered_name, "_Z5scaleIfEvPKT_PS0_i");
  EXPECT_EQ(k.name, "scale<float>");
  const auto info = info_of(k);
  EXPECT_EQ(std::string(info.at("name_expression").as_string()), "scale<float>");

  EXPECT_EQ(compile_named(kScaleTemplate, "scale<double>").lowered_name, "_Z5scaleIdEvPKT_PS0_i");
}

TEST(NameExpression, WorksInsideNamespacesAndWithValueArguments) {
  const CompiledKernel k = compile_named(R"(
namespace ops {
template <typename T, int K>
__global__ void mul(const T* x, T* out, int n) { out[0] = x[0] * K; }
})",
                                         "ops::mul<float, 8>");
  EXPECT_EQ(k.name, "ops::mul<float, 8>");
}

TEST(NameExpression, ThatNamesNothingIsACompileErrorWithTheLog) {
  const auto e = compile_error({kScaleTemplate, metadata_naming("scal<float>")});
  EXPECT_EQ(e.code(), KEVAL_ERROR_COMPILE);
  EXPECT_STREQ(e.what(), "NVRTC compilation failed");
  EXPECT_THAT(e.details(), HasSubstr("kernel_name 'scal<float>'"));
  EXPECT_THAT(e.details(), HasSubstr("scal"));
}

TEST(NameExpression, ThatNamesADeviceFunctionIsRejected) {
  const auto e = compile_error({R"(
template <typename T> __device__ T twice(T v) { return v * 2; }
__global__ void k(float* x) { x[0] = twice(x[0]); })",
                                metadata_naming("twice<float>")});
  EXPECT_EQ(e.code(), KEVAL_ERROR_COMPILE);
  // NVRTC itself refuses the expression, and its log says why.
  EXPECT_THAT(e.details(), HasSubstr("non-__global__ function"));
}

TEST(NameForms, DropReturnTypeAndParameters) {
  using detail::drop_parameters;
  using detail::drop_return_type;
  EXPECT_EQ(drop_return_type("void scale<float>(float*, float, int)"),
            "scale<float>(float*, float, int)");
  EXPECT_EQ(drop_return_type("ns::k(float*)"), "ns::k(float*)");
  EXPECT_EQ(drop_return_type("void ns::tk<unsigned int, 4>(unsigned int*)"),
            "ns::tk<unsigned int, 4>(unsigned int*)");
  EXPECT_EQ(drop_return_type("(anonymous namespace)::k(float*)"),
            "(anonymous namespace)::k(float*)");
  EXPECT_EQ(drop_parameters("ns::tk<unsigned int, 4>(unsigned int*, void (*)(int))"),
            "ns::tk<unsigned int, 4>");
  EXPECT_EQ(drop_parameters("vector_add"), "vector_add");
  EXPECT_EQ(detail::demangle("vector_add"), "vector_add");
  EXPECT_EQ(detail::demangle("_Z5scaleIfEvPKT_PS0_i"),
            "void scale<float>(float const*, float*, int)");
}

TEST(NameForms, NameExpressionsAreTemplateIds) {
  EXPECT_TRUE(detail::is_name_expression("scale<float>"));
  EXPECT_TRUE(detail::is_name_expression("ns::tk<int, 4>"));
  EXPECT_FALSE(detail::is_name_expression("vector_add"));
  EXPECT_FALSE(detail::is_name_expression("ns::inner"));
  EXPECT_FALSE(detail::is_name_expression("<float>"));
}

} // namespace
} // namespace keval::cuda_plugin::test
