// Between fork and exec in the child (async-signal-safe calls only).
#pragma once

// Boost 1.81's Process v2 headers with BOOST_PROCESS_USE_STD_FS miss a few includes of their
// own (boost::optional, boost::io::quoted, boost::remove_pointer); provide them first.
#include <boost/io/quoted.hpp>
#include <boost/optional.hpp>
#include <boost/type_traits/remove_pointer.hpp>

#include <boost/process/v2.hpp>

#include <csignal>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

namespace keval::supervisor::detail {

struct ChildSetup {
  // Passes `inherit_fd` to the child as descriptor `target_fd` (-1: none). Done here rather than
  // with posix::bind_fd, whose on_setup in Boost 1.81 falls off the end without returning.
  int inherit_fd = -1;
  int target_fd = -1;

  boost::process::v2::error_code on_setup(boost::process::v2::posix::default_launcher& launcher,
                                          const boost::process::v2::filesystem::path&,
                                          const char* const*) {
    if (target_fd >= 0)
      launcher.fd_whitelist.push_back(target_fd);
    return {};
  }

  boost::process::v2::error_code on_exec_setup(boost::process::v2::posix::default_launcher&,
                                               const boost::process::v2::filesystem::path&,
                                               const char* const*) {
    if (target_fd >= 0) {
      if (inherit_fd == target_fd) {
        // dup2 would be a no-op and leave close-on-exec set: clear it instead.
        if (::fcntl(target_fd, F_SETFD, 0) == -1)
          return {errno, boost::system::system_category()};
      } else if (::dup2(inherit_fd, target_fd) == -1) {
        return {errno, boost::system::system_category()};
      }
    }
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
