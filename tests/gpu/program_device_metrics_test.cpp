// Device metrics of whole programs (cuda_program, issue 18) on a real GPU: one more run of the
// benchmark command under the injection profiler's counter mode counts the kernels the timing
// mode selects, on the solution's side and the baseline's, with their launch shapes. Skipped,
// with the reason, only when this machine has no usable CUDA device; the CPU side (the reasons
// where nothing can be counted) is in tests/plugins/cuda_program/program_job_test.cpp.
#include "support/cuda_device.hpp"
#include "support/program_problems.hpp"
#include "support/test_env.hpp"

#include <set>
#include <string>

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

namespace keval::test {
namespace {

namespace json = boost::json;
using result::Verdict;

class ProgramDeviceMetricsGpu : public ::testing::Test {
protected:
  void SetUp() override {
    KEVAL_SKIP_WITHOUT_CUDA_DEVICE();
    ASSERT_NE(built_registry().find("cuda_program"), nullptr)
        << "the cuda_program plugin was not built";
  }

  // Runs the request; returns kernel_exec_result.metadata.
  json::object run(const json::object& request) {
    const auto r = run_request(request, false, built_registry());
    EXPECT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
    const json::object& exec = r.body.at("kernel_exec_result").as_object();
    EXPECT_TRUE(exec.at("correctness").as_bool()) << json::serialize(r.body);
    return exec.at("metadata").as_object();
  }
};

// The counted kernels' names, each checked to carry the sections asked for.
std::multiset<std::string> counted(const json::object& metrics) {
  EXPECT_TRUE(metrics.at("available").as_bool()) << json::serialize(metrics);
  std::multiset<std::string> names;
  if (!metrics.at("available").as_bool())
    return names;
  EXPECT_NE(std::string(metrics.at("source").as_string()).find("benchmark command"),
            std::string::npos);
  EXPECT_GT(metrics.at("passes").to_number<int64_t>(), 1);
  for (const auto& k : metrics.at("kernels").as_array()) {
    const json::object& kernel = k.as_object();
    names.insert(std::string(kernel.at("name").as_string()));
    EXPECT_GE(kernel.at("speed_of_light").at("sm_throughput").at("value").to_number<double>(), 0)
        << json::serialize(kernel);
    EXPECT_GT(kernel.at("speed_of_light").at("duration").at("value").to_number<double>(), 0)
        << json::serialize(kernel);
    // The launch shape (the trace) and the SM's limits (the driver) reached the report.
    EXPECT_GT(kernel.at("occupancy").at("theoretical_occupancy").at("value").to_number<double>(), 0)
        << json::serialize(kernel);
    EXPECT_EQ(kernel.at("occupancy").at("block_size").at("value").to_number<double>(), 256);
  }
  return names;
}

TEST_F(ProgramDeviceMetricsGpu, TheKernelsOfTheBenchmarkRegionAreCountedOnBothSides) {
  // region "benchmark", time_type kernel: 3 warm-up launches outside it, 20 inside.
  json::object request =
      program_request(load_problem("vector_add_kernel"), "pass", {{"benchmark", true}});
  request["device_metrics"] = true;
  const json::object metadata = run(request);
  std::cout << "solution: " << json::serialize(metadata.at("device_metrics")) << "\n";
  const std::multiset<std::string> twice{"vector_add_kernel", "vector_add_kernel"};
  EXPECT_EQ(counted(metadata.at("device_metrics").as_object()), twice);
  EXPECT_EQ(counted(metadata.at("ref_device_metrics").as_object()), twice);
  // The timing is the benchmark's own runs, untouched by the counted one.
  EXPECT_EQ(metadata.at("program").at("benchmark").at("solution").at("times_ms").as_array().size(),
            3u);
}

TEST_F(ProgramDeviceMetricsGpu, ATimingModeOfKernelsCountsOnlyTheKernelsItSelects) {
  // A solution that launches a second kernel before the vector add.
  json::object problem = load_problem("vector_add_kernel");
  const std::string two_kernels = R"(#include "vector_add.h"
__global__ void keval_noop_kernel() {}
__global__ void vector_add_kernel(const float* a, const float* b, float* c, int n) {
  const int stride = blockDim.x * gridDim.x;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    c[i] = a[i] + b[i];
}
void launch_vector_add(const float* a, const float* b, float* c, int n, cudaStream_t stream) {
  if (n <= 0)
    return;
  keval_noop_kernel<<<1, 256, 0, stream>>>();
  vector_add_kernel<<<(n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096, 256, 0, stream>>>(a, b, c, n);
}
)";
  const auto with_mode = [&](json::object mode) {
    problem["timing_mode"] = std::move(mode);
    json::object request = program_request(problem, "pass", {{"benchmark", true}});
    request["kernel"].as_object()["metadata"].as_object()["solution"].as_object()["files"] =
        json::array{json::object{{"path", "solution.cu"}, {"content", two_kernels}}};
    request["device_metrics"] = json::array{"speed_of_light", "occupancy"};
    return run(request);
  };
  json::object metadata =
      with_mode(json::object{{"type", "kernels"}, {"include", json::array{"vector_add*"}}});
  EXPECT_EQ(counted(metadata.at("device_metrics").as_object()),
            (std::multiset<std::string>{"vector_add_kernel", "vector_add_kernel"}));

  metadata = with_mode(json::object{{"type", "gpu"}});
  EXPECT_EQ(counted(metadata.at("device_metrics").as_object()),
            (std::multiset<std::string>{"keval_noop_kernel", "keval_noop_kernel",
                                        "vector_add_kernel", "vector_add_kernel"}));
  // The baseline launches only the vector add.
  EXPECT_EQ(counted(metadata.at("ref_device_metrics").as_object()),
            (std::multiset<std::string>{"vector_add_kernel", "vector_add_kernel"}));
}

} // namespace
} // namespace keval::test
