// One device verifier per GPU (`keval serve --device-verifier`;
// worker/verifier/device_verifier.hpp): a long-lived keval-worker of the daemon's that holds the
// GPU's CUDA context for the jobs' trusted workers, so a job's processes make and release one
// context, not two or three.
//
// Each verifier is started with a token of its own (random, told on its standard input), which the
// daemon hands to a job only in its grant, beside the verifier's socket: the runners that run user
// code never see a grant. A verifier that has ended (a context a fault broke, a crash) is started
// again in the background; until it answers, jobs granted its GPU open a context of their own and
// say so in their result.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/json/object.hpp>

namespace keval::daemon {

namespace detail {
class HelperProcess;
}

class DeviceVerifiers {
public:
  struct Address {
    std::string socket; // "@keval-verifier-...": an abstract Unix socket
    std::string token;
  };

  // Starts `worker_exe --device-verifier N` for each of `ordinals`, one after another, each
  // waited for at most `answer_within`. Never throws: a verifier that cannot start is reported by
  // status(), with why, and tried again when a job is granted its GPU.
  DeviceVerifiers(std::filesystem::path worker_exe, const std::vector<int>& ordinals,
                  std::chrono::milliseconds answer_within = std::chrono::seconds(60));
  // None, and why ("not asked for (--device-verifier)", "no GPU").
  static std::unique_ptr<DeviceVerifiers> none(std::string why);
  // Ends every verifier (and waits for any being started).
  ~DeviceVerifiers();
  DeviceVerifiers(const DeviceVerifiers&) = delete;
  DeviceVerifiers& operator=(const DeviceVerifiers&) = delete;

  // Whether the daemon runs verifiers at all: its jobs then do not open a context of their own
  // ahead of their grant.
  bool enabled() const { return !gpus_.empty(); }
  // GPU `ordinal`'s verifier while it serves; nullopt while it does not (it is started again in
  // the background: see restart_ended).
  std::optional<Address> address(int ordinal);
  // What GET /health reports as "device_verifiers": {"enabled": true, "gpus": {"0": {"ready",
  // "pid", "socket", "open_ms", "starts", "reason"?}}} or {"enabled": false, "reason"}.
  boost::json::object status() const;

  // A verifier that could not start is tried again after this, doubled for each failure in a row
  // up to a minute; one that served and ended, at once.
  static constexpr std::chrono::milliseconds kRestartEvery{1000};
  // How often the watcher looks whether each verifier still runs.
  static constexpr std::chrono::milliseconds kWatchEvery{250};

private:
  DeviceVerifiers() = default;
  struct Gpu {
    int ordinal = 0;
    std::unique_ptr<detail::HelperProcess> process; // while it serves (or until seen ended)
    Address address;
    double open_ms = 0;
    int starts = 0;
    std::string reason; // why it does not serve, when it does not
    std::chrono::steady_clock::time_point last_start{};
    int failures = 0; // starts in a row that did not serve
  };
  // Starts `gpu`'s verifier; with mutex_ not held (a start takes a context's making).
  void start(Gpu& gpu);
  // restarter_'s loop: watches every verifier (each kWatchEvery, and when a grant finds one
  // gone) and starts again each that ended or could not start. One long-lived thread spawns
  // them, because a child's parent-death signal follows the thread that forked it: a verifier
  // spawned by a thread that then ended would be killed with it.
  void restart_ended();
  static std::chrono::milliseconds retry_delay(int failures);

  std::filesystem::path worker_exe_;
  std::chrono::milliseconds answer_within_{60000};
  std::string reason_; // why none are run
  mutable std::mutex mutex_;
  std::map<int, std::unique_ptr<Gpu>> gpus_;
  std::atomic<bool> stopping_{false}; // the destructor runs: no verifier is started again
  std::condition_variable restart_wanted_;
  std::thread restarter_;
};

} // namespace keval::daemon
