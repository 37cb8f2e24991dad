// Honest controls: KernelBench's baseline (ModelNew = Model) against the same reference the
// attacks use is correct through the CLI and through the daemon, so isolation raises no false
// flags and the attacks' failures are theirs.
#include "adversarial_support.hpp"

namespace keval::test::adversarial {
namespace {

using HonestControl = TorchAttack;

TEST_F(HonestControl, ModelNewEqualsModelIsCorrectThroughTheCli) {
  TempDir tmp;
  const auto run = run_cli(relu_compare(source("honest_model_new.py"), unique_id("honest-cli")),
                           tmp.path() / "state");
  EXPECT_EQ(run.exit_code, 0) << describe(run);
  EXPECT_TRUE(run.stdout_is_result) << describe(run);
  EXPECT_TRUE(correctness(run.body)) << describe(run);
  EXPECT_TRUE(speedup(run.body).has_value()) << describe(run);
}

TEST_F(HonestControl, ModelNewEqualsModelIsCorrectThroughTheDaemon) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ready()) << daemon.log();
  const std::string id = unique_id("honest-daemon");
  const auto r = daemon.post("/compare", relu_compare(source("honest_model_new.py"), id));
  ASSERT_EQ(r.status, 200u) << r.body();
  const auto body = body_of(r);
  EXPECT_EQ(text(body.at("job_id")), id);
  EXPECT_TRUE(correctness(body)) << r.body();
  EXPECT_TRUE(speedup(body).has_value()) << r.body();
  const auto view = daemon.wait_finished(id);
  EXPECT_EQ(text(view.at("status")), "completed") << shown(view);
}

// Each correctness trial runs on buffers of its inputs' shape: the trials after the first reuse
// those of the trial before only where the shape stayed.
TEST_F(HonestControl, InputsThatChangeShapeBetweenTrialsAreEachValidatedAndTimingSaysWhyNot) {
  TempDir tmp;
  const auto run = run_cli(compare_request(kernel("torch", source("reference_relu_growing.py")),
                                           kernel("torch", source("honest_model_new.py")),
                                           unique_id("honest-growing")),
                           tmp.path() / "state");
  const json::object& metadata = exec_result(run.body).at("metadata").as_object();
  const json::object& validation = metadata.at("validation").as_object();
  EXPECT_TRUE(validation.at("ok").as_bool()) << describe(run);
  const json::array& trials = validation.at("trials").as_array();
  EXPECT_EQ(trials.size(), 5u) << describe(run);
  for (const auto& trial : trials)
    EXPECT_TRUE(trial.as_object().at("passed").as_bool()) << describe(run);
  EXPECT_NE(run.out.find("changed its dtype or shape between trials"), std::string::npos)
      << describe(run);
}

// Runners wait in the background (nice 10) while their job has no device, and come forward at
// its grant: the job being timed is not slowed by the compiles of those queued behind it.
TEST_F(HonestControl, RunnersWaitInTheBackgroundUntilTheirJobHoldsItsDevice) {
  TempDir tmp;
  const auto run = run_cli(relu_compare(source("reports_its_nice.py"), unique_id("honest-nice")),
                           tmp.path() / "state");
  ASSERT_EQ(run.exit_code, 0) << describe(run);
  EXPECT_TRUE(correctness(run.body)) << describe(run);
  const auto at_import = marker_lines(json::value(run.body), "KEVAL_NICE import ");
  const auto at_forward = marker_lines(json::value(run.body), "KEVAL_NICE forward ");
  ASSERT_FALSE(at_import.empty()) << describe(run);
  ASSERT_FALSE(at_forward.empty()) << describe(run);
  const json::value& said =
      exec_result(run.body).at("metadata").at("profiling").at("sampling").at("cpu_priority");
  ASSERT_TRUE(said.is_string()) << describe(run);
  const std::string account(said.as_string());
  EXPECT_EQ(at_forward.front(), "0") << account;
  if (account.find("waited at nice 10") == std::string::npos) {
    EXPECT_EQ(at_import.front(), "0") << account;
    GTEST_SKIP() << "runners are not sent to the background here: " << account;
  }
  EXPECT_EQ(at_import.front(), "10") << account;
}

} // namespace
} // namespace keval::test::adversarial
