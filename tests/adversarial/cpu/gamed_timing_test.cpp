// Timing and checks a kernel cannot game (issue 13), on the CPU: every timed sample runs on fresh
// inputs from the job's secret seed and its outputs are checked, so a candidate that stops
// computing once it believes it is being timed fails the sample it cheats in; what a verdict
// cannot settle is flagged ({name, reason, details} in kernel_exec_result.metadata.flags) and
// made a failure by `strict`. Honest controls pass with no flag.
#include "adversarial_support.hpp"

#include <set>

namespace keval::test::adversarial {
namespace {

using GamedTiming = TorchAttack;

CliRun run_mode(const std::string& mode, const json::object& request, const fs::path& state_dir) {
  return run_cli_mode(mode, request, state_dir);
}

json::object torch_compare(const std::string& reference, const std::string& candidate,
                           json::object extra = {}) {
  json::object request = compare_request(kernel("torch", source(reference)),
                                         kernel("torch", candidate), unique_id("gamed"), 10);
  for (auto& [key, value] : extra)
    request[key] = value;
  return request;
}

json::object torch_evaluate(const std::string& candidate_file) {
  return json::object{{"kernel", kernel("torch", source(candidate_file))},
                      {"num_trials", 10},
                      {"job_id", unique_id("gamed-eval")}};
}

TEST_F(GamedTiming, ACandidateThatStopsComputingAfterTheCorrectnessTrialsFailsATimedSample) {
  TempDir tmp;
  const auto run = run_mode(
      "compare", torch_compare("reference_relu.py", source("call_counting.py", {{"CALLS", "5"}})),
      tmp.path() / "state");
  EXPECT_EQ(run.exit_code, 1) << describe(run);
  EXPECT_FALSE(correctness(run.body)) << describe(run);
  EXPECT_NE(validation_error(run.body).find("timed sample 1 of 10"), std::string::npos)
      << describe(run);
  EXPECT_FALSE(speedup(run.body).has_value()) << describe(run);
}

TEST_F(GamedTiming, ACacheKeyedOnAFewInputValuesReturnsAStaleOutputAndFails) {
  TempDir tmp;
  const auto run =
      run_mode("compare", torch_compare("reference_relu.py", source("fingerprint_cache.py")),
               tmp.path() / "state");
  EXPECT_EQ(run.exit_code, 1) << describe(run);
  EXPECT_FALSE(correctness(run.body)) << describe(run);
  EXPECT_FALSE(speedup(run.body).has_value()) << describe(run);
}

TEST_F(GamedTiming, ACacheKeyedOnTheInputsAddressFailsACorrectnessTrial) {
  TempDir tmp;
  const auto run =
      run_mode("compare", torch_compare("reference_relu.py", source("address_cache.py")),
               tmp.path() / "state");
  EXPECT_EQ(run.exit_code, 1) << describe(run);
  EXPECT_FALSE(correctness(run.body)) << describe(run);
  // Caught by the correctness trials, before any timed sample.
  EXPECT_EQ(validation_error(run.body).rfind("trial ", 0), 0u) << describe(run);
  EXPECT_FALSE(speedup(run.body).has_value()) << describe(run);
}

TEST_F(GamedTiming, IdentityOnADegenerateProblemPassesAndIsFlagged) {
  TempDir tmp;
  const auto run =
      run_mode("compare", torch_compare("reference_relu_nonnegative.py", source("identity.py")),
               tmp.path() / "state");
  EXPECT_TRUE(correctness(run.body)) << describe(run);
  const json::object* flag = flag_named(run.body, "degenerate_check");
  ASSERT_NE(flag, nullptr) << describe(run);
  EXPECT_EQ(text(flag->at("details").as_object().at("kind")), "input 0") << shown(*flag);
  EXPECT_FALSE(flag->at("strict").as_bool());
}

TEST_F(GamedTiming, StrictTurnsAFlagIntoAFailureThatSaysWhy) {
  TempDir tmp;
  const auto run = run_mode("compare",
                            torch_compare("reference_relu_nonnegative.py", source("identity.py"),
                                          {{"strict", json::array{"degenerate_check"}}}),
                            tmp.path() / "state");
  EXPECT_EQ(run.exit_code, 1) << describe(run);
  EXPECT_FALSE(correctness(run.body)) << describe(run);
  EXPECT_NE(validation_error(run.body).find("degenerate_check"), std::string::npos)
      << describe(run);
  const json::object* flag = flag_named(run.body, "degenerate_check");
  ASSERT_NE(flag, nullptr) << describe(run);
  EXPECT_TRUE(flag->at("strict").as_bool());
}

TEST_F(GamedTiming, HalfPrecisionWorkPassesTheToleranceAndIsFlaggedWithBothErrors) {
  TempDir tmp;
  const auto run =
      run_mode("compare", torch_compare("reference_matmul.py", source("half_precision_matmul.py")),
               tmp.path() / "state");
  EXPECT_TRUE(correctness(run.body)) << describe(run);
  const json::object* flag = flag_named(run.body, "precision");
  ASSERT_NE(flag, nullptr) << describe(run);
  const auto& details = flag->at("details").as_object();
  EXPECT_EQ(text(details.at("dtype")), "float32");
  EXPECT_GT(details.at("max_abs_diff").to_number<double>(), 1e-4) << shown(*flag);
  EXPECT_GT(details.at("mismatches_at_strict").to_number<int64_t>(), 0) << shown(*flag);
}

TEST_F(GamedTiming, TheSeedIsSecretPerJobAndReproducesARun) {
  TempDir tmp;
  const auto first =
      run_mode("compare", torch_compare("reference_matmul.py", source("half_precision_matmul.py")),
               tmp.path() / "a");
  const auto second =
      run_mode("compare", torch_compare("reference_matmul.py", source("half_precision_matmul.py")),
               tmp.path() / "b");
  const auto seed_of = [](const json::object& body) {
    return exec_result(body).at("metadata").as_object().at("seed").to_number<uint64_t>();
  };
  const uint64_t seed = seed_of(first.body);
  EXPECT_NE(seed, seed_of(second.body)) << "two jobs drew the same secret";
  const auto again = run_mode(
      "compare",
      torch_compare("reference_matmul.py", source("half_precision_matmul.py"), {{"seed", seed}}),
      tmp.path() / "c");
  EXPECT_EQ(seed_of(again.body), seed);
  const json::object* before = flag_named(first.body, "precision");
  const json::object* after = flag_named(again.body, "precision");
  ASSERT_TRUE(before != nullptr && after != nullptr) << describe(first) << describe(again);
  EXPECT_EQ(before->at("details").as_object().at("max_abs_diff"),
            after->at("details").as_object().at("max_abs_diff"))
      << "the same seed drew other inputs";
}

TEST_F(GamedTiming, AnExcessiveSpeedupIsFlaggedAndStrictFailsIt) {
  TempDir tmp;
  // 500 ReLUs against one: tens of times on an idle CPU, but only 7.6x once on a CI machine
  // whose two cores were building; a threshold of 3 keeps the test about the flag, not the load.
  const json::object threshold{{"excessive_speedup_threshold", 3.0}};
  const auto flagged = run_mode(
      "compare", torch_compare("reference_relu_slow.py", source("honest_model_new.py"), threshold),
      tmp.path() / "a");
  EXPECT_TRUE(correctness(flagged.body)) << describe(flagged);
  ASSERT_NE(flag_named(flagged.body, "excessive_speedup"), nullptr) << describe(flagged);
  const auto strict =
      run_mode("compare",
               torch_compare("reference_relu_slow.py", source("honest_model_new.py"),
                             {{"strict", true}, {"excessive_speedup_threshold", 3.0}}),
               tmp.path() / "b");
  EXPECT_FALSE(correctness(strict.body)) << describe(strict);
  EXPECT_NE(validation_error(strict.body).find("excessive_speedup"), std::string::npos)
      << describe(strict);
}

TEST_F(GamedTiming, EvaluateFlagsACandidateReturningItsInput) {
  TempDir tmp;
  const auto run =
      run_mode("evaluate", torch_evaluate("evaluate_returns_input.py"), tmp.path() / "state");
  ASSERT_NE(flag_named(run.body, "output_aliases_input"), nullptr) << describe(run);
}

TEST_F(GamedTiming, EvaluateFlagsOutputsThatDoNotChangeWhenTheInputsDo) {
  TempDir tmp;
  const auto run =
      run_mode("evaluate", torch_evaluate("evaluate_constant_output.py"), tmp.path() / "state");
  const json::object* flag = flag_named(run.body, "constant_output");
  ASSERT_NE(flag, nullptr) << describe(run);
  EXPECT_EQ(flag->at("details").as_object().at("samples").to_number<int64_t>(), 9); // pairs of 10
}

TEST_F(GamedTiming, TheStaticScanFlagsAThreadAndStrictFailsIt) {
  TempDir tmp;
  const auto run =
      run_mode("compare", torch_compare("reference_relu.py", source("thread_after_return.py")),
               tmp.path() / "a");
  EXPECT_TRUE(correctness(run.body)) << describe(run);
  const json::object* flag = flag_named(run.body, "static");
  ASSERT_NE(flag, nullptr) << describe(run);
  bool thread = false;
  for (const auto& f : flag->at("details").as_object().at("findings").as_array())
    thread = thread || text(f.as_object().at("pattern")) == "thread";
  EXPECT_TRUE(thread) << shown(*flag);
  const auto strict = run_mode("compare",
                               torch_compare("reference_relu.py", source("thread_after_return.py"),
                                             {{"strict", json::array{"static"}}}),
                               tmp.path() / "b");
  EXPECT_FALSE(correctness(strict.body)) << describe(strict);
}

TEST_F(GamedTiming, SamplingStopsWhenTheNoiseTargetIsMet) {
  TempDir tmp;
  json::object request = torch_compare("reference_relu.py", source("honest_model_new.py"),
                                       {{"max_noise", 100.0}, {"min_samples", 4}});
  request["num_trials"] = 200;
  const auto run = run_mode("compare", request, tmp.path() / "state");
  ASSERT_TRUE(correctness(run.body)) << describe(run);
  const auto& profiling =
      exec_result(run.body).at("metadata").as_object().at("profiling").as_object();
  const auto& sampling = profiling.at("sampling").as_object();
  EXPECT_EQ(text(sampling.at("stopped_by")), "noise") << shown(sampling);
  EXPECT_LT(sampling.at("samples").to_number<int64_t>(), 200) << shown(sampling);
  EXPECT_GE(sampling.at("samples").to_number<int64_t>(), 4) << shown(sampling);
  EXPECT_EQ(exec_result(run.body).at("runtime_stats").as_object().at("count"),
            sampling.at("samples"));
}

// Each side's device work is traced where the job ran on a CUDA device, and says why not where it
// did not (the CPU, or "device_trace": false); the SM clock likewise. An honest candidate raises
// no flag either way.
TEST_F(GamedTiming, EachSideIsTracedOrSaysWhyNot) {
  TempDir tmp;
  for (const bool trace : {true, false}) {
    const auto run = run_mode("compare",
                              torch_compare("reference_relu.py", source("honest_model_new.py"),
                                            {{"device_trace", trace}}),
                              tmp.path() / (trace ? "traced" : "untraced"));
    ASSERT_TRUE(correctness(run.body)) << describe(run);
    const auto& metadata = exec_result(run.body).at("metadata").as_object();
    const bool on_gpu = text(metadata.at("device").at("type")) == "cuda";
    const auto& profiling = metadata.at("profiling").as_object();
    for (const char* side : {"ref", "custom"}) {
      const auto& work = profiling.at("device_work").at(side).as_object();
      EXPECT_EQ(work.at("traced").as_bool(), on_gpu && trace) << shown(work);
      if (!on_gpu) {
        EXPECT_NE(text(work.at("reason")).find("no CUDA device"), std::string::npos) << shown(work);
      } else if (!trace) {
        EXPECT_NE(text(work.at("reason")).find("device_trace: false"), std::string::npos)
            << shown(work);
      } else {
        EXPECT_GT(work.at("kernel_time").at("median").to_number<double>(), 0.0) << shown(work);
      }
    }
    const auto& sampling = profiling.at("sampling").as_object();
    EXPECT_EQ(sampling.contains("throttled_samples"), on_gpu) << shown(sampling);
    if (!on_gpu) {
      EXPECT_NE(text(sampling.at("sm_clock")).find("no CUDA device"), std::string::npos);
    }
    EXPECT_TRUE(flags_of(run.body).empty()) << json::serialize(flags_of(run.body));
  }
}

// "hardware_time": each side's launch timed again by the hardware's counters after the samples
// (ncu's gpu__time_duration), as many runs as asked, every kernel of a run counted; on the CPU
// each side says why there is none. Reported beside the verdict, never changing it.
TEST_F(GamedTiming, HardwareTimeIsMeasuredPerSideOrSaysWhyNot) {
  TempDir tmp;
  const auto run = run_mode(
      "compare",
      torch_compare("reference_relu.py", source("honest_model_new.py"), {{"hardware_time", 3}}),
      tmp.path() / "state");
  ASSERT_TRUE(correctness(run.body)) << describe(run);
  const auto& metadata = exec_result(run.body).at("metadata").as_object();
  const bool on_gpu = text(metadata.at("device").at("type")) == "cuda";
  const auto& work = metadata.at("profiling").at("device_work").as_object();
  for (const char* side : {"ref", "custom"}) {
    const auto& hardware = work.at(side).at("hardware_time").as_object();
    EXPECT_EQ(hardware.at("available").as_bool(), on_gpu) << side << ": " << shown(hardware);
    if (!on_gpu) {
      EXPECT_NE(text(hardware.at("reason")).find("needs a CUDA device"), std::string::npos)
          << shown(hardware);
      continue;
    }
    EXPECT_EQ(hardware.at("count").to_number<int64_t>(), 3) << shown(hardware);
    EXPECT_GE(hardware.at("kernels").to_number<int64_t>(), 1) << shown(hardware);
    EXPECT_EQ(text(hardware.at("metric")), "gpu__time_duration.sum");
    const double median = hardware.at("median").to_number<double>();
    EXPECT_GT(median, 0.0) << shown(hardware);
    EXPECT_LE(hardware.at("min").to_number<double>(), median);
    EXPECT_GE(hardware.at("max").to_number<double>(), median);
  }
  EXPECT_EQ(work.contains("hardware_speedup"), on_gpu) << shown(work);
  EXPECT_TRUE(flags_of(run.body).empty()) << json::serialize(flags_of(run.body));

  // Not asked for, not measured.
  const auto plain =
      run_mode("compare", torch_compare("reference_relu.py", source("honest_model_new.py")),
               tmp.path() / "plain");
  ASSERT_TRUE(correctness(plain.body)) << describe(plain);
  const auto& plain_work =
      exec_result(plain.body).at("metadata").at("profiling").at("device_work").as_object();
  EXPECT_FALSE(plain_work.at("custom").as_object().contains("hardware_time")) << shown(plain_work);
}

// The honest controls: no flag, correct, on every path the cases above take.
TEST_F(GamedTiming, HonestCandidatesRaiseNoFlag) {
  TempDir tmp;
  const std::vector<std::pair<std::string, json::object>> honest = {
      {"compare", torch_compare("reference_relu.py", source("honest_model_new.py"))},
      {"compare", torch_compare("reference_matmul.py", source("honest_matmul.py"))},
      {"evaluate", torch_evaluate("evaluate_honest_relu.py")},
  };
  int n = 0;
  for (const auto& [mode, request] : honest) {
    const auto run = run_mode(mode, request, tmp.path() / ("run" + std::to_string(n++)));
    EXPECT_EQ(run.exit_code, 0) << describe(run);
    EXPECT_TRUE(correctness(run.body) || mode == "evaluate") << describe(run);
    EXPECT_TRUE(flags_of(run.body).empty()) << describe(run);
  }
}

} // namespace
} // namespace keval::test::adversarial
