#include "supervisor/orphan_reaper.hpp"

#include "common/log.hpp"
#include "common/process_tree.hpp"
#include "supervisor/owned_children.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <vector>

#include <sys/prctl.h>
#include <sys/wait.h>

namespace keval::supervisor {

namespace {

// Killing a process hands its children to us, so each round reaches one generation further. A
// tree deeper than this (or one that forks faster than we kill) is left to the next call.
constexpr int kMaxRounds = 64;

// Adopted children: every child that is not a registered one. The caller holds a NoSpawnScope.
std::vector<pid_t> adopted_children() {
  std::vector<pid_t> adopted;
  for (const pid_t pid : children_of_self())
    if (!OwnedChildren::contains(pid))
      adopted.push_back(pid);
  return adopted;
}

} // namespace

bool become_child_subreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    return true;
  spdlog::warn("cannot become a child subreaper ({}): processes a dead worker leaves behind "
               "will not be killed",
               std::strerror(errno));
  return false;
}

ReapResult reap_orphans() {
  // One reaper at a time: two could wait for the same pid, and the second would then wait for
  // whatever process reuses it.
  static std::mutex one_reaper;
  std::lock_guard reaper_lock(one_reaper);

  ReapResult result;
  for (int round = 0; round < kMaxRounds; ++round) {
    std::vector<pid_t> killed;
    {
      // No spawn between its fork and its registration meanwhile: such a child would look adopted.
      OwnedChildren::NoSpawnScope no_spawns;
      OwnedChildren::prune();
      for (const pid_t pid : adopted_children())
        if (::kill(pid, SIGKILL) == 0) // a zombie too: it is ours until we reap it
          killed.push_back(pid);
    }
    if (killed.empty())
      break;
    // Outside the scope: a killed child stays ours (a zombie, its pid not reused) until reaped
    // here, and spawning need not wait for it to die.
    for (const pid_t pid : killed) {
      while (::waitpid(pid, nullptr, __WALL) < 0 && errno == EINTR) {
      }
      ++result.killed;
    }
  }
  {
    OwnedChildren::NoSpawnScope no_spawns;
    result.left = adopted_children().size();
  }
  if (result.killed > 0)
    spdlog::warn("killed {} process(es) that ended jobs left behind", result.killed);
  if (result.left > 0)
    spdlog::warn("{} process(es) that ended jobs left behind are still there after {} rounds",
                 result.left, kMaxRounds);
  return result;
}

} // namespace keval::supervisor
