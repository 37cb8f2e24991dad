// Nothing of a job outlives it when the job is ended from outside either: by its timeout (the
// host tells the worker to stop; the worker ends every process of the job, setsid and double
// forks included, before it exits), or by the death of the keval process that runs it (the worker
// gets SIGTERM as its parent-death signal and does the same).
#include "adversarial_support.hpp"

#include <csignal>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

extern char** environ;

namespace keval::test::adversarial {
namespace {

using LeftoverAfterTheJobEnds = TorchAttack;

// Both pid files the candidate writes, once it has written them (bounded wait).
std::vector<pid_t> wait_for_pids(const fs::path& dir, std::chrono::milliseconds limit) {
  std::vector<pid_t> pids;
  daemon::eventually(
      [&] {
        pids = recorded_pids(dir, json::value());
        return pids.size() >= 2;
      },
      limit);
  return pids;
}

TEST_F(LeftoverAfterTheJobEnds, ATimeoutEndsEveryProcessOfTheJob) {
  TempDir tmp;
  const DropBox drop;
  const auto pid_dir = drop.path();
  const auto candidate = source("leftover_then_hang.py", {{"PID_DIR", pid_dir.string()}});
  json::object request = relu_compare(candidate, unique_id("leftover-timeout"));
  // Long enough for the candidate's import (torch, and CUDA on a GPU machine) to have run; the
  // forward then hangs until the timeout ends the job.
  request["timeout"] = 30;
  const auto run = run_cli(request, tmp.path() / "state");
  const auto pids = recorded_pids(pid_dir, run.body);
  const auto alive = still_alive(pids);
  kill_leftovers(pids);
  ASSERT_EQ(pids.size(), 2u) << describe(run);
  EXPECT_EQ(run.exit_code, 3) << describe(run); // keval ended it: an infrastructure failure
  EXPECT_TRUE(alive.empty()) << alive.size() << " of the job's processes outlived its timeout";
  // Nor its runners' directories (removed by the worker on SIGTERM, where no destructor runs).
  std::vector<std::string> left;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(tmp.path() / "state" / "work", ec))
    if (entry.path().filename().string().rfind("runner-", 0) == 0)
      left.push_back(entry.path().string());
  EXPECT_TRUE(left.empty()) << left.front();
}

TEST_F(LeftoverAfterTheJobEnds, TheDeathOfKevalEndsEveryProcessOfTheJob) {
  TempDir tmp;
  const DropBox drop;
  const auto pid_dir = drop.path();
  const auto candidate = source("leftover_then_hang.py", {{"PID_DIR", pid_dir.string()}});
  const auto request_path = write_request(
      tmp.path(), "request.json", relu_compare(candidate, unique_id("leftover-host-death")));
  const std::string exe = keval_exe().string();
  const std::string state = (tmp.path() / "state").string();
  std::vector<std::string> args{exe, "compare", request_path.string(), "--state-dir", state};
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t host = -1;
  ASSERT_EQ(posix_spawn(&host, exe.c_str(), &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);

  const auto pids = wait_for_pids(pid_dir, std::chrono::seconds(60));
  ::kill(host, SIGKILL); // keval dies without a word: no cleanup of its own runs
  int status = 0;
  ::waitpid(host, &status, 0);
  const auto alive = still_alive(pids, std::chrono::seconds(5));
  kill_leftovers(pids);
  ASSERT_EQ(pids.size(), 2u) << "the candidate did not leave its processes";
  EXPECT_TRUE(alive.empty()) << alive.size() << " of the job's processes outlived keval";
}

} // namespace
} // namespace keval::test::adversarial
