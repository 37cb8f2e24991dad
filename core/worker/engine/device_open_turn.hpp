// One device opening at a time among keval's workers on a machine. Making a CUDA context (and
// cuInit before it) takes the driver's device-wide lock for milliseconds at a time, and every
// other process's driver calls that need it wait: memory allocation, module loading, mapping
// shared memory, tearing a context down. When a warm pool refills, a dozen prestarted processes
// open the device at once; on the H200 a process allocating 8 MiB then waited 3.7 ms at the
// median (0.1 ms alone) and 52 ms at the 99th percentile, and the job holding the GPU saw
// validations and teardowns of several seconds. Taking turns leaves it one opener to wait behind.
//
// The turn is an exclusive flock on a file of this user's (default_lock_file()), released when the
// holder gives it up or dies. Only keval's trusted processes take it, never one that runs user
// code, which could keep it. A turn that does not come within its patience is gone without: the
// order is worth less than the open.
#pragma once

#include "common/unique_fd.hpp"

#include <chrono>
#include <filesystem>
#include <string>

namespace keval::worker {

class DeviceOpenTurn {
public:
  // Waits for the turn on `lock_file` (created, owner-only, when missing) for at most `patience`.
  DeviceOpenTurn(const std::filesystem::path& lock_file, std::chrono::milliseconds patience);
  ~DeviceOpenTurn() = default; // closing the file gives the turn up
  DeviceOpenTurn(const DeviceOpenTurn&) = delete;
  DeviceOpenTurn& operator=(const DeviceOpenTurn&) = delete;

  bool held() const { return held_; }
  // Why the turn is not held ("" when it is): the file could not be used, or the patience ran out.
  const std::string& why_not() const { return why_not_; }
  // How long the constructor waited.
  double waited_ms() const { return waited_ms_; }

  // The machine's turn for this user: `keval-device-open-<euid>.lock` in the temporary directory.
  static std::filesystem::path default_lock_file();
  // How long a prestarted worker waits for its turn: past a few dozen openers in line (each
  // opens three contexts, 0.1 to 0.3 s apiece), it opens anyway.
  static constexpr std::chrono::milliseconds kPatience{15000};

private:
  UniqueFd file_;
  bool held_ = false;
  std::string why_not_;
  double waited_ms_ = 0;
};

} // namespace keval::worker
