// One daemon per state directory: two would both call the other's running jobs interrupted.
#pragma once

#include <filesystem>

namespace keval::daemon::detail {

class StateLock {
public:
  // Creates `state_dir` if needed and locks `state_dir/daemon.lock` (flock; released by the
  // kernel if the daemon dies). Throws std::runtime_error when another process holds it.
  explicit StateLock(const std::filesystem::path& state_dir);
  ~StateLock();
  StateLock(const StateLock&) = delete;
  StateLock& operator=(const StateLock&) = delete;

private:
  int fd_ = -1;
};

} // namespace keval::daemon::detail
