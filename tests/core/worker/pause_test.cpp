// PausedProcesses (worker/isolation/pause.hpp): the other side's processes stand still while one
// side is timed. Checked on real processes: a tree of two (a child and the grandchild it forked),
// every thread of which is seen stopped while the pause lives and running again after it.
#include "worker/isolation/pause.hpp"

#include "common/process_tree.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <optional>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

namespace keval::worker::isolation {
namespace {

// Whether every thread of `pid` is stopped ('T').
bool stopped(pid_t pid) {
  const std::vector<pid_t> threads = threads_of(pid);
  if (threads.empty())
    return false;
  for (const pid_t tid : threads)
    if (thread_state(pid, tid) != std::optional<char>('T'))
      return false;
  return true;
}

// Waits (bounded) until `pid` has `count` children; returns them.
std::vector<pid_t> children_once(pid_t pid, size_t count) {
  for (int i = 0; i < 2000; ++i) {
    const std::vector<pid_t> children = children_of(pid);
    if (children.size() >= count)
      return children;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return children_of(pid);
}

// A child that forks a grandchild; both spin until killed.
class SpinningTree : public ::testing::Test {
protected:
  void SetUp() override {
    child_ = ::fork();
    ASSERT_GE(child_, 0);
    if (child_ == 0) {
      ::fork(); // both go on spinning
      for (;;) {
      }
    }
    const std::vector<pid_t> grandchildren = children_once(child_, 1);
    ASSERT_EQ(grandchildren.size(), 1u);
    grandchild_ = grandchildren[0];
  }
  void TearDown() override {
    if (grandchild_ > 0)
      ::kill(grandchild_, SIGKILL); // reaped by init once its parent is gone
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      ::waitpid(child_, nullptr, 0);
    }
  }
  pid_t child_ = -1, grandchild_ = -1;
};

TEST_F(SpinningTree, EveryProcessOfTheTreeStopsAndGoesOnAfterwards) {
  {
    const PausedProcesses paused = PausedProcesses::pause({child_}, {}, 2000);
    EXPECT_EQ(paused.size(), 2u);
    EXPECT_EQ(paused.failure(), "");
    EXPECT_TRUE(stopped(child_));
    EXPECT_TRUE(stopped(grandchild_));
  }
  // SIGCONT: both run again (a spinning process is 'R' as soon as it is scheduled).
  for (int i = 0; i < 2000 && (stopped(child_) || stopped(grandchild_)); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_FALSE(stopped(child_));
  EXPECT_FALSE(stopped(grandchild_));
}

TEST_F(SpinningTree, AChildOfOursIsPausedOnlyWhereTheFilterAsks) {
  // No roots: the child is met as a child of this process, its tree with it.
  {
    const PausedProcesses none = PausedProcesses::pause(
        {}, [](pid_t) { return false; }, 2000);
    EXPECT_EQ(none.size(), 0u);
    EXPECT_FALSE(stopped(child_));
  }
  const pid_t child = child_;
  const PausedProcesses paused = PausedProcesses::pause(
      {}, [child](pid_t pid) { return pid == child; }, 2000);
  EXPECT_EQ(paused.size(), 2u);
  EXPECT_TRUE(stopped(child_));
  EXPECT_TRUE(stopped(grandchild_));
}

// A chain of processes, each the child of the one before, every one waiting in pause(): deeper
// than the pause's bound on its rounds, which must not bound how deep a tree it stops (a spinner
// hidden at the bottom of a deep chain would run beside the other side's samples).
TEST(PausedProcesses, EveryProcessOfAChainDeeperThanItsRoundsStops) {
  constexpr int kDepth = 80;
  const pid_t top = ::fork();
  ASSERT_GE(top, 0);
  if (top == 0) {
    for (int level = 1; level < kDepth; ++level)
      if (::fork() != 0)
        break; // the parent stays at its level; the child goes one deeper
    for (;;)
      ::pause();
  }
  std::vector<pid_t> chain{top};
  while (chain.size() < static_cast<size_t>(kDepth)) {
    const std::vector<pid_t> next = children_once(chain.back(), 1);
    ASSERT_EQ(next.size(), 1u) << "level " << chain.size();
    chain.push_back(next[0]);
  }
  {
    const PausedProcesses paused = PausedProcesses::pause({top}, {}, 5000);
    EXPECT_EQ(paused.size(), chain.size());
    EXPECT_EQ(paused.failure(), "");
    for (const pid_t pid : chain)
      EXPECT_TRUE(stopped(pid)) << "pid " << pid;
  }
  for (auto it = chain.rbegin(); it != chain.rend(); ++it)
    ::kill(*it, SIGKILL);
  ::waitpid(top, nullptr, 0);
}

TEST(PausedProcesses, AProcessThatIsGoneIsNoFailure) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0)
    ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child); // reaped: the pid names nothing now
  const PausedProcesses paused = PausedProcesses::pause({child}, {}, 100);
  EXPECT_EQ(paused.size(), 0u);
  EXPECT_EQ(paused.failure(), "");
}

TEST_F(SpinningTree, MovedFromPauseResumesOnlyOnce) {
  PausedProcesses first = PausedProcesses::pause({child_}, {}, 2000);
  PausedProcesses second = std::move(first);
  EXPECT_EQ(first.size(), 0u); // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(second.size(), 2u);
  EXPECT_TRUE(stopped(child_));
}

} // namespace
} // namespace keval::worker::isolation
