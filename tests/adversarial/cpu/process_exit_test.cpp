// Ending the process is no way to pass: os._exit(0) inside forward or while the source loads,
// SystemExit(0) and sys.exit(0) each end the job with the kernel failed (the CLI's exit code 1),
// never with a success, and the daemon goes on serving. A runner that crashes is the kernel's
// failure too, and leaves a note of how it died in the result.
#include "adversarial_support.hpp"

namespace keval::test::adversarial {
namespace {

using ::testing::HasSubstr;

// A job whose runner died of SIGSEGV: the kernel's failure, reported as such, with the runner's
// note on its way out in the worker's stderr. Returns that stderr.
std::string expect_runner_crashed(const CliRun& run) {
  EXPECT_FALSE(run.body.empty()) << describe(run);
  expect_cli_kernel_failure(run, "the kernel crashed");
  EXPECT_NE(validation_error(run.body).find("killed by SIGSEGV"), std::string::npos)
      << describe(run);
  // The trusted worker's standard error as the result carries it, its runners' with it.
  std::string note = text(value_at(run.body, "/kernel_exec_result/metadata/worker/stderr"));
  EXPECT_THAT(note, HasSubstr("keval runner (pid ")) << note;
  return note;
}

class ProcessExit : public TorchAttack, public ::testing::WithParamInterface<const char*> {};

TEST_P(ProcessExit, IsAKernelFailure) {
  TempDir tmp;
  const auto run =
      run_cli(relu_compare(source(GetParam()), unique_id("exit")), tmp.path() / "state");
  ASSERT_FALSE(run.body.empty()) << describe(run);
  expect_cli_kernel_failure(run, "the kernel failed");
  EXPECT_FALSE(speedup(run.body).has_value()) << shown(run.body);
}

INSTANTIATE_TEST_SUITE_P(Candidates, ProcessExit,
                         ::testing::Values("exit_in_forward.py", "exit_at_import.py",
                                           "systemexit_in_forward.py", "sys_exit_in_forward.py"),
                         [](const auto& info) {
                           std::string name = info.param;
                           name = name.substr(0, name.find('.'));
                           std::erase(name, '_');
                           return name;
                         });

using RunnerDeath = TorchAttack;

// The runner is watched through a pidfd, not only through its channel, which a process it left
// behind may hold open: a crash is reported as the kernel's (exit 1, "killed by SIGSEGV"), not as
// the job's timeout (keval's failure, exit 3) that waiting for the channel's end came to.
TEST_F(RunnerDeath, IsSeenWhileALeftoverProcessHoldsItsChannel) {
  TempDir tmp;
  const auto run = run_cli(relu_compare(source("crash_with_channel_held.py"), unique_id("crash")),
                           tmp.path() / "state");
  // The runner's note on its way out: a signal sent, and by whom (the runner itself).
  const std::string note = expect_runner_crashed(run);
  EXPECT_THAT(note, HasSubstr("SIGSEGV sent by pid ")) << note;
}

// A real fault: the job fails the same way, and the runner's note says where it faulted and from
// which stack, so that a crash seen once can be read afterwards.
TEST_F(RunnerDeath, AFaultLeavesANoteOfItsAddressAndStack) {
  TempDir tmp;
  const auto run = run_cli(relu_compare(source("bad_address_read.py"), unique_id("fault")),
                           tmp.path() / "state");
  const std::string note = expect_runner_crashed(run);
  EXPECT_THAT(note, HasSubstr("SIGSEGV at address 0x8; its stack:\n")) << note;
  // The frames, one a line: at least the handler's own and the interpreter's under it.
  const size_t stack = note.find("its stack:\n");
  ASSERT_NE(stack, std::string::npos) << note;
  EXPECT_GE(std::count(note.begin() + static_cast<std::ptrdiff_t>(stack), note.end(), '\n'), 3)
      << note;
}

using ProcessExitUnderTheDaemon = TorchAttack;

TEST_F(ProcessExitUnderTheDaemon, IsAKernelFailureAndTheDaemonGoesOnServing) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ready()) << daemon.log();
  for (const char* candidate : {"exit_in_forward.py", "exit_at_import.py"}) {
    SCOPED_TRACE(candidate);
    const std::string id = unique_id("exit-daemon");
    const auto r = daemon.post("/compare", relu_compare(source(candidate), id));
    EXPECT_EQ(r.status, 200u) << "a kernel failure, not keval's: " << r.body();
    const auto body = body_of(r);
    EXPECT_EQ(text(body.at("job_id")), id) << r.body();
    expect_genuine_failure(body);
    std::string health;
    EXPECT_TRUE(daemon.serves_health(&health)) << health;
  }
  // And it still runs jobs: the honest baseline is correct.
  const std::string id = unique_id("after-exit");
  const auto r = daemon.post("/compare", relu_compare(source("honest_model_new.py"), id));
  ASSERT_EQ(r.status, 200u) << r.body();
  EXPECT_TRUE(correctness(body_of(r))) << r.body();
}

} // namespace
} // namespace keval::test::adversarial
