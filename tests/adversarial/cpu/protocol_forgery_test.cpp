// Forged protocol frames: a candidate writes hand-made "compiled / validated ok / profiled with a
// 45000x speedup / done" frames to every descriptor it holds. Nothing it writes may become a
// verdict, a phase or a timing; under the daemon, nothing may reach a client either.
#include "adversarial_support.hpp"

namespace keval::test::adversarial {
namespace {

using ForgedFrames = TorchAttack;

TEST_F(ForgedFrames, WrittenToEveryDescriptorThenExitMakeNoVerdict) {
  TempDir tmp;
  const auto run = run_cli(relu_compare(source("forge_frames_exit.py"), unique_id("forge-exit")),
                           tmp.path() / "state");
  ASSERT_FALSE(run.body.empty()) << describe(run);
  expect_cli_kernel_failure(run, "the kernel failed");
}

TEST_F(ForgedFrames, WrittenToEveryDescriptorWhileRunningOnMakeNoVerdictOrTiming) {
  TempDir tmp;
  const auto run =
      run_cli(relu_compare(source("forge_frames_continue.py"), unique_id("forge-continue")),
              tmp.path() / "state");
  ASSERT_FALSE(run.body.empty()) << describe(run);
  expect_cli_kernel_failure(run, "the kernel returns zeros");
  // A wrong kernel is never profiled: a profiling phase in the result can only be forged.
  const auto* metadata = exec_result(run.body).if_contains("metadata");
  EXPECT_TRUE(metadata == nullptr || !metadata->is_object() ||
              !metadata->as_object().contains("profiling"))
      << shown(run.body);
}

TEST_F(ForgedFrames, UnderTheDaemonReachNoClientAndMakeNoVerdict) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ready()) << daemon.log();
  const std::string id = unique_id("forge-daemon");
  daemon::HttpResult r;
  try {
    r = daemon.post("/compare", relu_compare(source("forge_frames_exit.py"), id));
  } catch (const std::exception& e) {
    FAIL() << "the answer to the candidate's own request was not HTTP (frames written into the "
              "client's connection?): "
           << e.what();
  }
  ASSERT_EQ(r.status, 200u) << r.body();
  const auto body = body_of(r);
  EXPECT_EQ(text(body.at("job_id")), id) << r.body();
  expect_genuine_failure(body);

  const auto view = daemon.wait_finished(id);
  ASSERT_TRUE(view.at("result").is_object()) << shown(view);
  expect_genuine_failure(view.at("result").as_object());
  std::string health;
  EXPECT_TRUE(daemon.serves_health(&health)) << health;
}

} // namespace
} // namespace keval::test::adversarial
