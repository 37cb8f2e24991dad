// Between fork and exec in the child (async-signal-safe calls only), and the parent's side of
// the same spawn: the child is registered as the host's own (owned_children.hpp).
#pragma once

// Boost 1.81's Process v2 headers with BOOST_PROCESS_USE_STD_FS miss a few includes of their
// own (boost::optional, boost::io::quoted, boost::remove_pointer); provide them first.
#include <boost/io/quoted.hpp>
#include <boost/optional.hpp>
#include <boost/type_traits/remove_pointer.hpp>

#include <boost/process/v2.hpp>

#include "supervisor/owned_children.hpp"

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstddef>
#include <memory>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace keval::supervisor::detail {

enum class CloseMethod { close_range, loop };

// Closes every descriptor above 2 except the `count` in `keep`; 0 or an errno. For the child
// between fork and exec: no allocation, async-signal-safe calls only. close_range(2) where the
// kernel has it (5.9+), else (ENOSYS, or `method` says so) one close per number up to the
// RLIMIT_NOFILE soft limit.
inline int close_descriptors_except(const int* keep, size_t count,
                                    CloseMethod method = CloseMethod::close_range) {
  constexpr size_t kMaxKept = 64;
  unsigned int kept[kMaxKept];
  size_t n = 0;
  for (size_t i = 0; i < count; ++i) { // insertion sort of the ones above 2, no duplicates
    if (keep[i] <= 2)
      continue;
    const auto fd = static_cast<unsigned int>(keep[i]);
    size_t at = 0;
    while (at < n && kept[at] < fd)
      ++at;
    if (at < n && kept[at] == fd)
      continue;
    if (n == kMaxKept)
      return E2BIG;
    for (size_t j = n; j > at; --j)
      kept[j] = kept[j - 1];
    kept[at] = fd;
    ++n;
  }
  if (method == CloseMethod::close_range) {
    unsigned int from = 3;
    bool unsupported = false;
    for (size_t i = 0; i <= n && !unsupported; ++i) {
      const unsigned int to = i < n ? kept[i] - 1 : UINT_MAX; // inclusive
      if (i < n && kept[i] == from) {
        from = kept[i] + 1;
        continue;
      }
      if (::syscall(SYS_close_range, from, to, 0) != 0) {
        if (errno != ENOSYS)
          return errno;
        unsupported = true;
      }
      if (i < n)
        from = kept[i] + 1;
    }
    if (!unsupported)
      return 0;
  }
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0)
    return errno;
  const rlim_t end = limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur > INT_MAX
                         ? static_cast<rlim_t>(1) << 20
                         : limit.rlim_cur;
  size_t next_kept = 0;
  for (rlim_t fd = 3; fd < end; ++fd) {
    while (next_kept < n && kept[next_kept] < fd)
      ++next_kept;
    if (next_kept < n && kept[next_kept] == fd)
      continue;
    ::close(static_cast<int>(fd)); // EBADF for most: nothing open there
  }
  return 0;
}

// Pass it last among a spawn's initializers (after process_stdio, whose descriptors it closes
// once they are on 0, 1 and 2), as a temporary: it holds the spawn scope until the child is
// registered, or until it is destroyed when the spawn failed.
struct ChildSetup {
  // Passes `inherit_fd` to the child as descriptor `target_fd` (-1: none). Done here rather than
  // with posix::bind_fd, whose on_setup in Boost 1.81 falls off the end without returning.
  int inherit_fd = -1;
  int target_fd = -1;
  // Held from before the fork until on_success has registered the child (set by on_setup).
  std::shared_ptr<OwnedChildren::SpawnScope> spawning{};

  boost::process::v2::error_code on_setup(boost::process::v2::posix::default_launcher& launcher,
                                          const boost::process::v2::filesystem::path&,
                                          const char* const*) {
    if (target_fd >= 0)
      launcher.fd_whitelist.push_back(target_fd);
    spawning = std::make_shared<OwnedChildren::SpawnScope>();
    return {};
  }

  // In the parent, once the child has exec'd.
  void on_success(boost::process::v2::posix::default_launcher& launcher,
                  const boost::process::v2::filesystem::path&, const char* const*) {
    OwnedChildren::add(launcher.pid);
    spawning.reset();
  }

  boost::process::v2::error_code
  on_exec_setup(boost::process::v2::posix::default_launcher& launcher,
                const boost::process::v2::filesystem::path&, const char* const*) {
    if (target_fd >= 0) {
      if (inherit_fd == target_fd) {
        // dup2 would be a no-op and leave close-on-exec set: clear it instead.
        if (::fcntl(target_fd, F_SETFD, 0) == -1)
          return {errno, boost::system::system_category()};
      } else if (::dup2(inherit_fd, target_fd) == -1) {
        return {errno, boost::system::system_category()};
      }
    }
    // Only the descriptors we chose: whatever the host holds (the daemon's sockets, clients'
    // connections, other workers' channels) must not reach user code, close-on-exec or not.
    // Boost's own closing misses the gaps between whitelisted descriptors (1.81), so it is done
    // here. The launcher's whitelist holds its exec-error pipe (close-on-exec, so gone after
    // exec): kept, so that a failed exec is still reported.
    int keep[66];
    size_t kept = 0;
    if (target_fd >= 0)
      keep[kept++] = target_fd;
    for (size_t i = 0; i < launcher.fd_whitelist.size() && kept < 66; ++i)
      keep[kept++] = launcher.fd_whitelist[i];
    if (const int error = close_descriptors_except(keep, kept); error != 0)
      return {error, boost::system::system_category()};
    // Own process group: killing -pgid reaches every process the job forked.
    if (::setpgid(0, 0) != 0)
      return {errno, boost::system::system_category()};
    // Die with the host: a crashed host must not leave workers holding GPUs.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() == 1)
      ::_exit(127);
    // A crashing kernel must not write multi-gigabyte core files.
    struct rlimit no_core {
      0, 0
    };
    ::setrlimit(RLIMIT_CORE, &no_core);
    // Restore default dispositions the host may have changed (SIGPIPE ignored by servers).
    ::signal(SIGPIPE, SIG_DFL);
    return {};
  }
};

} // namespace keval::supervisor::detail
