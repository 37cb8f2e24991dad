// kernel_type "torch_cuda" on a real GPU: KernelBench's ModelNew with load_inline, built by keval's
// builder and cache, compared against a torch Model through the core. Skipped, with the reason,
// when no CUDA device is usable or the embedded interpreter cannot import torch.
#ifdef KEVAL_TEST_PYTHON_EXECUTABLE

#include "python_test_support.hpp"
#include "support/cuda_device.hpp"

#include "cuda/driver.hpp"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

namespace keval::test::python {
namespace {

// Why no CUDA device is usable here, or "" when one is.
// A cache of the suite's own, empty when the suite starts, so "miss" and "hit" are
// deterministic; the workers inherit KEVAL_CACHE_DIR from this process.
const std::filesystem::path& suite_cache() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() /
             ("keval-torch-cuda-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    ::setenv("KEVAL_CACHE_DIR", d.c_str(), 1);
    return d;
  }();
  return dir;
}

class TorchCudaGpu : public ::testing::Test {
protected:
  void SetUp() override {
    KEVAL_SKIP_WITHOUT_CUDA_DEVICE();
    if (!torch_problem().empty())
      GTEST_SKIP() << "torch not importable: " << torch_problem();
    ASSERT_NE(built_registry().find("torch_cuda"), nullptr) << "torch_cuda plugin not built";
    suite_cache();
  }
};

// KernelBench's elementwise-add reference.
const char* kReference = R"(import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a + b

def get_inputs():
    return [torch.randn(4096, 1024), torch.randn(4096, 1024)]

def get_init_inputs():
    return []
)";

// KernelBench's ModelNew form: kernel and host wrapper in cuda_sources, the declaration in
// cpp_sources. @OP@ is the operation, @NAME@ the extension's name=, @TAG@ a comment that makes
// the source (so the cache key) unique.
std::string model_new(const std::string& op = "a[idx] + b[idx]",
                      const std::string& name = "elementwise_add", const std::string& tag = "") {
  std::string s = R"(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

elementwise_add_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>
// @TAG@
__global__ void elementwise_add_kernel(const float* a, const float* b, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = @OP@;
    }
}

torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b) {
    auto size = a.numel();
    auto out = torch::zeros_like(a);
    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;
    elementwise_add_kernel<<<num_blocks, block_size>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                                       out.data_ptr<float>(), size);
    return out;
}
"""

elementwise_add_cpp_source = (
    "torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b);"
)

elementwise_add = load_inline(
    name="@NAME@",
    cpp_sources=elementwise_add_cpp_source,
    cuda_sources=elementwise_add_source,
    functions=["elementwise_add_cuda"],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)

class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.elementwise_add = elementwise_add

    def forward(self, a, b):
        return self.elementwise_add.elementwise_add_cuda(a, b)
)";
  auto put = [&s](const std::string& key, const std::string& value) {
    for (auto at = s.find(key); at != std::string::npos; at = s.find(key, at + value.size()))
      s.replace(at, key.size(), value);
  };
  put("@OP@", op);
  put("@NAME@", name);
  put("@TAG@", tag);
  return s;
}

json::object ref_model(const std::string& body = "a + b") {
  std::string source = kReference;
  source.replace(source.find("return a + b"), 12, "return " + body);
  return kernel("torch", source);
}

json::object candidate(const std::string& source) {
  return kernel("torch_cuda", source);
}

// A ModelNew source as a compare's reference: KernelBench's Model name and inputs added.
json::object reference_of(const std::string& model_new_source) {
  return kernel("torch_cuda", model_new_source + R"(
Model = ModelNew

def get_inputs():
    return [torch.randn(4096, 1024), torch.randn(4096, 1024)]

def get_init_inputs():
    return []
)");
}

const json::array& extensions(const result::Response& r) {
  return custom_info(r).at("extensions").as_array();
}

std::string cache_state(const result::Response& r) {
  return text(extensions(r).at(0).as_object().at("cache"));
}

// The reference side's first extension, when the reference is a torch_cuda kernel too.
const json::object& ref_extension(const result::Response& r) {
  return exec(r)
      .at("metadata")
      .at("compile")
      .at("ref")
      .at("info")
      .at("extensions")
      .as_array()
      .at(0)
      .as_object();
}

// The build step of the first extension's unit compiled by `tool` ("nvcc" for cuda.cu).
json::object build_step(const result::Response& r, const std::string& tool) {
  for (const auto& step : extensions(r).at(0).as_object().at("steps").as_array())
    if (text(step.as_object().at("tool")) == tool)
      return step.as_object();
  ADD_FAILURE() << "no " << tool << " step in " << json::serialize(extensions(r));
  return {};
}

// A state directory of the suite's own, kept between its requests as a CLI's or a daemon's is:
// the trusted worker keeps the candidates' builds there.
const std::filesystem::path& suite_state() {
  static const std::filesystem::path dir = [] {
    auto d = suite_cache().parent_path() / (suite_cache().filename().string() + "-state");
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

result::Response timed_compare(const json::object& ref, const json::object& custom,
                               const std::string& label, int64_t trials = 20) {
  const auto start = std::chrono::steady_clock::now();
  auto r = run_request(compare(ref, custom, trials), true, built_registry(), suite_state());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "torch_cuda " << label << ": " << s << " s end to end";
  if (r.verdict == Verdict::success)
    std::cout << ", cache " << cache_state(r) << ", build "
              << json::serialize(extensions(r).at(0).as_object().at("seconds")) << " s";
  std::cout << "\n";
  return r;
}

TEST_F(TorchCudaGpu, KernelBenchElementwiseAddBuildsThenHitsTheCache) {
  const std::string source = model_new("a[idx] + b[idx]", "elementwise_add", "cache test");
  const auto cold = timed_compare(ref_model(), candidate(source), "cold");
  ASSERT_EQ(cold.verdict, Verdict::success) << json::serialize(cold.body);
  EXPECT_TRUE(exec(cold).at("correctness").as_bool()) << json::serialize(cold.body);
  // Built by keval's own builder (the trusted worker's runner that runs no user code), not in
  // the candidate's process.
  EXPECT_EQ(cache_state(cold), "built");
  EXPECT_EQ(text(extensions(cold).at(0).as_object().at("by")), "keval");
  EXPECT_EQ(text(custom_info(cold).at("class_name")), "ModelNew");
  // KernelBench's bare <<<grid, block>>> launches are put on c10's current stream when the
  // extension is built (keval_runtime/launch_streams.py), so the capture holds the kernel and
  // both sides replay graphs; every timed replay's output is checked against fresh inputs, so a
  // graph without the kernel would fail, not time.
  EXPECT_EQ(text(exec(cold).at("runtime_stats").at("method")), "cuda_graph")
      << json::serialize(exec(cold).at("runtime_stats"));
  EXPECT_EQ(text(cold.body.at("ref_runtime").as_object().at("method")), "cuda_graph")
      << json::serialize(cold.body.at("ref_runtime"));
  // Tensors, factories and data_ptr are all the kernel's wrapper uses: the lean header set.
  EXPECT_EQ(text(build_step(cold, "nvcc").at("headers")), "lean")
      << json::serialize(extensions(cold));

  // Nothing a candidate's process writes is loaded by another job (issue 11), but what keval
  // built for it is: the same source in the next job's candidate is reused, not rebuilt, and
  // nothing went into the shared cache that reference runners write.
  const auto again = timed_compare(ref_model(), candidate(source), "candidate again");
  ASSERT_EQ(again.verdict, Verdict::success) << json::serialize(again.body);
  EXPECT_TRUE(exec(again).at("correctness").as_bool()) << json::serialize(again.body);
  EXPECT_EQ(cache_state(again), "reused") << json::serialize(extensions(again));
  EXPECT_EQ(text(extensions(again).at(0).as_object().at("entry")).rfind(suite_cache().string(), 0),
            std::string::npos)
      << "a candidate's build went into the shared cache";
  // Another state directory (another daemon's) has its own builds.
  const auto elsewhere =
      run_request(compare(ref_model(), candidate(source), 5), true, built_registry());
  ASSERT_EQ(elsewhere.verdict, Verdict::success) << json::serialize(elsewhere.body);
  EXPECT_EQ(cache_state(elsewhere), "built");

  // A reference's build is shared: built once as a reference, then hit by a candidate.
  const auto as_reference = timed_compare(reference_of(source), candidate(source), "as reference");
  ASSERT_EQ(as_reference.verdict, Verdict::success) << json::serialize(as_reference.body);
  EXPECT_EQ(text(ref_extension(as_reference).at("cache")), "miss");
  const auto warm = timed_compare(ref_model(), candidate(source), "warm");
  ASSERT_EQ(warm.verdict, Verdict::success) << json::serialize(warm.body);
  EXPECT_TRUE(exec(warm).at("correctness").as_bool());
  EXPECT_EQ(cache_state(warm), "hit_shared");
}

// Device metrics of a load_inline kernel: counted in the candidate's runner, named from its trace,
// inside the job's NVTX range.
TEST_F(TorchCudaGpu, DeviceMetricsOfALoadInlineKernel) {
  json::object request = compare(
      ref_model(), candidate(model_new("a[idx] + b[idx]", "elementwise_add", "metrics")), 10);
  request["device_metrics"] = json::array{"speed_of_light", "occupancy"};
  request["job_id"] = "torch-cuda-metrics";
  const auto r = run_request(request, true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  const auto& metrics = exec(r).at("metadata").at("device_metrics").as_object();
  ASSERT_TRUE(metrics.at("available").as_bool()) << json::serialize(metrics);
  EXPECT_EQ(text(metrics.at("nvtx_range")), "torch-cuda-metrics_custom");
  bool found = false;
  for (const auto& k : metrics.at("kernels").as_array())
    if (text(k.at("name")).find("elementwise_add") != std::string::npos) {
      found = true;
      EXPECT_GT(k.at("occupancy").at("theoretical_occupancy").at("value").to_number<double>(), 0);
      EXPECT_GT(k.at("speed_of_light").at("duration").at("value").to_number<double>(), 0);
    }
  EXPECT_TRUE(found) << json::serialize(metrics);
  EXPECT_TRUE(exec(r).at("metadata").at("ref_device_metrics").at("available").as_bool());
}

// The V2 contract's TORCH_CUDA example, verbatim. It launches the kernel from cpp_sources (the seed
// server rewrote such launches; keval compiles such cpp_sources with nvcc after cuda_sources),
// binds a 'forward' that is never defined and calls it with one argument.
std::string seed_example() {
  return R"(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void elementwise_add_kernel(const float* a, const float* b, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = a[idx] + b[idx];
    }
}
"""

cpp_source = '''
torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b) {
    auto size = a.numel();
    auto out = torch::zeros_like(a);

    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;

    elementwise_add_kernel<<<num_blocks, block_size>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), size);

    return out;
}
'''

my_namespace = load_inline(
    name='my_cuda_kernel',
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['forward']
)

class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.my_namespace = my_namespace

    def forward(self, x):
        return self.my_namespace.forward(x)
)";
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

// A wrapper that calls an operator (torch::sigmoid) the lean header set does not declare: the
// lean attempt fails, the unit is compiled with the trimmed set, and nothing of the failed
// attempt reaches the result but its line in the build record.
TEST_F(TorchCudaGpu, WrapperCallingAnyOperatorBuildsWithTheNextHeaderSet) {
  const std::string source =
      replaced(model_new("a[idx] + b[idx]", "sigmoid_add", "operator test"),
               "auto out = torch::zeros_like(a);",
               "a = torch::sigmoid(a);\n    auto out = torch::zeros_like(a);");
  const auto r = timed_compare(ref_model("torch.sigmoid(a) + b"), candidate(source),
                               "operator in the wrapper");
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_TRUE(exec(r).at("correctness").as_bool()) << json::serialize(r.body);
  const auto step = build_step(r, "nvcc");
  EXPECT_EQ(text(step.at("headers")), "trimmed") << json::serialize(step);
  ASSERT_TRUE(step.contains("attempts")) << json::serialize(step);
  EXPECT_TRUE(contains(text(step.at("attempts").as_array().at(0)), "lean: "));
  EXPECT_TRUE(contains(text(step.at("attempts").as_array().at(0)), "did not compile"));
}

TEST_F(TorchCudaGpu, SeedExampleVerbatimIsCompiledFalseWithTheCompilerOutput) {
  // 'forward' does not exist: the report carries nvcc's own words about it.
  const auto r =
      run_request(compare(ref_model(), candidate(seed_example()), 5), true, built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_FALSE(exec(r).at("compiled").as_bool());
  const std::string error = compilation_error(r);
  EXPECT_TRUE(contains(error, "my_cuda_kernel")) << error;
  const std::string all = json::serialize(r.body);
  EXPECT_TRUE(contains(all, "forward")) << all;
  EXPECT_TRUE(contains(all, "nvcc")) << all;
}

TEST_F(TorchCudaGpu, SeedExampleWithItsBindingFixedBuildsWithTheLaunchInCppSources) {
  // The same source with 'functions' naming the wrapper that exists and ModelNew calling it:
  // the launch stays in cpp_sources, as the seed server accepted.
  std::string fixed =
      replaced(seed_example(), "functions=['forward']", "functions=['elementwise_add_cuda']");
  fixed = replaced(fixed, "def forward(self, x):\n        return self.my_namespace.forward(x)",
                   "def forward(self, a, b):\n"
                   "        return self.my_namespace.elementwise_add_cuda(a, b)");
  const auto r = run_request(compare(ref_model(), candidate(fixed), 5), true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_TRUE(exec(r).at("correctness").as_bool()) << json::serialize(r.body);
  EXPECT_TRUE(contains(json::serialize(extensions(r)), "cpp_sources launch CUDA kernels"))
      << json::serialize(r.body);
}

TEST_F(TorchCudaGpu, CppCompileErrorReturnsTheFullCompilerOutput) {
  const auto r = run_request(compare(ref_model(), candidate(model_new("a[idx] + undeclared_b")), 5),
                             true, built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_FALSE(exec(r).at("compiled").as_bool());
  const std::string all = json::serialize(r.body);
  EXPECT_TRUE(contains(all, "undeclared_b")) << all;
  EXPECT_TRUE(contains(all, "nvcc")) << all;
}

TEST_F(TorchCudaGpu, KernelFaultingAtRunTimeFails) {
  const auto r = run_request(
      compare(ref_model(),
              candidate(model_new("a[idx] + b[idx] + ((const float*)0x8)[idx * 1024 * 1024]")), 5),
      true, built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed) << json::serialize(r.body);
  EXPECT_TRUE(exec(r).at("compiled").as_bool()) << json::serialize(r.body);
}

TEST_F(TorchCudaGpu, TwoKernelsSharingANameNeverCollide) {
  const auto add =
      run_request(compare(ref_model(), candidate(model_new("a[idx] + b[idx]", "shared")), 5), true,
                  built_registry());
  ASSERT_EQ(add.verdict, Verdict::success) << json::serialize(add.body);
  const auto mul =
      run_request(compare(ref_model("a * b"), candidate(model_new("a[idx] * b[idx]", "shared")), 5),
                  true, built_registry());
  ASSERT_EQ(mul.verdict, Verdict::success) << json::serialize(mul.body);
  EXPECT_TRUE(exec(mul).at("correctness").as_bool()) << "the second job got the first's module";
  EXPECT_NE(text(extensions(add).at(0).as_object().at("module")),
            text(extensions(mul).at(0).as_object().at("module")));
}

TEST_F(TorchCudaGpu, ConcurrentJobsBuildTheSameReferenceKeyOnce) {
  const std::string source = model_new("a[idx] + b[idx]", "concurrent", "concurrent test");
  const std::string other_source = model_new("a[idx] + b[idx]", "concurrent_c", "candidate");
  // Each job waits for the other's cold builds (the reference's and the candidate's): 78 s alone
  // on an H100, past the helper's 120 s under a loaded `ctest -j12`. The limit is the test's,
  // not what it asserts.
  json::object request = compare(reference_of(source), candidate(other_source), 5);
  request["timeout"] = 280; // under ctest's own --timeout 300
  result::Response first, second;
  std::thread other([&] { second = run_request(request, true, built_registry()); });
  first = run_request(request, true, built_registry());
  other.join();
  ASSERT_EQ(first.verdict, Verdict::success) << json::serialize(first.body);
  ASSERT_EQ(second.verdict, Verdict::success) << json::serialize(second.body);
  const std::string a = text(ref_extension(first).at("cache")),
                    b = text(ref_extension(second).at("cache"));
  EXPECT_EQ((a == "miss") + (b == "miss"), 1) << a << " / " << b;
}

TEST_F(TorchCudaGpu, BaselineModelNewEqualsModel) {
  // Seed 003: the reference measured through the same path, ModelNew = Model.
  std::string baseline = kReference;
  baseline += "\nModelNew = Model\n";
  const auto r = run_request(compare(ref_model(), candidate(baseline), 10), true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_TRUE(exec(r).at("correctness").as_bool());
  EXPECT_TRUE(extensions(r).empty());
}

} // namespace
} // namespace keval::test::python

#endif // KEVAL_TEST_PYTHON_EXECUTABLE
