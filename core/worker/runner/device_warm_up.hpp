// A prestarted worker's warm-up of its GPU before its job comes (SDK 1.4 warm_device): every
// job's first launches would otherwise pay, while the job holds the GPU, for its framework's
// set-up on the device and the loading of each kernel's module at its first launch. Launches on
// the GPU disturb a job timed there, so each runner warms up only while it holds the GPU's timing
// turn, and starts only once no job has held the GPU for a while (worker/engine/device_turn.hpp).
#pragma once

#include "worker/runner/runner_client.hpp"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>

namespace keval::worker {

struct DeviceWarmUpSettings {
  bool enabled = true; // KEVAL_DEVICE_WARM_UP=0: off
  // How long the GPU must have been idle before a runner starts (KEVAL_DEVICE_WARM_UP_IDLE_MS;
  // TimingWish::kIdleBeforeWarmUp by default).
  std::chrono::milliseconds idle;
  // From the environment; a value that cannot be used is logged and the default kept.
  static DeviceWarmUpSettings from_environment();
};

// Warms `runners` ({side, runner}, each opened ahead on GPU `gpu`, its PCI bus id) up one after
// another, each once the GPU has been idle `settings.idle` and while it holds the GPU's timing
// turn, until all are warm or `job_fd` (the host's channel) has something to read: the job has
// come, and it then pays the first launches of the runners not yet warm itself. Returns the
// report protocol::Done::warm_up carries: turn_wait_s, found_gpu_busy, sides{side: {warmed[],
// errors?, skipped?, from_unix_ms, to_unix_ms}}, errors?, not_run? (why it stopped short).
// Throws RunnerFailure when a runner breaks (keval's own set-up: the worker's failure, not a
// side's).
boost::json::object
warm_up_before_job(const std::vector<std::pair<std::string, RunnerClient*>>& runners,
                   const std::string& gpu, int job_fd, const DeviceWarmUpSettings& settings);

} // namespace keval::worker
