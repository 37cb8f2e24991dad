// The cuda kernel type end to end on a real GPU: keval's job runner, a fresh keval-worker, the
// cuda plugin (NVRTC + Driver API) and the CUDA engine. Skipped, with the reason, only when this
// machine has no usable CUDA device.
#include "support/cuda_device.hpp"
#include "support/test_env.hpp"

#include "cuda/driver.hpp"

#include <chrono>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

namespace keval::test {
namespace {

namespace json = boost::json;
using result::Verdict;

// Why no CUDA device is usable here, or "" when one is.
class CudaEndToEnd : public ::testing::Test {
protected:
  void SetUp() override {
    KEVAL_SKIP_WITHOUT_CUDA_DEVICE();
    ASSERT_NE(built_registry().find("cuda"), nullptr) << "the cuda plugin was not built";
  }
};

constexpr int64_t kN = 1 << 20;

const char* kAdd = R"(
extern "C" __global__ void vector_add(const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + y[i];
})";

json::object cuda_kernel(const std::string& source, int64_t n = kN) {
  const std::string io = R"({"args": [
    {"name": "x", "type": "tensor", "tensor_spec": {"shape": [)" +
                         std::to_string(n) +
                         R"(], "dtype": "float32", "init": {"kind": "randn", "seed": 1}}},
    {"name": "y", "type": "tensor", "tensor_spec": {"shape": [)" +
                         std::to_string(n) +
                         R"(], "dtype": "float32", "init": {"kind": "randn", "seed": 2}}},
    {"name": "out", "type": "tensor", "role": "output",
     "tensor_spec": {"shape": [)" +
                         std::to_string(n) + R"(], "dtype": "float32"}},
    {"name": "n", "type": "int", "value": )" +
                         std::to_string(n) + R"(}],
    "launch": {"grid": {"x": )" +
                         std::to_string((n + 255) / 256) + R"(}, "block": {"x": 256}}})";
  json::object k;
  k["source_code"] = source;
  k["kernel_type"] = "cuda";
  k["io"] = json::parse(io);
  return k;
}

json::object evaluate(const std::string& source, double timeout = 60, int64_t n = kN) {
  return json::object{
      {"kernel", cuda_kernel(source, n)}, {"num_trials", 100}, {"timeout", timeout}};
}

json::object compare(const std::string& custom) {
  return json::object{{"ref_kernel", cuda_kernel(kAdd)},
                      {"custom_kernel", cuda_kernel(custom)},
                      {"num_trials", 50}};
}

const json::object& exec(const result::Response& r) {
  return r.body.at("kernel_exec_result").as_object();
}

std::string str(const json::value& v) {
  return v.is_string() ? std::string(v.as_string()) : "";
}

TEST_F(CudaEndToEnd, VectorAddIsCorrectAndProfiled) {
  const auto r = run_request(evaluate(kAdd), false, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  const auto& stats = exec(r).at("runtime_stats").as_object();
  EXPECT_EQ(stats.at("count").to_number<int64_t>(), 100);
  EXPECT_GT(stats.at("median").to_number<double>(), 0.0);
  const auto& device = exec(r).at("metadata").at("device").as_object();
  EXPECT_TRUE(device.contains("gpu_type")) << json::serialize(device);
  // The GPU's memory as the job ended, which a daemon sizes its pools of prestarted workers by
  // (supervisor/gpu_memory.hpp): the job's own GPU, named as the timing turn names it.
  const auto& memory = exec(r).at("metadata").at("worker").at("device_memory").as_object();
  EXPECT_EQ(memory.at("gpu"), device.at("pci_bus_id")) << json::serialize(memory);
  const auto total = memory.at("total_bytes").to_number<uint64_t>();
  EXPECT_EQ(total, device.at("total_memory_bytes").to_number<uint64_t>());
  EXPECT_GT(memory.at("free_bytes").to_number<uint64_t>(), 0u);
  EXPECT_LT(memory.at("free_bytes").to_number<uint64_t>(), total); // its contexts use some
}

TEST_F(CudaEndToEnd, CompareOfIdenticalKernelsReportsSpeedup) {
  const auto r = run_request(compare(kAdd), true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_GT(r.body.at("speedup").to_number<double>(), 0.0);
  // Where each side's timer took its time (a runner's account, within the worker's own).
  const auto& parts =
      exec(r).at("metadata").at("profiling").at("sampling").at("time_ms").at("setup_parts");
  for (const char* side : {"ref", "custom"}) {
    const std::string timer = std::string("timer_") + side;
    const auto& in_runner = parts.at(timer + "_in_runner").as_object();
    double within = 0;
    for (const char* part : {"trace_load", "trace_enable", "capture"}) {
      EXPECT_GE(in_runner.at(part).to_number<double>(), 0.0) << part << json::serialize(parts);
      within += in_runner.at(part).to_number<double>();
    }
    EXPECT_LE(within, parts.at(timer).to_number<double>()) << json::serialize(parts);
  }
}

TEST_F(CudaEndToEnd, OffByOneKernelFailsWithMismatchCount) {
  const auto r = run_request(compare(R"(
extern "C" __global__ void vector_add(const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n - 1) out[i] = x[i] + y[i];
})"),
                             true, built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  const std::string error = str(r.body.at("validation_error"));
  EXPECT_NE(error.find("1 of " + std::to_string(kN)), std::string::npos) << error;
}

TEST_F(CudaEndToEnd, KernelSkippingHalfItsOutputsFails) {
  const auto r = run_request(compare(R"(
extern "C" __global__ void vector_add(const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n / 2) out[i] = x[i] + y[i];
})"),
                             true, built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  const std::string error = str(r.body.at("validation_error"));
  EXPECT_NE(error.find(std::to_string(kN / 2) + " of " + std::to_string(kN)), std::string::npos)
      << error;
}

TEST_F(CudaEndToEnd, OutOfBoundsWriteIsAKernelFailureAndTheHostStaysUp) {
  const auto r = run_request(evaluate(R"(
extern "C" __global__ void vector_add(const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i + (1 << 30)] = x[i] + y[i];
})"),
                             false, built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed) << json::serialize(r.body);
  EXPECT_TRUE(exec(r).at("compiled").as_bool());
  EXPECT_FALSE(exec(r).at("correctness").as_bool());
  // 1 GiB past the buffer: the driver reports CUDA_ERROR_INVALID_ADDRESS_SPACE or
  // CUDA_ERROR_ILLEGAL_ADDRESS depending on where that lands; either way it is named.
  EXPECT_NE(str(r.body.at("validation_error")).find("faulted on the device: CUDA_ERROR_"),
            std::string::npos)
      << json::serialize(r.body);
  const auto next = run_request(evaluate(kAdd), false, built_registry());
  EXPECT_EQ(next.verdict, Verdict::success) << "the next job must run normally";
}

TEST_F(CudaEndToEnd, SpinningKernelIsKilledAtItsTimeoutKeepingTheCompileResult) {
  const auto start = std::chrono::steady_clock::now();
  // An atomic read of a flag nobody sets: the compiler cannot prove the loop finite and drop it.
  const auto r = run_request(evaluate(R"(
__device__ int never_set;
extern "C" __global__ void vector_add(const float* x, const float* y, float* out, int n) {
  while (atomicAdd(&never_set, 0) == 0) {}
})",
                                      3),
                             false, built_registry());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.verdict, Verdict::infrastructure);
  EXPECT_TRUE(exec(r).at("compiled").as_bool());
  EXPECT_NE(str(r.body.at("error").at("message")).find("timeout"), std::string::npos);
  EXPECT_LT(seconds, 30.0) << "the worker must be killed, not waited for";
  const auto next = run_request(evaluate(kAdd), false, built_registry());
  EXPECT_EQ(next.verdict, Verdict::success) << "the GPU must be usable after the kill";
}

TEST_F(CudaEndToEnd, CompileErrorCarriesTheNvrtcLog) {
  const auto r = run_request(evaluate("extern \"C\" __global__ void k(float* x) { x[0] = y; }"),
                             false, built_registry());
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_FALSE(exec(r).at("compiled").as_bool());
  EXPECT_NE(str(r.body.at("compilation_error")).find("identifier \"y\" is undefined"),
            std::string::npos)
      << json::serialize(r.body);
}

TEST_F(CudaEndToEnd, TwoProfilingRunsAgreeWithinTenPercent) {
  // 16M floats: long enough (tens of microseconds) that launch jitter does not dominate.
  const int64_t n = 1 << 24;
  const auto a = run_request(evaluate(kAdd, 60, n), false, built_registry());
  const auto b = run_request(evaluate(kAdd, 60, n), false, built_registry());
  ASSERT_EQ(a.verdict, Verdict::success) << json::serialize(a.body);
  ASSERT_EQ(b.verdict, Verdict::success) << json::serialize(b.body);
  const double ma = exec(a).at("runtime_stats").at("median").to_number<double>();
  const double mb = exec(b).at("runtime_stats").at("median").to_number<double>();
  EXPECT_LT(std::abs(ma - mb) / std::min(ma, mb), 0.10) << ma << " ms vs " << mb << " ms";
}

// The other half of the contract: on a machine without a GPU (CI), a cuda request still compiles
// (NVRTC needs no device) and the response says plainly that no CUDA device is present.
TEST(CudaWithoutDevice, CompilesAndReportsThatNoDeviceIsPresent) {
  if (keval::test::no_cuda_device_reason().empty())
    GTEST_SKIP() << "a CUDA device is present; CudaEndToEnd covers this machine";
  ASSERT_NE(built_registry().find("cuda"), nullptr) << "the cuda plugin was not built";
  const auto r = run_request(evaluate(kAdd), false, built_registry());
  EXPECT_EQ(r.verdict, Verdict::infrastructure) << json::serialize(r.body);
  EXPECT_TRUE(exec(r).at("compiled").as_bool()) << json::serialize(r.body);
  const std::string message = str(r.body.at("error").at("message"));
  EXPECT_NE(message.find("needs a CUDA device"), std::string::npos) << message;
  EXPECT_NE(message.find("libcuda.so.1"), std::string::npos) << message;
}

} // namespace
} // namespace keval::test
