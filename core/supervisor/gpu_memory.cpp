#include "supervisor/gpu_memory.hpp"

#include <boost/json/object.hpp>

namespace keval::supervisor {

namespace {
double free_fraction(const protocol::DeviceMemoryReading& reading) {
  return static_cast<double>(reading.free_bytes) / static_cast<double>(reading.total_bytes);
}
} // namespace

void GpuMemoryReadings::record_prestarted(const protocol::DeviceMemoryReading& reading,
                                          Clock::time_point now) {
  if (!protocol::plausible(reading))
    return;
  std::lock_guard lock(mutex_);
  // Read when the worker opened its device, which may have been minutes before its job ended:
  // a job's reading since says more, so it is kept.
  by_gpu_.try_emplace(reading.gpu, Latest{reading, now, true}).first->second.prestarted_open = true;
}

void GpuMemoryReadings::record_job(const protocol::DeviceMemoryReading& reading,
                                   Clock::time_point now) {
  if (!protocol::plausible(reading))
    return;
  std::lock_guard lock(mutex_);
  const auto [latest, first] = by_gpu_.try_emplace(reading.gpu, Latest{reading, now, false});
  // Sessions report as they end, from threads of their own: the newest reading stays.
  if (!first && latest->second.at <= now) {
    latest->second.reading = reading;
    latest->second.at = now;
  }
}

bool GpuMemoryReadings::to_spare() const {
  std::lock_guard lock(mutex_);
  for (const auto& [gpu, latest] : by_gpu_)
    if (latest.prestarted_open && free_fraction(latest.reading) < kSpareFraction)
      return false;
  return true;
}

boost::json::array GpuMemoryReadings::report(Clock::time_point now) const {
  std::lock_guard lock(mutex_);
  boost::json::array out;
  for (const auto& [gpu, latest] : by_gpu_) {
    boost::json::object entry = protocol::to_json(latest.reading);
    entry["free_fraction"] = free_fraction(latest.reading);
    entry["age_s"] = std::chrono::duration<double>(now - latest.at).count();
    entry["prestarted_workers_open"] = latest.prestarted_open;
    out.push_back(std::move(entry));
  }
  return out;
}

} // namespace keval::supervisor
