#include "daemon/device_verifiers.hpp"

#include "common/random_hex.hpp"
#include "daemon/detail/helper_process.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

namespace keval::daemon {

namespace json = boost::json;

namespace {

// A verifier's token: 32 random bytes in hex; empty when the kernel gives none.
std::string new_token() {
  try {
    return random_hex(32);
  } catch (const std::exception&) {
    return {};
  }
}

} // namespace

DeviceVerifiers::DeviceVerifiers(std::filesystem::path worker_exe, const std::vector<int>& ordinals,
                                 std::chrono::milliseconds answer_within)
    : worker_exe_(std::move(worker_exe)), answer_within_(answer_within) {
  for (int ordinal : ordinals) {
    auto gpu = std::make_unique<Gpu>();
    gpu->ordinal = ordinal;
    start(*gpu);
    gpus_.emplace(ordinal, std::move(gpu));
  }
  if (!gpus_.empty())
    restarter_ = std::thread([this] { restart_ended(); });
}

void DeviceVerifiers::restart_ended() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    const auto now = std::chrono::steady_clock::now();
    for (auto& [ordinal, gpu] : gpus_) {
      if (stopping_)
        return;
      if (gpu->process && gpu->process->running())
        continue;
      if (gpu->process) {
        gpu->reason = "it ended (" + gpu->process->ended_how() + "); starting it again";
        spdlog::warn("device verifier of GPU {} (pid {}) {}", ordinal, gpu->process->pid(),
                     gpu->reason);
        gpu->process.reset();
        gpu->failures = 0; // it served: a first restart comes at once
      }
      // One that keeps failing to start is tried less and less often (at most every minute): a
      // verifier that dies at once (a broken driver) must not make contexts beside every job.
      if (now < gpu->last_start + retry_delay(gpu->failures))
        continue;
      lock.unlock();
      start(*gpu);
      lock.lock();
    }
    restart_wanted_.wait_for(lock, kWatchEvery, [&] { return stopping_.load(); });
  }
}

std::chrono::milliseconds DeviceVerifiers::retry_delay(int failures) {
  if (failures <= 0)
    return std::chrono::milliseconds(0);
  return std::min<std::chrono::milliseconds>(kRestartEvery * (1 << std::min(failures - 1, 6)),
                                             std::chrono::minutes(1));
}

std::unique_ptr<DeviceVerifiers> DeviceVerifiers::none(std::string why) {
  std::unique_ptr<DeviceVerifiers> verifiers(new DeviceVerifiers());
  verifiers->reason_ = std::move(why);
  return verifiers;
}

DeviceVerifiers::~DeviceVerifiers() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  restart_wanted_.notify_all();
  if (restarter_.joinable())
    restarter_.join();
  gpus_.clear(); // each process ends with its HelperProcess
}

void DeviceVerifiers::start(Gpu& gpu) {
  const std::string token = new_token();
  detail::HelperProcess::Started started =
      token.empty()
          ? detail::HelperProcess::Started{nullptr, {}, "no random bytes for a token"}
          : detail::HelperProcess::start(worker_exe_,
                                         {"--device-verifier", std::to_string(gpu.ordinal)}, token,
                                         "ready", "a verifier's answer", answer_within_);
  std::lock_guard lock(mutex_);
  ++gpu.starts;
  gpu.last_start = std::chrono::steady_clock::now();
  const json::value* socket = started.answer.if_contains("socket");
  if (started.process && socket != nullptr && socket->is_string()) {
    gpu.process = std::move(started.process);
    gpu.address = Address{std::string(socket->as_string()), token};
    const json::value* ms = started.answer.if_contains("open_ms");
    gpu.open_ms = ms != nullptr && ms->is_number() ? ms->to_number<double>() : 0;
    gpu.reason.clear();
    spdlog::info("device verifier of GPU {}: pid {}, context made in {:.0f} ms", gpu.ordinal,
                 gpu.process->pid(), gpu.open_ms);
    return;
  }
  gpu.process.reset();
  ++gpu.failures;
  gpu.reason = started.process ? "it named no socket" : started.failure;
  spdlog::warn("device verifier of GPU {} does not serve: {}; its jobs open contexts of their own",
               gpu.ordinal, gpu.reason);
}

std::optional<DeviceVerifiers::Address> DeviceVerifiers::address(int ordinal) {
  std::lock_guard lock(mutex_);
  const auto it = gpus_.find(ordinal);
  if (it == gpus_.end())
    return std::nullopt;
  Gpu& gpu = *it->second;
  if (gpu.process && gpu.process->running())
    return gpu.address;
  restart_wanted_.notify_all(); // the watcher starts it again without waiting for its round
  return std::nullopt;
}

json::object DeviceVerifiers::status() const {
  if (gpus_.empty())
    return {{"enabled", false}, {"reason", reason_}};
  std::lock_guard lock(mutex_);
  json::object gpus;
  for (const auto& [ordinal, gpu] : gpus_) {
    json::object entry{{"starts", gpu->starts}};
    const bool ready = gpu->process && gpu->process->running();
    entry["ready"] = ready;
    if (ready) {
      entry["pid"] = gpu->process->pid();
      entry["socket"] = gpu->address.socket;
      entry["open_ms"] = gpu->open_ms;
    } else {
      entry["reason"] = gpu->process ? "it ended (" + gpu->process->ended_how() + ")" : gpu->reason;
    }
    gpus[std::to_string(ordinal)] = std::move(entry);
  }
  return {{"enabled", true}, {"gpus", std::move(gpus)}};
}

} // namespace keval::daemon
