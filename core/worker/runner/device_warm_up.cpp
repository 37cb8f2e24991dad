#include "worker/runner/device_warm_up.hpp"

#include "common/log.hpp"
#include "common/unix_clock.hpp"
#include "worker/engine/device_turn.hpp"
#include "worker/runner/runner_protocol.hpp"

#include <cstdlib>

#include <boost/json/array.hpp>
#include <poll.h>

namespace keval::worker {

namespace json = boost::json;

namespace {

// How long a warm-up that found the GPU busy waits before it looks again.
constexpr int kLookAgainMs = 10;

// Whether the host's channel has something to read (the job has come, or the host is gone)
// within `ms`.
bool job_came(int job_fd, int ms) {
  pollfd job{job_fd, POLLIN, 0};
  return ::poll(&job, 1, ms) > 0;
}

} // namespace

DeviceWarmUpSettings DeviceWarmUpSettings::from_environment() {
  DeviceWarmUpSettings settings{true, TimingWish::kIdleBeforeWarmUp};
  if (const char* on = std::getenv("KEVAL_DEVICE_WARM_UP"); on != nullptr) {
    const std::string value = on;
    if (value == "0")
      settings.enabled = false;
    else if (value != "1")
      spdlog::warn("KEVAL_DEVICE_WARM_UP={} is neither 0 nor 1: the warm-up stays on", value);
  }
  if (const char* idle = std::getenv("KEVAL_DEVICE_WARM_UP_IDLE_MS"); idle != nullptr) {
    char* end = nullptr;
    const long ms = std::strtol(idle, &end, 10);
    if (end != idle && *end == '\0' && ms >= 0 && ms <= 60000)
      settings.idle = std::chrono::milliseconds(ms);
    else
      spdlog::warn("KEVAL_DEVICE_WARM_UP_IDLE_MS={} is not 0 to 60000 milliseconds: {} ms kept",
                   idle, settings.idle.count());
  }
  return settings;
}

json::object warm_up_before_job(const std::vector<std::pair<std::string, RunnerClient*>>& runners,
                                const std::string& gpu, int job_fd,
                                const DeviceWarmUpSettings& settings) {
  json::object report;
  report["gpu"] = gpu; // the timing turn's name for it: its PCI bus id
  if (!settings.enabled) {
    report["not_run"] = "KEVAL_DEVICE_WARM_UP=0";
    return report;
  }
  const auto turn_file = DeviceTurn::timing_lock_file(gpu);
  const auto wish_file = DeviceTurn::timing_wish_file(gpu);
  double turn_wait_ms = 0;
  int64_t found_gpu_busy = 0;
  json::object sides;
  json::array errors;
  const auto finish = [&] {
    report["turn_wait_s"] = turn_wait_ms / 1000;
    report["found_gpu_busy"] = found_gpu_busy;
    report["sides"] = std::move(sides);
    if (!errors.empty())
      report["errors"] = std::move(errors);
    return std::move(report);
  };
  for (const auto& [side, runner] : runners) {
    for (;;) {
      // Whether the GPU is idle is looked at before the turn is taken, and again once it is held
      // (a job may have been granted the GPU meanwhile): a worker that held the turn while it
      // waited for the GPU to be idle would keep the jobs from it.
      if (!TimingWish::idle_for(wish_file, settings.idle)) {
        // A job holds the GPU, or held it a moment ago (a busy GPU's next job is on its way):
        // look again a little later, unless this worker's own job comes meanwhile.
        ++found_gpu_busy;
        if (job_came(job_fd, kLookAgainMs)) {
          report["not_run"] = "the job came before the " + side + " runner's warm-up";
          return finish();
        }
        continue;
      }
      const DeviceTurn turn(turn_file, DeviceTurn::UntilReadable(job_fd));
      turn_wait_ms += turn.waited_ms();
      if (!turn.held()) {
        report["not_run"] = (turn.interrupted() ? std::string("the job came before the ")
                                                : turn.why_not() + ": before the ") +
                            side + " runner's warm-up";
        return finish();
      }
      if (!TimingWish::idle_for(wish_file, settings.idle))
        continue; // the turn goes with this round: the jobs' at once
      // On the machine's real-time clock, as the job's timeline (its origin_unix_ms): each
      // runner's hold on the turn can be lined up against the jobs timed on the GPU.
      json::object one;
      one["from_unix_ms"] = unix_ms();
      json::object ask;
      ask["type"] = runner_msg::kWarmDevice;
      // The GPU's next job may be waiting for the turn: the warm-up runs in the foreground
      // (worker/isolation/cpu_priority.hpp), and the runner goes back to wait for its job.
      runner->set_background(false);
      const json::object reply = runner->call(std::move(ask), "warming its device up");
      runner->set_background(true);
      one["to_unix_ms"] = unix_ms();
      if (!RunnerClient::ok(reply))
        errors.emplace_back(side + ": " + RunnerClient::error_of(reply).message);
      for (const char* key : {"warmed", "errors", "skipped"})
        if (const json::value* v = reply.if_contains(key))
          one[key] = *v;
      sides[side] = std::move(one);
      break;
    }
  }
  return finish();
}

} // namespace keval::worker
