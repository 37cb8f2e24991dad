// A program benchmark's time under ComputeEval's timing modes, and what is not believed: a time
// from inside the process longer than the process ran, a profiler that could not collect, a mode
// that measured nothing.
#include "worker/program/timing.hpp"

#include <gmock/gmock.h>

namespace keval::worker::program {
namespace {

using ::testing::HasSubstr;

const char* kProfile = R"({
  "kernels": [{"name": "matmul_tiled", "invocations": 4, "total_duration_ms": 2.0, "avg_duration_ms": 0.5},
              {"name": "debug_fill", "invocations": 1, "total_duration_ms": 0.5, "avg_duration_ms": 0.5}],
  "memory_transfers": {"HtoD": {"count": 1, "total_bytes": 4096, "total_time_ms": 0.25, "bandwidth_gbps": 16}},
  "nvtx_ranges": {"bench": {"wall_clock_time_ms": 3.0, "kernel_time_ms": 2.0, "kernel_invocations": 4,
                            "memcpy_time_ms": 0, "memcpy_count": 0, "memcpy_bytes": 0},
                  "setup": {"wall_clock_time_ms": 1.0, "kernel_time_ms": 0.5, "kernel_invocations": 1,
                            "memcpy_time_ms": 0.25, "memcpy_count": 1, "memcpy_bytes": 4096}},
  "summary": {"total_kernel_time_ms": 2.5, "total_kernels": 2, "total_kernel_invocations": 5,
              "total_memory_transfers": 1, "application_duration_ms": 40.0}})";

request::TimingMode mode(const std::string& type, std::vector<std::string> include = {},
                         std::vector<std::string> exclude = {}, std::string time_type = "kernel") {
  request::TimingMode m;
  m.type = type;
  m.include = std::move(include);
  m.exclude = std::move(exclude);
  m.time_type = std::move(time_type);
  return m;
}

TEST(ProgramTiming, EachModeReadsWhatComputeEvalReads) {
  EXPECT_DOUBLE_EQ(time_of_run(mode("kernels"), 50, "", kProfile).time_ms, 2.5);
  EXPECT_DOUBLE_EQ(time_of_run(mode("kernels", {"matmul_*"}), 50, "", kProfile).time_ms, 2.0);
  EXPECT_DOUBLE_EQ(time_of_run(mode("kernels", {}, {"debug_*"}), 50, "", kProfile).time_ms, 2.0);
  EXPECT_DOUBLE_EQ(time_of_run(mode("region", {"bench"}), 50, "", kProfile).time_ms, 2.0);
  EXPECT_DOUBLE_EQ(time_of_run(mode("region", {}, {}, "wall_clock"), 50, "", kProfile).time_ms,
                   4.0);
  EXPECT_DOUBLE_EQ(time_of_run(mode("gpu"), 50, "", kProfile).time_ms, 2.75);
  EXPECT_DOUBLE_EQ(time_of_run(mode("process"), 50, "", std::nullopt).time_ms, 50.0);
  const BenchmarkRun r = time_of_run(mode("kernels"), 50, "", kProfile);
  EXPECT_EQ(r.metrics.at("summary").at("total_kernels").to_number<int>(), 2);
}

TEST(ProgramTiming, CustomTakesTheLastLineThePogramPrinted) {
  const BenchmarkRun r =
      time_of_run(mode("custom"), 100,
                  "warmup\nCOMPUTE_EVAL_TIME_MS: 9.5\nCOMPUTE_EVAL_TIME_MS: 4.25\n", std::nullopt);
  EXPECT_EQ(r.error, "");
  EXPECT_DOUBLE_EQ(r.time_ms, 4.25);
  EXPECT_THAT(time_of_run(mode("custom"), 100, "time: 3 ms\n", std::nullopt).error,
              HasSubstr("printed no 'COMPUTE_EVAL_TIME_MS: <ms>' line"));
}

TEST(ProgramTiming, ATimeLongerThanTheProcessRanIsNotBelieved) {
  EXPECT_THAT(time_of_run(mode("kernels"), 1.0, "", kProfile).error,
              HasSubstr("more than the 1.000 ms its process ran"));
  EXPECT_THAT(time_of_run(mode("custom"), 2.0, "COMPUTE_EVAL_TIME_MS: 500\n", std::nullopt).error,
              HasSubstr("not believed"));
}

TEST(ProgramTiming, NothingMeasuredOrNothingCollectedIsAnError) {
  EXPECT_THAT(time_of_run(mode("kernels", {"nomatch*"}), 50, "", kProfile).error,
              HasSubstr("measured nothing"));
  EXPECT_THAT(time_of_run(mode("region", {"missing"}), 50, "", kProfile).error,
              HasSubstr("measured nothing"));
  EXPECT_THAT(
      time_of_run(mode("kernels"), 50, "", R"({"errors": ["CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"]})")
          .error,
      HasSubstr("the profiler could not collect"));
  EXPECT_THAT(time_of_run(mode("kernels"), 50, "", "not json").error,
              HasSubstr("not what the profiler writes"));
  EXPECT_THAT(time_of_run(mode("kernels"), 50, "", std::nullopt).error, HasSubstr("no profile"));
}

TEST(ProgramTiming, GlobsAreFnmatchs) {
  EXPECT_TRUE(glob_match("PerfTest*", "PerfTest_large"));
  EXPECT_TRUE(glob_match("*_benchmark", "gemm_benchmark"));
  EXPECT_TRUE(glob_match("k?", "k1"));
  EXPECT_FALSE(glob_match("matmul_*", "debug_matmul_1"));
}

} // namespace
} // namespace keval::worker::program
