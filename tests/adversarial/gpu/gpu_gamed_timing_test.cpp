// Issue 13 on the GPU: timing a kernel cannot game. Every timed sample runs on fresh inputs and
// its outputs are checked, so a candidate that stops computing once it believes it is timed (a
// __device__ launch counter, a different graph recorded while the stream is capturing) fails the
// sample it cheats in; work on a stream of its own is flagged (`static`) and `strict` fails it.
// Honest controls (a float4 CUDA add, a fused load_inline GELU, a Triton ModelNew) pass with no
// flag, and ModelNew = Model times both sides with the same method. A candidate that reaches into
// its runner's CUPTI to hide such work either loses its samples' trace (and fails), is still seen,
// or, hidden from the trace, still pays for the work in the wall time the trusted worker measures.
// Skipped, with the reason, without a usable CUDA device (the Python ones also without torch or
// Triton).
#include "adversarial_support.hpp"
#include "support/cuda_device.hpp"

namespace keval::test::adversarial {
namespace {

constexpr int64_t kGamedN = 1 << 16;

json::value gamed_vector_add_io() {
  return vector_add_io_of(kGamedN);
}

std::string method_of(const json::value& stats) {
  const auto* method = stats.is_object() ? stats.as_object().if_contains("method") : nullptr;
  return method != nullptr && method->is_string() ? std::string(method->as_string()) : "";
}

class GpuGamedTiming : public ::testing::Test {
protected:
  void SetUp() override { KEVAL_SKIP_WITHOUT_CUDA_DEVICE(); }
  // Skips (the caller returns on IsSkipped()) unless the plugin of `type` was built and, for the
  // Python types, the embedded interpreter imports torch.
  void require(const std::string& type) {
    if (built_registry().find(type) == nullptr)
      GTEST_SKIP() << "the " << type << " plugin was not built";
    if (type != "cuda" && !torch_problem().empty())
      GTEST_SKIP() << torch_problem();
  }
  // The same request with `strict` naming `flag`: incorrect, and the error says which flag.
  static void expect_strict_fails(json::object request, const std::string& flag,
                                  const fs::path& state_dir) {
    request["job_id"] = unique_id("strict");
    request["strict"] = json::array{json::string(flag)};
    const auto strict = run_cli(request, state_dir);
    EXPECT_FALSE(correctness(strict.body)) << describe(strict);
    EXPECT_NE(validation_error(strict.body).find(flag), std::string::npos) << describe(strict);
  }
  // Both sides' methods are the same, and the result carries no flag.
  static void expect_clean_and_fair(const CliRun& run) {
    EXPECT_EQ(run.exit_code, 0) << describe(run);
    EXPECT_TRUE(correctness(run.body)) << describe(run);
    EXPECT_TRUE(flags_of(run.body).empty()) << json::serialize(flags_of(run.body));
    const auto* ref = run.body.if_contains("ref_runtime");
    ASSERT_NE(ref, nullptr) << describe(run);
    EXPECT_EQ(method_of(*ref), method_of(exec_result(run.body).at("runtime_stats")))
        << describe(run);
  }
};

TEST_F(GpuGamedTiming, ADeviceLaunchCounterThatStopsComputingFailsATimedSample) {
  require("cuda");
  if (IsSkipped())
    return;
  TempDir tmp;
  const auto run = run_cli(
      compare_request(kernel("cuda", source("reference_vector_add.cu"), gamed_vector_add_io()),
                      kernel("cuda", source("device_counter_add.cu", {{"LAUNCHES", "12"}}),
                             gamed_vector_add_io()),
                      unique_id("device-counter")),
      tmp.path() / "state");
  EXPECT_EQ(run.exit_code, 1) << describe(run);
  EXPECT_FALSE(correctness(run.body)) << describe(run);
  EXPECT_NE(validation_error(run.body).find("timed sample"), std::string::npos) << describe(run);
  EXPECT_FALSE(speedup(run.body).has_value()) << describe(run);
}

TEST_F(GpuGamedTiming, ADifferentGraphRecordedWhileCapturingFailsATimedSample) {
  require("torch");
  if (IsSkipped())
    return;
  TempDir tmp;
  const auto run = run_cli(relu_compare(source("capture_substitution.py"), unique_id("capture")),
                           tmp.path() / "state");
  EXPECT_EQ(run.exit_code, 1) << describe(run);
  EXPECT_FALSE(correctness(run.body)) << describe(run);
  EXPECT_NE(validation_error(run.body).find("timed sample"), std::string::npos) << describe(run);
}

TEST_F(GpuGamedTiming, WorkOnAPrivateStreamIsFlaggedAndStrictFailsIt) {
  require("torch");
  if (IsSkipped())
    return;
  TempDir tmp;
  const auto flagged =
      run_cli(relu_compare(source("private_stream.py"), unique_id("stream")), tmp.path() / "a");
  const json::object* flag = flag_named(flagged.body, "static");
  ASSERT_NE(flag, nullptr) << describe(flagged);
  EXPECT_NE(json::serialize(*flag).find("torch.cuda.Stream"), std::string::npos)
      << json::serialize(*flag);
  expect_strict_fails(relu_compare(source("private_stream.py"), ""), "static", tmp.path() / "b");
}

TEST_F(GpuGamedTiming, WorkLeftRunningOnAPrivateStreamIsTimedFlaggedAndStrictFailsIt) {
  require("torch");
  if (IsSkipped())
    return;
  TempDir tmp;
  const auto flagged =
      run_cli(relu_compare(source("private_stream_heavy.py"), unique_id("late")), tmp.path() / "a");
  EXPECT_TRUE(correctness(flagged.body)) << describe(flagged);
  const json::object* flag = flag_named(flagged.body, "work_after_completion");
  ASSERT_NE(flag, nullptr) << describe(flagged);
  const json::object& details = flag->at("details").as_object();
  EXPECT_GT(details.at("samples").to_number<int64_t>(), 0) << json::serialize(*flag);
  EXPECT_GT(details.at("total_ms").to_number<double>(), 0.0) << json::serialize(*flag);
  // The hidden work was added to the samples: a millisecond of spinning is slower than a ReLU.
  ASSERT_TRUE(flagged.body.at("speedup").is_number()) << describe(flagged);
  EXPECT_LT(flagged.body.at("speedup").to_number<double>(), 1.0) << describe(flagged);
  expect_strict_fails(relu_compare(source("private_stream_heavy.py"), ""), "work_after_completion",
                      tmp.path() / "b");
}

// A candidate that reaches into its runner's CUPTI (cupti_tamper.py) to hide work left running
// past the stop event: whatever it does to the trace, the verdict is not fooled.
class GpuTamperedTrace : public GpuGamedTiming {
protected:
  CliRun run_mode(const std::string& mode, const fs::path& state_dir, int64_t trials = 5) {
    return run_cli(compare_request(kernel("torch", source("reference_relu.py")),
                                   kernel("torch", source("cupti_tamper.py", {{"MODE", mode}})),
                                   unique_id(mode), trials),
                   state_dir);
  }
  // What a failure needs to show of a result: its verdict and timing, without the sandbox's
  // report that fills describe()'s window.
  static std::string timing_shown(const CliRun& run) {
    if (run.body.empty())
      return describe(run);
    json::object view{{"exit_code", run.exit_code},
                      {"validation_error", validation_error(run.body)},
                      {"flags", flags_of(run.body)}};
    for (const auto& [key, pointer] : {
             std::pair{"correctness", "/kernel_exec_result/correctness"},
             {"speedup", "/speedup"},
             {"ref_runtime", "/ref_runtime"},
             {"custom_runtime", "/kernel_exec_result/runtime_stats"},
             {"speedup_floor", "/kernel_exec_result/metadata/profiling/speedup_floor"},
             {"sampling", "/kernel_exec_result/metadata/profiling/sampling"},
             {"device_work", "/kernel_exec_result/metadata/profiling/device_work"},
         })
      view[key] = value_at(run.body, pointer);
    return shown(json::value(std::move(view)), 12000);
  }
  // The trace lost the candidate's samples, saying `why`: the side fails, with no speedup (its
  // time cannot be vouched for).
  static void expect_trace_lost(const CliRun& run, const std::string& why) {
    EXPECT_FALSE(correctness(run.body)) << timing_shown(run);
    EXPECT_NE(validation_error(run.body).find(why), std::string::npos) << timing_shown(run);
    EXPECT_FALSE(speedup(run.body).has_value()) << timing_shown(run);
  }
  // The trace either lost the samples or still saw the work and added it to the samples
  // (flagged, no speedup).
  static void expect_caught_by_the_trace(const CliRun& run) {
    if (!correctness(run.body))
      return expect_trace_lost(run, "device trace did not cover");
    ASSERT_NE(flag_named(run.body, "work_after_completion"), nullptr) << timing_shown(run);
    ASSERT_TRUE(speedup(run.body).has_value()) << timing_shown(run);
    EXPECT_LT(*speedup(run.body), 1.0) << timing_shown(run);
  }
  // The candidate's median wall time per sample, as the trusted worker measured it.
  static std::optional<double> custom_wall_median(const json::object& body) {
    const json::value median =
        value_at(body, "/kernel_exec_result/metadata/profiling/sampling/wall_ms/custom/median");
    return median.is_number() ? std::optional(median.to_number<double>()) : std::nullopt;
  }
};

TEST_F(GpuTamperedTrace, TracingTurnedOffLosesTheSamplesAndFailsTheCandidate) {
  require("torch");
  if (IsSkipped())
    return;
  TempDir tmp;
  const auto run = run_mode("off", tmp.path() / "state");
  EXPECT_EQ(run.exit_code, 1) << timing_shown(run);
  expect_trace_lost(run, "device trace did not cover");
}

// A flush forced while its work still runs loses that work's records, and CUPTI says nothing of
// it; a flush forced once the work is done loses nothing, but keval cannot tell the two apart.
// Either way the trace cannot vouch for the samples it covers, and says so.
TEST_F(GpuTamperedTrace, FlushesOfItsOwnLoseTheSamplesAndFailTheCandidate) {
  require("torch");
  if (IsSkipped())
    return;
  for (const std::string mode : {"flush", "early"}) {
    SCOPED_TRACE(mode);
    TempDir tmp;
    const auto run = run_mode(mode, tmp.path() / "state");
    EXPECT_EQ(run.exit_code, 1) << timing_shown(run);
    expect_trace_lost(run, "a flush keval did not ask for");
  }
}

TEST_F(GpuTamperedTrace, BufferCallbacksOfItsOwnDoNotHideTheWork) {
  require("torch");
  if (IsSkipped())
    return;
  TempDir tmp;
  expect_caught_by_the_trace(run_mode("steal", tmp.path() / "state"));
}

// Tracing turned off around its own launch only leaves keval's markers in the trace, so the trace
// cannot see the work, and the runner's reported time is short. The trusted worker's wall time
// still holds the work (the runner waits for its whole context before it replies): no shorter
// than the same work's done honestly on the caller's stream, so the speedup floor built on it is
// no higher.
TEST_F(GpuTamperedTrace, TracingTurnedOffAroundItsLaunchStillCostsItsWallTime) {
  require("torch");
  if (IsSkipped())
    return;
  TempDir tmp;
  constexpr int64_t kTrials = 20;
  const auto blind = run_mode("blind", tmp.path() / "a", kTrials);
  const auto joined = run_mode("joined", tmp.path() / "b", kTrials);
  ASSERT_TRUE(correctness(joined.body)) << timing_shown(joined);
  EXPECT_EQ(flag_named(joined.body, "work_after_completion"), nullptr) << timing_shown(joined);
  ASSERT_TRUE(correctness(blind.body)) << timing_shown(blind);
  const std::optional<double> blind_wall = custom_wall_median(blind.body);
  const std::optional<double> joined_wall = custom_wall_median(joined.body);
  ASSERT_TRUE(blind_wall && joined_wall) << timing_shown(blind) << timing_shown(joined);
  EXPECT_GE(*blind_wall, 0.8 * *joined_wall) << timing_shown(blind) << timing_shown(joined);
}

TEST_F(GpuGamedTiming, AKernelOfItsOwnThatNeverRunsIsFlaggedLibraryOnly) {
  require("torch_cuda");
  if (IsSkipped())
    return;
  TempDir tmp;
  const auto reference = kernel("torch", source("reference_matmul.py"));
  const auto candidate = kernel("torch_cuda", source("library_matmul_load_inline.py"));
  const auto flagged =
      run_cli(compare_request(reference, candidate, unique_id("lib")), tmp.path() / "a");
  EXPECT_TRUE(correctness(flagged.body)) << describe(flagged);
  const json::object* flag = flag_named(flagged.body, "library_only");
  ASSERT_NE(flag, nullptr) << describe(flagged);
  const std::string text = json::serialize(*flag);
  EXPECT_NE(text.find("unused_scale_kernel"), std::string::npos) << text; // defined, never run
  EXPECT_FALSE(flag->at("details").at("timed_kernels").as_array().empty()) << text;
  expect_strict_fails(compare_request(reference, candidate, ""), "library_only", tmp.path() / "b");
}

// Both sides' samples are traced: kernel times beside the end-to-end ones, never above them, the
// candidate's own kernel in its inventory, and the SM clock watched through every sample.
TEST_F(GpuGamedTiming, EveryTimedSampleIsTracedOnBothSides) {
  require("cuda");
  if (IsSkipped())
    return;
  TempDir tmp;
  const auto run = run_cli(
      compare_request(kernel("cuda", source("reference_vector_add.cu"), gamed_vector_add_io()),
                      kernel("cuda", source("float4_add.cu"), gamed_vector_add_io()),
                      unique_id("traced")),
      tmp.path() / "state");
  ASSERT_TRUE(correctness(run.body)) << describe(run);
  const json::object& profiling = exec_result(run.body).at("metadata").at("profiling").as_object();
  const json::object& work = profiling.at("device_work").as_object();
  for (const char* side : {"ref", "custom"}) {
    const json::object& s = work.at(side).as_object();
    ASSERT_TRUE(s.at("traced").as_bool()) << json::serialize(work);
    const double kernel_median = s.at("kernel_time").at("median").to_number<double>();
    const double e2e_median =
        std::string(side) == "ref"
            ? run.body.at("ref_runtime").at("median").to_number<double>()
            : exec_result(run.body).at("runtime_stats").at("median").to_number<double>();
    EXPECT_GT(kernel_median, 0.0) << json::serialize(work);
    EXPECT_LE(kernel_median, e2e_median) << json::serialize(work);
    EXPECT_EQ(s.at("outside").at("samples").to_number<int64_t>(), 0) << json::serialize(work);
  }
  EXPECT_NE(json::serialize(work.at("custom").at("work")).find("vector_add"), std::string::npos)
      << json::serialize(work);
  const json::object& sampling = profiling.at("sampling").as_object();
  ASSERT_TRUE(sampling.contains("throttled_samples")) << json::serialize(sampling);
  EXPECT_GT(sampling.at("sm_clock_mhz").at("max_rated").to_number<double>(), 0.0);
}

TEST_F(GpuGamedTiming, HonestTiledLoadInlineMatmulPassesUnflagged) {
  require("torch_cuda");
  if (IsSkipped())
    return;
  TempDir tmp;
  expect_clean_and_fair(
      run_cli(compare_request(kernel("torch", source("reference_matmul.py")),
                              kernel("torch_cuda", source("tiled_matmul_load_inline.py")),
                              unique_id("tiled")),
              tmp.path() / "state"));
}

TEST_F(GpuGamedTiming, HonestFloat4CudaAddPassesUnflagged) {
  require("cuda");
  if (IsSkipped())
    return;
  TempDir tmp;
  expect_clean_and_fair(run_cli(
      compare_request(kernel("cuda", source("reference_vector_add.cu"), gamed_vector_add_io()),
                      kernel("cuda", source("float4_add.cu"), gamed_vector_add_io()),
                      unique_id("float4")),
      tmp.path() / "state"));
}

TEST_F(GpuGamedTiming, HonestFusedGeluLoadInlinePassesUnflagged) {
  require("torch_cuda");
  if (IsSkipped())
    return;
  TempDir tmp;
  expect_clean_and_fair(run_cli(
      compare_request(kernel("torch", source("reference_gelu.py")),
                      kernel("torch_cuda", source("fused_gelu_load_inline.py")), unique_id("gelu")),
      tmp.path() / "state"));
}

TEST_F(GpuGamedTiming, HonestTritonModelNewPassesUnflagged) {
  require("torch");
  if (IsSkipped())
    return;
  TempDir tmp;
  expect_clean_and_fair(run_cli(relu_compare(source("triton_relu_model_new.py"), unique_id("tri")),
                                tmp.path() / "state"));
}

} // namespace
} // namespace keval::test::adversarial
