// Device metrics (issue 18) end to end on a real GPU: a memory-bound and a compute-bound cuda
// kernel land on their sides of the roofline, a compare reports both sides under their NVTX
// names, and a request without the flag collects nothing. Skipped, with the reason, only when
// this machine has no usable CUDA device.
#include "support/cuda_device.hpp"
#include "support/test_env.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

namespace keval::test {
namespace {

namespace json = boost::json;
using result::Verdict;

class DeviceMetricsGpu : public ::testing::Test {
protected:
  void SetUp() override {
    KEVAL_SKIP_WITHOUT_CUDA_DEVICE();
    ASSERT_NE(built_registry().find("cuda"), nullptr) << "the cuda plugin was not built";
  }
};

// 16 M floats a side: 192 MiB of traffic, well past the L2.
constexpr int64_t kMetricsN = 1 << 24;

const char* kMetricsAdd = R"(
extern "C" __global__ void vector_add(const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + y[i];
})";

// Eight independent FMA chains per thread in registers: thousands of FLOPs per byte written.
const char* kFmaLoop = R"(
extern "C" __global__ void fma_loop(const float* seed, float* out, int iterations) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  float a[8];
  for (int k = 0; k < 8; ++k) a[k] = seed[i] + k;
  for (int it = 0; it < iterations; ++it)
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] = a[k] * 1.0001f + 0.9999f;
  float sum = 0;
  for (int k = 0; k < 8; ++k) sum += a[k];
  out[i] = sum;
})";

json::object add_kernel(int64_t n = kMetricsN) {
  const std::string count = std::to_string(n);
  json::object k;
  k["source_code"] = kMetricsAdd;
  k["kernel_type"] = "cuda";
  k["io"] = json::parse(R"({"args": [
    {"name": "x", "type": "tensor", "tensor_spec": {"shape": [)" +
                        count +
                        R"(], "dtype": "float32", "init": {"kind": "randn"}}},
    {"name": "y", "type": "tensor", "tensor_spec": {"shape": [)" +
                        count +
                        R"(], "dtype": "float32", "init": {"kind": "randn"}}},
    {"name": "out", "type": "tensor", "role": "output", "tensor_spec": {"shape": [)" +
                        count + R"(], "dtype": "float32"}},
    {"name": "n", "type": "int", "value": )" +
                        count + R"(}], "launch": {"grid": {"x": )" +
                        std::to_string((n + 255) / 256) + R"(}, "block": {"x": 256}}})");
  return k;
}

json::object fma_kernel() {
  constexpr int64_t kThreads = 528 * 256;
  const std::string count = std::to_string(kThreads);
  json::object k;
  k["source_code"] = kFmaLoop;
  k["kernel_type"] = "cuda";
  k["io"] = json::parse(R"({"args": [
    {"name": "seed", "type": "tensor", "tensor_spec": {"shape": [)" +
                        count +
                        R"(], "dtype": "float32", "init": {"kind": "uniform"}}},
    {"name": "out", "type": "tensor", "role": "output", "tensor_spec": {"shape": [)" +
                        count + R"(], "dtype": "float32"}},
    {"name": "iterations", "type": "int", "value": 4096}],
    "launch": {"grid": {"x": 528}, "block": {"x": 256}}})");
  return k;
}

const json::object& metadata(const result::Response& r) {
  return r.body.at("kernel_exec_result").at("metadata").as_object();
}

double value(const json::object& kernel, const char* section, const char* key) {
  return kernel.at(section).at(key).at("value").to_number<double>();
}

// The one kernel a launch of these plugins issues, from a side's device_metrics.
const json::object& only_kernel(const json::object& metrics) {
  EXPECT_TRUE(metrics.at("available").as_bool()) << json::serialize(metrics);
  const auto& kernels = metrics.at("kernels").as_array();
  EXPECT_EQ(kernels.size(), 1u) << json::serialize(metrics);
  return kernels.at(0).as_object();
}

TEST_F(DeviceMetricsGpu, VectorAddIsMemoryBoundWithTheBytesItMoves) {
  json::object request{{"kernel", add_kernel()}, {"num_trials", 20}, {"device_metrics", true}};
  const auto r = run_request(request, false, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  const auto& kernel = only_kernel(metadata(r).at("device_metrics").as_object());
  std::cout << "vector add: " << json::serialize(kernel) << "\n";
  EXPECT_NE(json::serialize(kernel.at("name")).find("vector_add"), std::string::npos);
  EXPECT_EQ(kernel.at("roofline").at("bound").as_string(), "memory");
  EXPECT_GT(value(kernel, "speed_of_light", "dram_throughput"), 50.0);
  // Two inputs read, 4 bytes each, within 10 %; of the output, what the L2 still holds when the
  // kernel ends has not reached DRAM yet (ncu counts the same way: 57 MB of 64 MiB).
  const double bytes = 4.0 * kMetricsN;
  EXPECT_NEAR(value(kernel, "memory", "dram_bytes_read"), 2 * bytes, 0.1 * 2 * bytes);
  EXPECT_GT(value(kernel, "memory", "dram_bytes_written"), 0.7 * bytes);
  EXPECT_LT(value(kernel, "memory", "dram_bytes_written"), 1.05 * bytes);
  const std::string source =
      json::serialize(metadata(r).at("device_metrics").at("durations_and_dram_bytes"));
  EXPECT_NE(source.find("runs of their own"), std::string::npos)
      << "durations and DRAM bytes come from unreplayed runs: " << source;
  EXPECT_NE(source.find("durations are gpu__time_duration"), std::string::npos)
      << "durations are ncu's metric, not the trace's intervals: " << source;
  EXPECT_GT(value(kernel, "speed_of_light", "duration"), 0.0);
  // 256 threads, few registers, no shared memory: every warp slot can be filled.
  EXPECT_DOUBLE_EQ(value(kernel, "occupancy", "theoretical_occupancy"), 100.0);
  EXPECT_GT(value(kernel, "occupancy", "achieved_occupancy"), 0.0);
}

TEST_F(DeviceMetricsGpu, RegisterTiledFmaLoopIsComputeBound) {
  json::object request{{"kernel", fma_kernel()}, {"num_trials", 10}, {"device_metrics", true}};
  const auto r = run_request(request, false, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  const auto& kernel = only_kernel(metadata(r).at("device_metrics").as_object());
  std::cout << "fma loop: " << json::serialize(kernel) << "\n";
  EXPECT_EQ(kernel.at("roofline").at("bound").as_string(), "compute");
  EXPECT_EQ(kernel.at("roofline").at("precision").as_string(), "fp32");
  EXPECT_GT(value(kernel, "speed_of_light", "sm_throughput"), 50.0);
  EXPECT_LT(value(kernel, "speed_of_light", "dram_throughput"), 10.0);
  // It writes 528 KiB that stay in the L2, and reads as much: DRAM hardly sees it.
  EXPECT_LT(value(kernel, "memory", "dram_bytes_written"), 64 * 1024.0);
  // 528 * 256 threads, 4096 iterations of 8 FMAs: 2 FLOPs each.
  const double flops = 528.0 * 256 * 4096 * 8 * 2;
  EXPECT_NEAR(kernel.at("roofline").at("flops").at("fp32").at("value").to_number<double>(), flops,
              0.05 * flops);
}

TEST_F(DeviceMetricsGpu, CompareReportsBothSidesUnderTheirNvtxRanges) {
  json::object request{{"ref_kernel", add_kernel()},
                       {"custom_kernel", add_kernel()},
                       {"num_trials", 20},
                       {"job_id", "metrics-compare"},
                       {"device_metrics", json::array{"memory"}}};
  const auto r = run_request(request, true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  const auto& custom = metadata(r).at("device_metrics").as_object();
  const auto& ref = metadata(r).at("ref_device_metrics").as_object();
  EXPECT_EQ(custom.at("nvtx_range").as_string(), "metrics-compare_custom");
  EXPECT_EQ(ref.at("nvtx_range").as_string(), "metrics-compare_original");
  for (const auto* side : {&custom, &ref}) {
    const auto& kernel = only_kernel(*side);
    EXPECT_TRUE(kernel.contains("memory"));
    EXPECT_FALSE(kernel.contains("occupancy")) << "only the section asked for";
    EXPECT_TRUE(kernel.contains("roofline"));
  }
  // The timing was not taken while counters were collected: the speedup of identical kernels
  // stays near 1.
  EXPECT_NEAR(r.body.at("speedup").to_number<double>(), 1.0, 0.2);
}

// "hardware_time": ncu's gpu__time_duration of the kernel, in runs of their own after the samples.
// It spans the trace's interval of the kernel (first block to last) and the front end's processing
// of the launch, so a 60 us add reads about its kernel time; and it leaves the samples alone.
TEST_F(DeviceMetricsGpu, HardwareTimeIsTheKernelsGpuTimeDurationInRunsOfTheirOwn) {
  json::object request{{"ref_kernel", add_kernel()},
                       {"custom_kernel", add_kernel()},
                       {"num_trials", 20},
                       {"hardware_time", 5}};
  const auto r = run_request(request, true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  const auto& work = metadata(r).at("profiling").at("device_work").as_object();
  std::cout << "device work: " << json::serialize(work) << "\n";
  for (const char* side : {"ref", "custom"}) {
    const auto& hardware = work.at(side).at("hardware_time").as_object();
    ASSERT_TRUE(hardware.at("available").as_bool()) << json::serialize(hardware);
    EXPECT_EQ(hardware.at("count").to_number<int64_t>(), 5);
    EXPECT_EQ(hardware.at("kernels").to_number<int64_t>(), 1) << "one kernel a launch";
    EXPECT_FALSE(hardware.contains("kernels_fewest"));
    const double kernel = work.at(side).at("kernel_time").at("median").to_number<double>();
    EXPECT_NEAR(hardware.at("median").to_number<double>(), kernel, 0.3 * kernel)
        << "the same kernel, timed two ways";
  }
  EXPECT_NEAR(work.at("hardware_speedup").to_number<double>(), 1.0, 0.2);
  EXPECT_NEAR(r.body.at("speedup").to_number<double>(), 1.0, 0.2);
}

TEST_F(DeviceMetricsGpu, ASideCanTurnItsMetricsOffAndARequestWithoutTheFlagCollectsNothing) {
  json::object custom = add_kernel();
  custom["device_metrics"] = false;
  json::object request{{"ref_kernel", add_kernel()},
                       {"custom_kernel", custom},
                       {"num_trials", 10},
                       {"device_metrics", true}};
  const auto r = run_request(request, true, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_FALSE(metadata(r).contains("device_metrics"));
  EXPECT_TRUE(metadata(r).at("ref_device_metrics").at("available").as_bool());

  const auto plain = run_request(json::object{{"kernel", add_kernel()}, {"num_trials", 10}}, false,
                                 built_registry());
  ASSERT_EQ(plain.verdict, Verdict::success) << json::serialize(plain.body);
  EXPECT_FALSE(metadata(plain).contains("device_metrics"));
  EXPECT_FALSE(metadata(plain).at("profiling").as_object().contains("device_metrics"));
}

TEST_F(DeviceMetricsGpu, AnUnknownMetricIsReportedAndTheOthersStillCollected) {
  json::object request{
      {"kernel", add_kernel(1 << 20)},
      {"num_trials", 10},
      {"device_metrics", json::array{"dram__bytes_read.sum", "no_such__metric.sum"}}};
  const auto r = run_request(request, false, built_registry());
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  const auto& metrics = metadata(r).at("device_metrics").as_object();
  const auto& kernel = only_kernel(metrics);
  EXPECT_GT(kernel.at("metrics").at("dram__bytes_read.sum").to_number<double>(), 0.0);
  ASSERT_TRUE(metrics.contains("unsupported")) << json::serialize(metrics);
  EXPECT_EQ(metrics.at("unsupported").at(0).at("metric").as_string(), "no_such__metric.sum");
}

} // namespace
} // namespace keval::test
