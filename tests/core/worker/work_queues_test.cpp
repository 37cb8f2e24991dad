// One hardware work queue for keval's own processes (worker/engine/work_queues.hpp): set where
// nothing was set, never over an operator's own number, and never inherited by a runner or a
// program step, whose kernels may use streams of their own.
#include "worker/engine/work_queues.hpp"
#include "worker/isolation/sandbox.hpp"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace keval::worker {
namespace {

constexpr const char* kConnections = "CUDA_DEVICE_MAX_CONNECTIONS";
constexpr const char* kMarker = "KEVAL_ONE_WORK_QUEUE";

// Restores the two variables as the test found them.
class WorkQueues : public ::testing::Test {
protected:
  void SetUp() override {
    for (const char* name : {kConnections, kMarker}) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_)
      value ? ::setenv(name.c_str(), value->c_str(), 1) : ::unsetenv(name.c_str());
  }

  static std::vector<std::string> child_environment(protocol::SandboxMode mode) {
    protocol::SandboxPolicy p;
    p.mode = mode;
    p.runner_dir = "/state/work/runner-1-0";
    return isolation::sandbox_environment(p);
  }
  static bool names(const std::vector<std::string>& env, const std::string& variable) {
    return std::any_of(env.begin(), env.end(),
                       [&](const std::string& e) { return e.rfind(variable + "=", 0) == 0; });
  }

private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST_F(WorkQueues, KevalsOwnOneQueueIsSetHereAndNoChildInheritsIt) {
  use_one_work_queue();
  ASSERT_NE(std::getenv(kConnections), nullptr);
  EXPECT_STREQ(std::getenv(kConnections), "1");
  for (const auto mode : {protocol::SandboxMode::standard, protocol::SandboxMode::off}) {
    const std::vector<std::string> env = child_environment(mode);
    EXPECT_FALSE(names(env, kConnections)) << "a runner chooses its own queues";
    EXPECT_FALSE(names(env, kMarker));
  }
  // A second call (a runner of a one-stream type) changes nothing.
  use_one_work_queue();
  EXPECT_STREQ(std::getenv(kConnections), "1");
}

TEST_F(WorkQueues, AnOperatorsOwnNumberIsKeptAndPassedOn) {
  ::setenv(kConnections, "4", 1);
  use_one_work_queue();
  EXPECT_STREQ(std::getenv(kConnections), "4");
  EXPECT_EQ(std::getenv(kMarker), nullptr);
  for (const auto mode : {protocol::SandboxMode::standard, protocol::SandboxMode::off}) {
    const std::vector<std::string> env = child_environment(mode);
    EXPECT_NE(std::find(env.begin(), env.end(), std::string(kConnections) + "=4"), env.end());
  }
}

TEST_F(WorkQueues, TheOperatorCanLeaveEveryProcessAtTheDriversDefault) {
  ::setenv(kMarker, "0", 1);
  use_one_work_queue();
  EXPECT_EQ(std::getenv(kConnections), nullptr);
  for (const auto mode : {protocol::SandboxMode::standard, protocol::SandboxMode::off}) {
    const std::vector<std::string> env = child_environment(mode);
    EXPECT_FALSE(names(env, kConnections));
    EXPECT_NE(std::find(env.begin(), env.end(), std::string(kMarker) + "=0"), env.end())
        << "a runner must see the choice too";
  }
}

TEST_F(WorkQueues, OnlyTheExactVariablesAreKevalsOwn) {
  use_one_work_queue();
  EXPECT_TRUE(is_own_work_queue_setting("CUDA_DEVICE_MAX_CONNECTIONS=1"));
  EXPECT_TRUE(is_own_work_queue_setting("KEVAL_ONE_WORK_QUEUE=1"));
  EXPECT_FALSE(is_own_work_queue_setting("CUDA_DEVICE_MAX_CONNECTIONS_X=1"));
  EXPECT_FALSE(is_own_work_queue_setting("CUDA_VISIBLE_DEVICES=0"));
  EXPECT_FALSE(is_own_work_queue_setting("CUDA_DEVICE_MAX_CONNECTIONS"));
}

} // namespace
} // namespace keval::worker
