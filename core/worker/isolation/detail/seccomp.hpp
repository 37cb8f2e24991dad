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

} // namespace keval::worker::isolation::detail
