// Landlock (Linux ≥ 5.13): what a runner may touch in the filesystem, which TCP it may use, and
// which processes it may signal, enforced by the kernel on the runner and everything it starts.
#pragma once

#include <string>
#include <vector>

namespace keval::worker::isolation::detail {

struct LandlockRequest {
  std::string private_dir;                 // nothing below it is readable (except writable_dirs)
  std::vector<std::string> writable_dirs;  // read, write, create, remove beneath
  std::vector<std::string> readable_dirs;  // read beneath, even within private_dir; no writes
  std::vector<std::string> writable_files; // read and write (devices: /dev/null, /dev/nvidia0, ...)
};

struct LandlockLayer {
  bool active = false;
  std::string detail; // what holds, or why not
};

struct LandlockOutcome {
  int abi = 0; // 0: Landlock is not available
  LandlockLayer filesystem, tcp, scope;
};

// The ABI version this kernel offers (0 when none, with `why`).
int landlock_abi(std::string* why);

// Restricts the calling thread (call while the process has one thread: threads started later
// inherit it) and needs no_new_privs set. Never throws: what could not be applied is reported.
LandlockOutcome restrict_with_landlock(const LandlockRequest& request);

} // namespace keval::worker::isolation::detail
