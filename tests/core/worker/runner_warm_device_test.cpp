// A runner's warm_device (SDK 1.4, runner_protocol.hpp): keval's own set-up of the device a
// prestarted worker opened ahead, asked before any user code is loaded. A runner answers it then
// (saying why nothing ran where no device was opened ahead), and refuses it once a compile has
// loaded user code: it stops rather than run keval's warm-up beside that code.
#include "protocol/sandbox_policy.hpp"
#include "worker/runner/runner_client.hpp"
#include "worker/runner/runner_protocol.hpp"

#include "support/test_env.hpp"

#include <gtest/gtest.h>

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

} // namespace
} // namespace keval::worker
