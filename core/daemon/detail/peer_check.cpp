#include "daemon/detail/peer_check.hpp"

#include "supervisor/owned_children.hpp"
#include "common/process_tree.hpp"

#include <cerrno>
#include <cstring>

#include <sys/socket.h>
#include <unistd.h>

namespace keval::daemon::detail {

namespace {

// Far more than any real process tree; the walk ends at init long before.
constexpr int kMaxDepth = 4096;
// An ancestor may exit while we walk (its children then have a new parent): start again.
constexpr int kMaxWalks = 4;

} // namespace

std::optional<std::string> job_process_refusal(pid_t peer, pid_t self) {
  if (peer <= 0 || peer == self)
    return std::nullopt;
  const std::string who = "process " + std::to_string(peer);
  for (int walk = 0; walk < kMaxWalks; ++walk) {
    pid_t pid = peer;
    bool ancestor_vanished = false;
    for (int depth = 0; depth < kMaxDepth && !ancestor_vanished; ++depth) {
      if (pid == self)
        return who + " runs under this daemon (a job's process)";
      if (supervisor::OwnedChildren::contains(pid))
        return pid == peer ? who + " is one of this daemon's workers"
                           : who + " runs under this daemon's worker " + std::to_string(pid) +
                                 " (a job's process)";
      if (pid <= 1)
        return std::nullopt;
      const auto stat = read_proc_stat(pid);
      if (!stat) {
        if (pid == peer)
          return who + " exited before it could be checked";
        ancestor_vanished = true;
        continue;
      }
      pid = stat->parent; // 0 above init, or for a process of a namespace we cannot see
    }
    if (!ancestor_vanished)
      return who + "'s ancestry is too deep to check";
  }
  return "the ancestors of " + who + " kept exiting while they were checked";
}

std::optional<std::string> unix_peer_refusal(int socket_fd) {
  struct ucred credentials {};
  socklen_t size = sizeof credentials;
  if (::getsockopt(socket_fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0)
    return std::string("its peer cannot be identified (SO_PEERCRED: ") + std::strerror(errno) + ")";
  return job_process_refusal(credentials.pid, ::getpid());
}

} // namespace keval::daemon::detail
