// The seccomp filter a runner installs on itself last, before user code loads: the system calls
// no kernel being evaluated needs and that reach other processes or the machine fail with EPERM.
#pragma once

#include <string>

namespace keval::worker::isolation::detail {

struct SeccompLayer {
  bool active = false;
  std::string detail; // what it denies, or why it could not be installed
};

// Needs no_new_privs. Applies to every thread of the process (TSYNC) and to all it starts.
SeccompLayer install_seccomp_filter();

// A second filter that keeps the runner's channel to the trusted worker (descriptor
// `channel_fd`) where keval's own code left it: it cannot be closed, replaced (dup2, dup3,
// close_range over it) or made inheritable across exec (fcntl F_SETFD), and no filter, syscall
// user dispatch or ptrace can intercept the runner's own reads and writes of the channel and
// answer them. Each fails with EPERM, but close_range with ENOSYS (its callers then close one
// descriptor at a time). Installed last: it denies seccomp() itself. Needs no_new_privs;
// applies to every thread (TSYNC).
SeccompLayer install_channel_guard(int channel_fd);

} // namespace keval::worker::isolation::detail
