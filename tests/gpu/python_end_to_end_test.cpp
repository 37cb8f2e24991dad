// The Python kernel types on a real GPU: torch on the core's CUDA stream, Triton kernels from the
// IOContract, the V2 contract's Triton and multi-kernel examples, KernelBench-style Model against a
// Triton ModelNew, and cross-type comparisons through the core's validation and profiling.
// Skipped, with the reason, when no CUDA device is usable; the Triton tests also when Triton
// is not importable by the interpreter keval embeds.
#ifdef KEVAL_TEST_PYTHON_EXECUTABLE

#include "python_test_support.hpp"
#include "support/cuda_device.hpp"

#include "cuda/driver.hpp"

#include <iostream>

namespace keval::test::python {
namespace {

// Why no CUDA device is usable here, or "" when one is.
class PythonGpu : public ::testing::Test {
protected:
  void SetUp() override {
    KEVAL_SKIP_WITHOUT_CUDA_DEVICE();
    if (!torch_problem().empty())
      GTEST_SKIP() << "torch not importable: " << torch_problem();
    ASSERT_NE(built_registry().find("torch"), nullptr) << "the torch plugin was not built";
  }
};

class TritonGpu : public PythonGpu {
protected:
  void SetUp() override {
    PythonGpu::SetUp();
    if (IsSkipped())
      return;
    static const std::string problem = python_problem("triton");
    if (!problem.empty())
      GTEST_SKIP() << "triton not importable: " << problem;
    ASSERT_NE(built_registry().find("triton"), nullptr) << "the triton plugin was not built";
  }
};

constexpr int64_t kN = 1 << 20;

// The V2 contract's Triton source: two kernels, BLOCK_SIZE a constexpr meta parameter.
const char* kTritonSource = R"(import torch
import triton
import triton.language as tl

@triton.jit
def vector_add_kernel(
    x_ptr, y_ptr, z_ptr,
    n_elements,
    BLOCK_SIZE: tl.constexpr
):
    pid = tl.program_id(0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)

    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    z = x + y
    tl.store(z_ptr + offsets, z, mask=mask)

@triton.jit
def vector_mul_kernel(
    x_ptr, y_ptr, z_ptr,
    n_elements,
    BLOCK_SIZE: tl.constexpr
):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(z_ptr + offsets, x * y, mask=mask)

def calculate_grid(n, block_size):
    return (n + block_size - 1) // block_size
)";

std::string triton_io(int64_t n = kN, int64_t block = 1024) {
  return R"({"args": [
    {"name": "x_ptr", "type": "tensor", "tensor_spec": {"shape": [)" +
         std::to_string(n) + R"(], "dtype": "float32", "init": {"kind": "randn", "seed": 42}}},
    {"name": "y_ptr", "type": "tensor", "tensor_spec": {"shape": [)" +
         std::to_string(n) + R"(], "dtype": "float32", "init": {"kind": "randn", "seed": 43}}},
    {"name": "z_ptr", "type": "tensor", "role": "output",
     "tensor_spec": {"shape": [)" +
         std::to_string(n) + R"(], "dtype": "float32"}},
    {"name": "n_elements", "type": "int", "value": )" +
         std::to_string(n) + R"(},
    {"name": "BLOCK_SIZE", "type": "int", "value": )" +
         std::to_string(block) + R"(, "is_meta": true}],
    "launch": {"grid": {"x": )" +
         std::to_string((n + block - 1) / block) + R"(}, "num_warps": 4, "num_stages": 2}})";
}

json::object triton(const std::string& source, json::object metadata = {}) {
  const std::string io = triton_io();
  return kernel("triton", source, std::move(metadata), io.c_str());
}

json::object torch_function(const std::string& body, const std::string& name = "f") {
  return kernel("torch", "import torch\ndef " + name + "(x, y):\n    return " + body + "\n",
                {{"function_name", name}});
}

std::string method_of(const result::Response& r) {
  return text(exec(r).at("runtime_stats").at("method"));
}

// ---- Triton -------------------------------------------------------------------------------------

TEST_F(TritonGpu, SeedExampleEvaluatesAndIsCompiledBeforeTheGrant) {
  const auto r = run_request(evaluate(triton(kTritonSource), 50), false, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  const auto& info = custom_info(r);
  EXPECT_EQ(text(info.at("kernel_name")), "vector_add_kernel") << "the first kernel found";
  EXPECT_EQ(info.at("kernels").as_array().size(), 2u);
  EXPECT_EQ(text(info.at("precompile").at("status")), "compiled") << json::serialize(info);
  // Its launcher too, before the grant: the first launch then runs no host compiler.
  EXPECT_EQ(text(info.at("precompile").at("launchers").at("status")), "built")
      << json::serialize(info);
  EXPECT_EQ(info.at("precompile").at("launchers").at("count").to_number<int64_t>(), 1);
  EXPECT_EQ(exec(r).at("runtime_stats").at("count").to_number<int64_t>(), 50);
  std::cout << "triton vector add: " << method_of(r) << ", median "
            << exec(r).at("runtime_stats").at("median").to_number<double>() << " ms\n";
}

// Device metrics (issue 18) for the Python kernel types: the torch reference's and the Triton
// candidate's kernels, each counted in its own process and named from its trace.
TEST_F(TritonGpu, DeviceMetricsCountBothSidesKernels) {
  json::object request = compare(torch_function("x + y", "add"), triton(kTritonSource), 20);
  request["device_metrics"] = json::array{"speed_of_light", "memory"};
  const auto r = run_request(request, true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  for (const char* side : {"device_metrics", "ref_device_metrics"}) {
    const auto& metrics = exec(r).at("metadata").at(side).as_object();
    ASSERT_TRUE(metrics.at("available").as_bool()) << side << ": " << json::serialize(metrics);
    const auto& kernels = metrics.at("kernels").as_array();
    ASSERT_FALSE(kernels.empty()) << side;
    const auto& kernel = kernels.at(0).as_object();
    EXPECT_EQ(text(kernel.at("name")).rfind("kernel ", 0), std::string::npos)
        << side << " kernels are named from the trace: " << json::serialize(kernel);
    EXPECT_GT(kernel.at("speed_of_light").at("duration").at("value").to_number<double>(), 0.0);
    EXPECT_EQ(text(kernel.at("roofline").at("bound")), "memory") << json::serialize(kernel);
  }
  EXPECT_NE(text(exec(r).at("metadata").at("device_metrics").at("kernels").at(0).at("name"))
                .find("vector_add_kernel"),
            std::string::npos);
}

TEST_F(TritonGpu, ComparedAgainstATorchReferenceOnTheSameInputs) {
  const auto r = run_request(compare(torch_function("x + y", "add"), triton(kTritonSource), 50),
                             true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_TRUE(exec(r).at("correctness").as_bool());
  EXPECT_GT(r.body.at("speedup").to_number<double>(), 0.0);
}

TEST_F(TritonGpu, KernelNameSelectsTheKernel) {
  const auto r =
      run_request(compare(torch_function("x * y"),
                          triton(kTritonSource, {{"kernel_name", "vector_mul_kernel"}}), 10),
                  true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_EQ(text(custom_info(r).at("kernel_name")), "vector_mul_kernel");
}

TEST_F(TritonGpu, UnknownKernelNameIsACompileError) {
  const auto r = run_request(evaluate(triton(kTritonSource, {{"kernel_name", "missing"}})), false,
                             built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_EQ(compilation_error(r), "Kernel 'missing' not found");
}

TEST_F(TritonGpu, NoKernelUsesTheSeedsMessage) {
  const auto r =
      run_request(evaluate(triton("import triton\n\ndef not_a_kernel(x):\n    return x\n")), false,
                  built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_FALSE(exec(r).at("compiled").as_bool());
  EXPECT_EQ(compilation_error(r), "No @triton.jit kernels found");
}

TEST_F(TritonGpu, TritonCompileErrorIsCompiledFalseWithTheMessage) {
  const auto r = run_request(evaluate(triton(R"(import triton
import triton.language as tl

@triton.jit
def broken_kernel(x_ptr, y_ptr, z_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(z_ptr + offsets, tl.no_such_function(x), mask=mask)
)")),
                             false, built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed) << json::serialize(r.body);
  EXPECT_FALSE(exec(r).at("compiled").as_bool()) << json::serialize(r.body);
  const std::string error = compilation_error(r);
  EXPECT_TRUE(contains(error, "Triton compilation of 'broken_kernel' failed")) << error;
  EXPECT_TRUE(contains(error, "no_such_function")) << error;
}

TEST_F(TritonGpu, WrongKernelFailsWithItsMismatchCount) {
  std::string wrong = kTritonSource;
  const std::string mask =
      "mask = offsets < n_elements\n    x = tl.load(x_ptr + offsets, mask=mask)";
  wrong.replace(wrong.find(mask), mask.size(),
                "mask = offsets < n_elements - 1\n    x = tl.load(x_ptr + offsets, mask=mask)");
  const auto r =
      run_request(compare(torch_function("x + y"), triton(wrong), 10), true, built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_TRUE(contains(validation_error(r), "1 of " + std::to_string(kN))) << validation_error(r);
}

TEST_F(TritonGpu, CompareOfTwoTritonKernels) {
  const auto r = run_request(compare(triton(kTritonSource), triton(kTritonSource), 20), true,
                             built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
}

// ---- KernelBench: torch Model against a Triton ModelNew -----------------------------------------

const char* kKernelBenchModel = R"(import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(a + b)

N = 1 << 22

def get_inputs():
    return [torch.randn(N), torch.randn(N)]

def get_init_inputs():
    return []
)";

const char* kTritonModelNew = R"(import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def add_relu_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(a + b, 0.0), mask=mask)

def add_relu(a, b):
    out = torch.empty_like(a)
    n = a.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
    add_relu_kernel[grid](a, b, out, n, BLOCK=1024)
    return out

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return add_relu(a, b)
)";

TEST_F(TritonGpu, KernelBenchModelAgainstTritonModelNew) {
  const auto r = run_request(
      compare(kernel("torch", kKernelBenchModel), kernel("torch", kTritonModelNew), 100), true,
      built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_TRUE(exec(r).at("correctness").as_bool());
  EXPECT_EQ(exec(r).at("runtime_stats").at("count").to_number<int64_t>(), 100);
  std::cout << "Model vs Triton ModelNew: " << method_of(r) << ", speedup "
            << r.body.at("speedup").to_number<double>() << "\n";
}

TEST_F(TritonGpu, PythonExceptionInATritonLauncherHasItsTraceback) {
  std::string broken = kTritonModelNew;
  const std::string call = "add_relu_kernel[grid](a, b, out, n, BLOCK=1024)";
  broken.replace(broken.find(call), call.size(), "add_relu_kernel[grid](a, b, out, BLOCK=1024)");
  const auto r =
      run_request(compare(kernel("torch", kKernelBenchModel), kernel("torch", broken), 10), true,
                  built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_TRUE(exec(r).at("compiled").as_bool());
  const std::string error = validation_error(r);
  EXPECT_TRUE(contains(error, "ModelNew.forward raised: TypeError")) << error;
  EXPECT_TRUE(contains(error, ", line 18, in add_relu")) << error;
  EXPECT_TRUE(contains(error, "add_relu_kernel[grid](a, b, out, BLOCK=1024)")) << error;
  EXPECT_TRUE(contains(error, ", line 26, in forward")) << error;
}

// ---- multi_kernel: the V2 contract's examples
// ------------------------------------------------------------

const char* kMultiIO = R"({"args": [
    {"name": "x", "type": "tensor", "tensor_spec": {"shape": [1024], "dtype": "float32",
                                                    "init": {"kind": "randn", "seed": 42}},
     "role": "input"},
    {"name": "y", "type": "tensor", "tensor_spec": {"shape": [1024], "dtype": "float32",
                                                    "init": {"kind": "randn", "seed": 43}},
     "role": "input"}]})";

const char* kSeedMultiKernel = R"(import torch
import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """Triton kernel for element-wise addition"""
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    output = x + y
    tl.store(output_ptr + offsets, output, mask=mask)

def run(x, y):
    """Entry point: add tensors using Triton, then multiply by 2 using PyTorch"""
    output = torch.empty_like(x)
    n_elements = x.numel()

    # Launch Triton kernel for addition
    grid = lambda meta: (triton.cdiv(n_elements, meta['BLOCK_SIZE']),)
    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=1024)

    # PyTorch operation for multiplication
    output = output * 2

    return output
)";

// Device metrics count every kernel a multi_kernel launch issues: the Triton add and torch's
// multiply, in launch order.
TEST_F(TritonGpu, DeviceMetricsCountEveryKernelOfAMultiKernelLaunch) {
  json::object request =
      compare(torch_function("(x + y) * 2"),
              kernel("multi_kernel", kSeedMultiKernel, {{"entry_point", "run"}}, kMultiIO), 10);
  request["custom_kernel"].as_object()["device_metrics"] = json::array{"speed_of_light"};
  const auto r = run_request(request, true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  const auto& metrics = exec(r).at("metadata").at("device_metrics").as_object();
  ASSERT_TRUE(metrics.at("available").as_bool()) << json::serialize(metrics);
  const auto& kernels = metrics.at("kernels").as_array();
  ASSERT_GE(kernels.size(), 2u) << json::serialize(metrics);
  EXPECT_NE(text(kernels.at(0).at("name")).find("add_kernel"), std::string::npos)
      << json::serialize(kernels);
  EXPECT_FALSE(exec(r).at("metadata").as_object().contains("ref_device_metrics"));
}

TEST_F(TritonGpu, SeedMultiKernelExampleMatchesTorch) {
  const auto r =
      run_request(compare(torch_function("(x + y) * 2"),
                          kernel("multi_kernel", kSeedMultiKernel,
                                 {{"entry_point", "run"},
                                  {"description", "Add with Triton, multiply with PyTorch"}},
                                 kMultiIO),
                          10),
                  true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_TRUE(exec(r).at("correctness").as_bool());
}

TEST_F(TritonGpu, SeedMultiKernelExampleWithCuPyMatchesTorch) {
  static const std::string cupy = python_problem("cupy");
  if (!cupy.empty())
    GTEST_SKIP() << "cupy not importable: " << cupy;
  // The V2 contract's second example; inputs are uniform so that sqrt sees no negative values.
  const char* source = R"(import torch
import triton
import triton.language as tl
import cupy as cp

@triton.jit
def preprocess_kernel(input_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(input_ptr + offsets, mask=mask)
    result = x * 2.0 + 1.0
    tl.store(output_ptr + offsets, result, mask=mask)

cuda_source = r"""
extern "C" __global__
void compute_kernel(const float* input, float* output, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        output[idx] = sqrtf(input[idx]);
    }
}
"""
compute_kernel = cp.RawKernel(cuda_source, "compute_kernel")

def run(x):
    n_elements = x.numel()
    preprocessed = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(n_elements, meta['BLOCK_SIZE']),)
    preprocess_kernel[grid](x, preprocessed, n_elements, BLOCK_SIZE=256)
    computed = torch.empty_like(preprocessed)
    block_size = 256
    grid_size = (n_elements + block_size - 1) // block_size
    compute_kernel((grid_size,), (block_size,),
                   (cp.asarray(preprocessed), cp.asarray(computed), n_elements))
    result = computed + torch.mean(computed)
    return result
)";
  const char* io = R"({"args": [{"name": "x", "type": "tensor",
      "tensor_spec": {"shape": [65536], "dtype": "float32",
                      "init": {"kind": "uniform", "seed": 5, "low": 0.0, "high": 4.0}}}]})";
  const auto r =
      run_request(compare(kernel("torch",
                                 "import torch\ndef ref(x):\n    c = torch.sqrt(x * 2.0 + 1.0)\n"
                                 "    return c + torch.mean(c)\n",
                                 {{"function_name", "ref"}}),
                          kernel("multi_kernel", source, {{"entry_point", "run"}}, io), 20),
                  true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_TRUE(exec(r).at("correctness").as_bool());
}

// ---- torch on CUDA
// -------------------------------------------------------------------------------

TEST_F(PythonGpu, TorchBuildsOnTheDeviceAndRunsOnTheCoresStream) {
  const auto r = run_request(evaluate(kernel("torch", R"(import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)
        if not self.linear.weight.is_cuda:
            raise RuntimeError("weights were made on the CPU")

    def forward(self, x):
        if torch.cuda.current_stream().cuda_stream == 0:
            raise RuntimeError("not on keval's stream")
        return self.linear(x)

def get_inputs():
    x = torch.randn(64, 512)
    if not x.is_cuda:
        raise RuntimeError("inputs were made on the CPU")
    return [x]

def get_init_inputs():
    return [512]
)"),
                                      100),
                             false, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  // Captured into a CUDA graph: torch's launch overhead is not in the samples.
  EXPECT_EQ(method_of(r), "cuda_graph") << json::serialize(exec(r).at("runtime_stats"));
}

TEST_F(PythonGpu, TorchModelAgainstItselfOnTheGpu) {
  std::string candidate = kKernelBenchModel;
  candidate.replace(candidate.find("class Model("), 12, "class ModelNew(");
  const auto r =
      run_request(compare(kernel("torch", kKernelBenchModel), kernel("torch", candidate), 50), true,
                  built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_TRUE(exec(r).at("correctness").as_bool());
}

TEST_F(PythonGpu, ASynchronisingForwardFallsBackToEventTiming) {
  // .item() synchronises, which a CUDA graph capture cannot contain.
  const auto r = run_request(evaluate(kernel("torch", R"(import torch
class Model(torch.nn.Module):
    def forward(self, x):
        scale = x.abs().max().item()
        return x / scale
def get_inputs():
    return [torch.randn(4096)]
)"),
                                      30),
                             false, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_EQ(method_of(r), "cuda_event");
}

TEST_F(PythonGpu, TorchReferenceAgainstACudaKernel) {
  ASSERT_NE(built_registry().find("cuda"), nullptr) << "the cuda plugin was not built";
  const std::string io = R"({"args": [
    {"name": "x", "type": "tensor", "tensor_spec": {"shape": [65536], "dtype": "float32",
                                                    "init": {"kind": "randn", "seed": 1}}},
    {"name": "y", "type": "tensor", "tensor_spec": {"shape": [65536], "dtype": "float32",
                                                    "init": {"kind": "randn", "seed": 2}}},
    {"name": "out", "type": "tensor", "role": "output",
     "tensor_spec": {"shape": [65536], "dtype": "float32"}},
    {"name": "n", "type": "int", "value": 65536}],
    "launch": {"grid": {"x": 256}, "block": {"x": 256}}})";
  const auto r = run_request(
      compare(torch_function("x + y"),
              kernel("cuda", R"(extern "C" __global__ void add(const float* x, const float* y,
                                                        float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + y[i];
})",
                     {}, io.c_str()),
              20),
      true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_TRUE(exec(r).at("correctness").as_bool());
}

} // namespace
} // namespace keval::test::python

#else // keval was configured without the Python kernel types

#include <gtest/gtest.h>

TEST(PythonGpu, NotBuilt) {
  GTEST_SKIP() << "keval was built without the Python kernel types (KEVAL_HAVE_PYTHON is OFF)";
}

#endif
