// A runner's warm_device (SDK 1.4, runner_protocol.hpp): keval's own set-up of the device a
// prestarted worker opened ahead, asked before any user code is loaded. A runner answers it then
// (saying why nothing ran where no device was opened ahead), and refuses it once a compile has
// loaded user code: it stops rather than run keval's warm-up beside that code. And the trusted
// worker's side (device_warm_up.hpp): its runners warm up one after another on an idle GPU, none
// while a job holds it, and the job's arrival ends the wait.
#include "protocol/sandbox_policy.hpp"
#include "worker/engine/device_turn.hpp"
#include "worker/runner/device_warm_up.hpp"
#include "worker/runner/runner_client.hpp"
#include "worker/runner/runner_protocol.hpp"

#include "support/scoped_env.hpp"
#include "support/test_env.hpp"

#include <ctime>
#include <filesystem>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

namespace keval::worker {
namespace {

namespace json = boost::json;

std::string fault_plugin() {
  return (test::test_plugin_dir() / "libkeval_fault_plugin.so").string();
}

protocol::SandboxPolicy place_in(const test::TempDir& dir) {
  protocol::SandboxPolicy policy;
  policy.mode = protocol::SandboxMode::off;
  policy.work_root = dir.path().string();
  return policy;
}

json::object command(const char* type) {
  json::object c;
  c["type"] = type;
  return c;
}

TEST(RunnerWarmDevice, BeforeUserCodeItAnswersAndSaysWhyNothingRan) {
  test::TempDir dir;
  auto runner = RunnerClient::spawn(test::worker_exe(), {fault_plugin()}, place_in(dir));
  const json::object hello = runner->await_hello();
  // The fault plugin runs on the CPU and has no warm_device: nothing for a worker to warm.
  EXPECT_EQ(hello.at("warms_device"), false) << json::serialize(hello);
  const json::object reply = runner->call(command(runner_msg::kWarmDevice), "warming its device");
  ASSERT_TRUE(RunnerClient::ok(reply)) << json::serialize(reply);
  EXPECT_TRUE(reply.at("warmed").as_array().empty()) << json::serialize(reply);
  EXPECT_FALSE(reply.at("skipped").as_string().empty()) << json::serialize(reply);
  // At most once, as the SDK promises the plugins.
  EXPECT_THROW(runner->call(command(runner_msg::kWarmDevice), "warming its device"), RunnerFailure);
}

TEST(RunnerWarmDevice, AfterACompileTheRunnerRefusesItAndStops) {
  test::TempDir dir;
  auto runner = RunnerClient::spawn(test::worker_exe(), {}, place_in(dir));
  runner->await_hello();
  json::object load = command(runner_msg::kLoad);
  load["plugin"] = fault_plugin();
  ASSERT_TRUE(RunnerClient::ok(runner->call(std::move(load), "loading its plugin")));
  json::object compile = command(runner_msg::kCompile);
  compile["source_code"] = "fault";
  compile["metadata"] = "{}";
  compile["work_dir"] = runner->directory();
  compile["cuda_arch"] = 0;
  compile["side"] = "custom";
  const json::object compiled = runner->call(std::move(compile), "compiling");
  ASSERT_TRUE(RunnerClient::ok(compiled)) << json::serialize(compiled);
  try {
    runner->call(command(runner_msg::kWarmDevice), "warming its device");
    ADD_FAILURE() << "warm_device was answered after user code was loaded";
  } catch (const RunnerFailure& e) {
    EXPECT_NE(std::string(e.what()).find("warming its device"), std::string::npos) << e.what();
  }
}

// A GPU of the test's own, so that no other test's or worker's turn is met; its files removed
// after the test.
class TestGpu {
public:
  TestGpu() : name_("keval-test-" + std::to_string(::getpid()) + "-" + std::to_string(count_++)) {}
  ~TestGpu() {
    std::error_code ec;
    std::filesystem::remove(DeviceTurn::timing_lock_file(name_), ec);
    std::filesystem::remove(DeviceTurn::timing_wish_file(name_), ec);
  }
  const std::string& name() const { return name_; }
  // Idle for a minute: the last job let it go that long ago.
  void idle_a_minute() const {
    const auto wish = DeviceTurn::timing_wish_file(name_);
    { TimingWish touched(wish, std::chrono::milliseconds(0)); }
    timespec times[2]{};
    ::clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= 60;
    times[1] = times[0];
    ASSERT_EQ(::utimensat(AT_FDCWD, wish.c_str(), times, 0), 0);
  }

private:
  static inline int count_ = 0;
  std::string name_;
};

// Two prestarted runners of the fault plugin (CPU: their warm-up says why nothing ran).
struct TwoRunners {
  test::TempDir dir;
  std::unique_ptr<RunnerClient> custom, ref;
  TwoRunners() {
    custom = RunnerClient::spawn(test::worker_exe(), {fault_plugin()}, place_in(dir));
    ref = RunnerClient::spawn(test::worker_exe(), {fault_plugin()}, place_in(dir));
    custom->await_hello();
    ref->await_hello();
  }
  std::vector<std::pair<std::string, RunnerClient*>> both() {
    return {{"custom", custom.get()}, {"ref", ref.get()}};
  }
};

struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() { EXPECT_EQ(::pipe(fds), 0); }
  ~Pipe() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
};

TEST(DeviceWarmUp, OnAGpuIdleAWhileEachRunnerWarmsUpInItsTurn) {
  TestGpu gpu;
  gpu.idle_a_minute();
  TwoRunners runners;
  Pipe job; // no job yet
  const json::object report =
      warm_up_before_job(runners.both(), gpu.name(), job.fds[0],
                         DeviceWarmUpSettings{true, TimingWish::kIdleBeforeWarmUp});
  EXPECT_FALSE(report.contains("not_run")) << json::serialize(report);
  for (const char* side : {"custom", "ref"}) {
    const auto& one = report.at("sides").at(side).as_object();
    EXPECT_TRUE(one.at("warmed").as_array().empty()) << json::serialize(report);
    EXPECT_FALSE(one.at("skipped").as_string().empty()) << json::serialize(report);
    EXPECT_LE(one.at("from_unix_ms").to_number<double>(), one.at("to_unix_ms").to_number<double>());
  }
  // One after the other, each in its own hold of the turn.
  EXPECT_LE(report.at("sides").at("custom").at("to_unix_ms").to_number<double>(),
            report.at("sides").at("ref").at("from_unix_ms").to_number<double>());
  EXPECT_EQ(report.at("found_gpu_busy"), 0);
}

TEST(DeviceWarmUp, NoneWhileAJobHoldsTheGpuAndTheJobsArrivalEndsTheWait) {
  TestGpu gpu;
  gpu.idle_a_minute();
  const TimingWish job_holds_the_gpu(DeviceTurn::timing_wish_file(gpu.name()),
                                     std::chrono::milliseconds(0));
  ASSERT_TRUE(job_holds_the_gpu.held());
  TwoRunners runners;
  Pipe job;
  ASSERT_EQ(::write(job.fds[1], "j", 1), 1); // this worker's job has come
  const json::object report =
      warm_up_before_job(runners.both(), gpu.name(), job.fds[0],
                         DeviceWarmUpSettings{true, std::chrono::milliseconds(0)});
  EXPECT_EQ(report.at("not_run"), "the job came before the custom runner's warm-up")
      << json::serialize(report);
  EXPECT_TRUE(report.at("sides").as_object().empty()) << json::serialize(report);
  EXPECT_GE(report.at("found_gpu_busy").as_int64(), 1);
  // The runners were not asked: still ready for the job (and for a warm-up, asked once).
  EXPECT_TRUE(RunnerClient::ok(runners.ref->call(command(runner_msg::kWarmDevice), "warming")));
}

TEST(DeviceWarmUp, AJobThatIsWaitingGoesFirstEvenOnAnIdleGpu) {
  TestGpu gpu;
  gpu.idle_a_minute();
  TwoRunners runners;
  Pipe job;
  ASSERT_EQ(::write(job.fds[1], "j", 1), 1); // sent as the worker said hello
  const json::object report =
      warm_up_before_job(runners.both(), gpu.name(), job.fds[0],
                         DeviceWarmUpSettings{true, TimingWish::kIdleBeforeWarmUp});
  EXPECT_EQ(report.at("not_run"), "the job came before the custom runner's warm-up")
      << json::serialize(report);
  EXPECT_TRUE(report.at("sides").as_object().empty()) << json::serialize(report);
}

TEST(DeviceWarmUp, AGpuLetGoAMomentAgoIsNotIdleYet) {
  TestGpu gpu;
  { TimingWish last_job(DeviceTurn::timing_wish_file(gpu.name()), std::chrono::milliseconds(0)); }
  TwoRunners runners;
  Pipe job;
  ASSERT_EQ(::write(job.fds[1], "j", 1), 1);
  const json::object report = warm_up_before_job(
      runners.both(), gpu.name(), job.fds[0], DeviceWarmUpSettings{true, std::chrono::minutes(1)});
  EXPECT_TRUE(report.at("sides").as_object().empty()) << json::serialize(report);
  EXPECT_TRUE(report.contains("not_run")) << json::serialize(report);
}

TEST(DeviceWarmUp, TheEnvironmentTurnsItOffOrSetsTheIdleTimeAndABadValueIsNotTaken) {
  {
    const test::ScopedEnv off("KEVAL_DEVICE_WARM_UP", "0");
    const test::ScopedEnv idle("KEVAL_DEVICE_WARM_UP_IDLE_MS", "0");
    const DeviceWarmUpSettings settings = DeviceWarmUpSettings::from_environment();
    EXPECT_FALSE(settings.enabled);
    EXPECT_EQ(settings.idle.count(), 0);
    TwoRunners runners;
    Pipe job;
    EXPECT_EQ(warm_up_before_job(runners.both(), "unused", job.fds[0], settings).at("not_run"),
              "KEVAL_DEVICE_WARM_UP=0");
  }
  const test::ScopedEnv on("KEVAL_DEVICE_WARM_UP", std::nullopt);
  for (const char* bad : {"soon", "-5", "250ms", "99999999"}) {
    const test::ScopedEnv idle("KEVAL_DEVICE_WARM_UP_IDLE_MS", bad);
    const DeviceWarmUpSettings settings = DeviceWarmUpSettings::from_environment();
    EXPECT_TRUE(settings.enabled);
    EXPECT_EQ(settings.idle, TimingWish::kIdleBeforeWarmUp) << bad;
  }
}

} // namespace
} // namespace keval::worker
