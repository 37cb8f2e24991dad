#include "worker/isolation/pause.hpp"

#include "common/process_tree.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <set>
#include <thread>
#include <utility>

#include <unistd.h>

namespace keval::worker::isolation {

namespace {

constexpr int kMaxRounds = 64; // a tree that keeps growing while it is stopped is bounded

// Stopped, or beyond running: a zombie, dead, or gone.
bool thread_is_still(pid_t pid, pid_t tid) {
  const std::optional<char> state = thread_state(pid, tid);
  return !state || *state == 'T' || *state == 't' || *state == 'Z' || *state == 'X';
}

bool process_is_still(pid_t pid) {
  for (const pid_t tid : threads_of(pid))
    if (!thread_is_still(pid, tid))
      return false;
  return true;
}

} // namespace

PausedProcesses::PausedProcesses(PausedProcesses&& other) noexcept
    : stopped_(std::exchange(other.stopped_, {})), failure_(std::move(other.failure_)) {}

PausedProcesses& PausedProcesses::operator=(PausedProcesses&& other) noexcept {
  if (this != &other) {
    resume();
    stopped_ = std::exchange(other.stopped_, {});
    failure_ = std::move(other.failure_);
  }
  return *this;
}

PausedProcesses::~PausedProcesses() {
  resume();
}

void PausedProcesses::resume() {
  for (const pid_t pid : stopped_)
    ::kill(pid, SIGCONT); // one that was killed meanwhile is simply gone (ESRCH)
  stopped_.clear();
}

void PausedProcesses::kill() {
  for (const pid_t pid : stopped_)
    ::kill(pid, SIGKILL);
  stopped_.clear();
}

PausedProcesses PausedProcesses::pause(const std::vector<pid_t>& roots,
                                       const std::function<bool(pid_t)>& pause_orphan,
                                       double wait_ms) {
  PausedProcesses paused;
  std::set<pid_t> signalled;
  std::vector<std::string> problems;
  // Each round stops what it finds; a process stopped in an earlier round cannot fork any more,
  // so the rounds end once the trees stop growing.
  for (int round = 0; round < kMaxRounds; ++round) {
    std::set<pid_t> found;
    for (const pid_t root : roots)
      add_process_tree(root, found);
    // A child met in an earlier round was judged then: its tree is walked, not its uid reread.
    for (const pid_t child : children_of_self())
      if (signalled.count(child) != 0 || (pause_orphan && pause_orphan(child)))
        add_process_tree(child, found);
    bool new_ones = false;
    for (const pid_t pid : found) {
      if (signalled.count(pid) != 0)
        continue;
      new_ones = true;
      signalled.insert(pid);
      if (::kill(pid, SIGSTOP) == 0)
        paused.stopped_.push_back(pid);
      else if (errno != ESRCH)
        problems.push_back("process " + std::to_string(pid) + " cannot be stopped (" +
                           std::strerror(errno) + ")");
    }
    if (!new_ones)
      break;
  }
  // SIGSTOP takes effect when each thread next runs in the kernel: wait until all have.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(wait_ms);
  std::vector<pid_t> moving = paused.stopped_;
  while (!moving.empty()) {
    moving.erase(std::remove_if(moving.begin(), moving.end(), process_is_still), moving.end());
    if (moving.empty() || std::chrono::steady_clock::now() >= deadline)
      break;
    std::this_thread::yield();
  }
  for (const pid_t pid : moving)
    problems.push_back("process " + std::to_string(pid) + " did not stop within " +
                       std::to_string(static_cast<int>(wait_ms)) + " ms");
  for (size_t i = 0; i < problems.size(); ++i)
    paused.failure_ += (i == 0 ? "" : "; ") + problems[i];
  return paused;
}

} // namespace keval::worker::isolation
