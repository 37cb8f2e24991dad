// Nothing of a job outlives it, even when its worker died first (issue 11): what the worker left
// behind (setsid, double forks, their own children) comes to the host, a child subreaper, and
// reap_orphans kills and reaps it, while the host's own children are left alone.
#include "supervisor/orphan_reaper.hpp"
#include "supervisor/owned_children.hpp"
#include "supervisor/process.hpp"
#include "common/process_tree.hpp"
#include "support/test_env.hpp"

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace keval::supervisor {
namespace {

using namespace std::chrono_literals;

// This test process is a subreaper for the test's duration only: other tests in the same
// process expect their leftovers to go to init.
class SubreaperForTest {
public:
  SubreaperForTest() { EXPECT_TRUE(become_child_subreaper()); }
  ~SubreaperForTest() { ::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0); }
};

bool exists(pid_t pid) {
  return std::filesystem::exists("/proc/" + std::to_string(pid));
}

// Kills and reaps what a failing test would otherwise leave running.
class KillAtEnd {
public:
  void add(pid_t pid) { pids_.push_back(pid); }
  ~KillAtEnd() {
    for (const pid_t pid : pids_)
      if (exists(pid) && ::kill(pid, SIGKILL) == 0)
        ::waitpid(pid, nullptr, 0); // ECHILD at once if it is not ours
  }

private:
  std::vector<pid_t> pids_;
};

// Reads one line from `fd` (bounded by the writer: it writes it, then the pipe closes).
std::string read_line(int fd) {
  std::string line;
  char c = 0;
  while (::read(fd, &c, 1) == 1 && c != '\n')
    line += c;
  return line;
}

// Forks a parent that forks a child running `sh -c script` in a session of its own, with its
// stdout on a pipe, then exits: the double fork of a daemonising process. Returns the first line
// the script prints once the parent is reaped, i.e. once the child has been reparented.
std::string double_fork(const char* script) {
  int out[2];
  EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
  const pid_t parent = ::fork();
  if (parent == 0) { // async-signal-safe calls only from here
    if (::fork() == 0) {
      ::setsid();
      ::dup2(out[1], 1);
      const char* argv[] = {"sh", "-c", script, nullptr};
      ::execv("/bin/sh", const_cast<char* const*>(argv));
      ::_exit(127);
    }
    ::_exit(0);
  }
  ::close(out[1]);
  int status = 0;
  EXPECT_EQ(::waitpid(parent, &status, 0), parent);
  const std::string line = read_line(out[0]);
  ::close(out[0]);
  return line;
}

TEST(OrphanReaper, KillsADoubleForkedSessionLeaderLeftBehind) {
  SubreaperForTest subreaper;
  const pid_t sleeper = std::stoi(double_fork("echo $$; exec sleep 100000 >/dev/null 2>&1"));
  KillAtEnd cleanup;
  cleanup.add(sleeper);
  ASSERT_TRUE(exists(sleeper));
  const auto stat = read_proc_stat(sleeper);
  ASSERT_TRUE(stat);
  ASSERT_EQ(stat->parent, ::getpid()); // adopted: its parent died, and we are the subreaper

  const ReapResult result = reap_orphans();
  EXPECT_GE(result.killed, 1u);
  EXPECT_EQ(result.left, 0u);
  EXPECT_FALSE(exists(sleeper)); // killed and reaped: not even a zombie
}

TEST(OrphanReaper, KillsEveryGenerationRoundAfterRound) {
  SubreaperForTest subreaper;
  // The adopted process has a child of its own, which comes to us only once it is killed.
  const std::string pids =
      double_fork("sleep 100000 </dev/null >/dev/null 2>&1 & echo $$ $!; exec sleep 100000 "
                  ">/dev/null 2>&1");
  const size_t space = pids.find(' ');
  ASSERT_NE(space, std::string::npos) << pids;
  const pid_t adopted = std::stoi(pids.substr(0, space));
  const pid_t grandchild = std::stoi(pids.substr(space + 1));
  KillAtEnd cleanup;
  cleanup.add(grandchild);
  cleanup.add(adopted);
  ASSERT_TRUE(exists(adopted));
  ASSERT_TRUE(exists(grandchild));
  ASSERT_EQ(read_proc_stat(grandchild)->parent, adopted);

  const ReapResult result = reap_orphans();
  EXPECT_GE(result.killed, 2u);
  EXPECT_FALSE(exists(adopted));
  EXPECT_FALSE(exists(grandchild));
}

TEST(OrphanReaper, KillsWhatAHelperCommandLeftInASessionOfItsOwn) {
  SubreaperForTest subreaper;
  test::TempDir dir;
  // run_command kills the command's process group at the end; a setsid process is not in it. The
  // command ends only once the leftover is in its own session: it says so through a FIFO.
  const auto r = run_command(
      "/bin/sh",
      {"-c", "cd '" + dir.path().string() +
                 "' && mkfifo ready && { setsid sh -c 'echo $$ > ready; exec sleep 100000' "
                 "</dev/null >/dev/null 2>&1 & } && read pid < ready && echo $pid"},
      60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const pid_t leftover = std::stoi(r.out);
  KillAtEnd cleanup;
  cleanup.add(leftover);
  ASSERT_TRUE(exists(leftover));
  ASSERT_EQ(read_proc_stat(leftover)->parent, ::getpid());

  reap_orphans();
  EXPECT_FALSE(exists(leftover));
}

TEST(OrphanReaper, LeavesTheHostsOwnChildrenAlone) {
  SubreaperForTest subreaper;
  const pid_t own = ::fork();
  if (own == 0) {
    const char* argv[] = {"sleep", "100000", nullptr};
    ::execv("/bin/sleep", const_cast<char* const*>(argv));
    ::_exit(127);
  }
  OwnedChildren::add(own);
  EXPECT_TRUE(OwnedChildren::contains(own));

  reap_orphans();
  EXPECT_TRUE(exists(own));
  EXPECT_EQ(::waitpid(own, nullptr, WNOHANG), 0); // still running, and still ours to reap

  ::kill(own, SIGKILL);
  EXPECT_EQ(::waitpid(own, nullptr, 0), own);
  OwnedChildren::remove(own);
  EXPECT_FALSE(OwnedChildren::contains(own));
}

TEST(OrphanReaper, ReapedChildIsNoLongerOwnedEvenWithoutRemove) {
  // A stale entry (the child reaped, never removed) must not cover a process that reuses the
  // pid: the entry holds the start time too, and only a live process with both matches.
  const pid_t child = ::fork();
  if (child == 0)
    ::_exit(0);
  OwnedChildren::add(child);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_FALSE(OwnedChildren::contains(child)); // gone; a reuse would have another start time
  OwnedChildren::prune();
  EXPECT_FALSE(OwnedChildren::contains(child));
}

TEST(ProcessTree, ReadsParentAndListsChildren) {
  const auto self = read_proc_stat(::getpid());
  ASSERT_TRUE(self);
  EXPECT_EQ(self->parent, ::getppid());
  EXPECT_GT(self->start_time, 0u);
  EXPECT_FALSE(read_proc_stat(0));

  const pid_t child = ::fork();
  if (child == 0) {
    const char* argv[] = {"sleep", "100000", nullptr};
    ::execv("/bin/sleep", const_cast<char* const*>(argv));
    ::_exit(127);
  }
  const auto children = children_of_self();
  EXPECT_NE(std::find(children.begin(), children.end(), child), children.end());
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

} // namespace
} // namespace keval::supervisor
