// The CUDA driver kept initialised on the daemon's machine for as long as the daemon serves, by
// one process of its own (`keval-worker --hold-driver`: cuInit, no context, no device memory).
//
// Why: while no process on the machine has the driver initialised, a process's cuInit does the
// machine's whole initialisation again, and the last one's exit undoes it. On the H200
// (2026-11-28, persistence mode on) a fresh process's cuInit took about 100 ms alone and 10 ms
// while another process held it, and its exit 90 to 140 ms against 60 to 80. A daemon serving one
// client's cuda jobs (a fresh worker each, nothing prestarted) paid both on every job. Prestarted
// torch and triton workers hold the driver too, but only while a pool of theirs is kept.
//
// The host itself never loads the driver (device_discovery.hpp): a broken driver must not take the
// daemon down. The holder runs no user code and is the daemon's own child (owned_children.hpp), so
// the orphan reaper leaves it alone; it dies with the daemon.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <boost/json/object.hpp>

namespace keval::daemon {

namespace detail {
class HelperProcess;
}

class DriverHold {
public:
  // Starts `worker_exe --hold-driver` and waits at most `answer_within` for its answer (cuInit
  // on a machine that was idle: a fraction of a second). Never throws: a hold that cannot be had
  // is reported by status(), with why.
  explicit DriverHold(const std::filesystem::path& worker_exe,
                      std::chrono::milliseconds answer_within = std::chrono::seconds(60));
  // No hold, and why none was asked for ("no GPU", "--no-driver-hold").
  static DriverHold none(std::string why);
  // Ends the holder: closes its standard input, then kills it if it has not ended within a few
  // seconds, and reaps it.
  ~DriverHold();
  DriverHold(DriverHold&&) noexcept;
  DriverHold& operator=(DriverHold&&) = delete;
  DriverHold(const DriverHold&) = delete;
  DriverHold& operator=(const DriverHold&) = delete;

  // True while the holder said it holds the driver and is still there.
  bool held() const;
  // What /health shows: {"held": true, "pid", "init_ms"} or {"held": false, "reason"}; a holder
  // that has ended since its answer is not held, with how it ended.
  boost::json::object status() const;

private:
  DriverHold() = default;
  std::unique_ptr<detail::HelperProcess> holder_;
  std::optional<double> init_ms_;
  std::string reason_; // why not held, when it is not
};

} // namespace keval::daemon
