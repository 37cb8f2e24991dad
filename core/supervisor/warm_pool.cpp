#include "supervisor/warm_pool.hpp"

#include "common/log.hpp"

#include <algorithm>
#include <fstream>
#include <optional>
#include <string>

namespace keval::supervisor {

namespace {
// Idle workers that die one after another (a prewarm that crashes the process) stop the refill:
// jobs then start their own workers, as without a pool.
constexpr size_t kMaxConsecutiveDeaths = 3;
} // namespace

WarmPool::WarmPool(boost::asio::any_io_executor executor, std::filesystem::path worker_exe,
                   protocol::SandboxPolicy sandbox, size_t size, size_t max_sets)
    : WarmPool(std::move(executor), std::move(worker_exe), std::move(sandbox),
               Sizing{.size = size, .max_size = size, .max_sets = max_sets}) {}

WarmPool::WarmPool(boost::asio::any_io_executor executor, std::filesystem::path worker_exe,
                   protocol::SandboxPolicy sandbox, Sizing sizing)
    : executor_(std::move(executor)), worker_exe_(std::move(worker_exe)),
      sandbox_(std::move(sandbox)), sizing_(std::move(sizing)) {
  sizing_.max_sets = std::max<size_t>(1, sizing_.max_sets);
  sizing_.max_size = std::max(sizing_.max_size, sizing_.size);
}

bool WarmPool::machine_has_memory_to_spare() {
  std::ifstream meminfo("/proc/meminfo");
  return has_memory_to_spare(meminfo);
}

bool WarmPool::has_memory_to_spare(std::istream& meminfo) {
  std::string key, rest;
  uint64_t value = 0, total = 0, available = 0;
  while (meminfo >> key >> value) {
    std::getline(meminfo, rest); // " kB"
    if (key == "MemTotal:")
      total = value;
    else if (key == "MemAvailable:")
      available = value;
  }
  return total > 0 && available >= total / 4;
}

size_t WarmPool::default_max_size(size_t size, size_t cores) {
  return std::max(size, std::min(kDefaultMaxSize, cores / 2));
}

size_t WarmPool::default_max_total(size_t max_size) {
  return std::max(max_size, kDefaultMaxTotal);
}

WarmPool::~WarmPool() {
  std::lock_guard lock(mutex_);
  pools_.clear();
}

std::unique_ptr<PrestartedWorker> WarmPool::take(PrewarmSet prewarm) {
  if (sizing_.size == 0 || prewarm.empty())
    return nullptr;
  std::sort(prewarm.begin(), prewarm.end());
  prewarm.erase(std::unique(prewarm.begin(), prewarm.end()), prewarm.end());

  std::lock_guard lock(mutex_);
  const auto now = sizing_.now();
  auto pool = std::find_if(pools_.begin(), pools_.end(),
                           [&](const SetPool& p) { return p.plugins == prewarm; });
  if (pool == pools_.end()) {
    // A set not seen yet (or dropped): this job starts its own worker; later ones find theirs.
    pools_.push_front(SetPool{std::move(prewarm), {}, {}, {}});
    // Its first job may start a burst: remembered as a window of max_size jobs (header).
    pools_.front().busiest.emplace_back(now, sizing_.max_size);
    if (pools_.size() > sizing_.max_sets)
      pools_.pop_back(); // its idle workers are killed
  } else {
    pools_.splice(pools_.begin(), pools_, pool);
  }
  SetPool& current = pools_.front();
  while (!current.demand.empty() && current.demand.front() < now - kDemandWindow)
    current.demand.pop_front(); // bounded by the arrivals of one window
  current.demand.push_back(now);
  while (!current.busiest.empty() && current.busiest.back().second <= current.demand.size())
    current.busiest.pop_back(); // never the busiest again: this window is as busy and newer
  current.busiest.emplace_back(now, current.demand.size());
  while (current.busiest.front().first < now - kDemandMemory)
    current.busiest.pop_front(); // not empty: this arrival is last

  // The dead are dropped first, so that a ready worker is looked for among the living only.
  for (auto it = current.workers.begin(); it != current.workers.end();) {
    std::string why;
    if ((*it)->alive(&why)) {
      ++it;
      continue;
    }
    ++stats_.died_idle;
    ++consecutive_deaths_;
    stats_.last_death = why;
    spdlog::warn("a prestarted worker died before any job took it ({})", why);
    it = current.workers.erase(it);
  }
  std::unique_ptr<PrestartedWorker> found;
  if (!current.workers.empty()) {
    auto chosen = std::find_if(current.workers.begin(), current.workers.end(),
                               [&](const auto& worker) { return sizing_.ready(*worker); });
    if (chosen == current.workers.end())
      chosen = current.workers.begin();
    else if (chosen != current.workers.begin())
      ++stats_.taken_out_of_order;
    found = std::move(*chosen);
    current.workers.erase(chosen);
    consecutive_deaths_ = 0;
    ++stats_.taken;
  } else {
    ++stats_.missed;
  }
  refill(current);
  return found;
}

WarmPoolStats WarmPool::stats() const {
  std::lock_guard lock(mutex_);
  WarmPoolStats out = stats_;
  out.sets = pools_.size();
  for (const auto& pool : pools_) {
    out.ready += pool.workers.size();
    out.prewarmed += static_cast<size_t>(
        std::count_if(pool.workers.begin(), pool.workers.end(),
                      [&](const auto& worker) { return sizing_.ready(*worker); }));
    out.target += targets(pool).remembered;
  }
  return out;
}

WarmPool::Targets WarmPool::targets(const SetPool& pool) const {
  const auto now = sizing_.now();
  const auto horizon = now - kDemandWindow;
  const auto current = static_cast<size_t>(std::count_if(
      pool.demand.begin(), pool.demand.end(), [&](Clock::time_point t) { return t >= horizon; }));
  size_t remembered = current;
  const auto busiest =
      std::find_if(pool.busiest.begin(), pool.busiest.end(),
                   [&](const auto& window) { return window.first >= now - kDemandMemory; });
  if (busiest != pool.busiest.end())
    remembered = std::max(remembered, busiest->second);
  const size_t most = share();
  const auto capped = [&](size_t demand) { return std::min(most, sizing_.size + demand); };
  return {capped(current), capped(remembered)};
}

size_t WarmPool::share() const {
  const auto since = sizing_.now() - kDemandMemory;
  // A set is in use while a job of it came within kDemandMemory (busiest ends with its last
  // arrival); the set being refilled has just had one.
  const auto in_use =
      static_cast<size_t>(std::count_if(pools_.begin(), pools_.end(), [&](const SetPool& p) {
        return !p.busiest.empty() && p.busiest.back().first >= since;
      }));
  const size_t each = sizing_.max_total / std::max<size_t>(1, in_use);
  return std::max(sizing_.size, std::min(sizing_.max_size, each));
}

void WarmPool::refill(SetPool& pool) {
  if (consecutive_deaths_ >= kMaxConsecutiveDeaths) {
    if (!stats_.disabled)
      spdlog::error("prestarted workers keep dying before use (last: {}); jobs start their own "
                    "workers from now on",
                    stats_.last_death);
    stats_.disabled = true;
    return;
  }
  const Targets target = targets(pool);
  const bool machine_memory = sizing_.memory_to_spare();
  const bool gpu_memory = sizing_.gpu_memory_to_spare();
  // Past the current demand, workers are kept for a burst to come only while memory allows; past
  // `size`, none while the GPU is short: a job's memory comes before a faster start.
  size_t wanted =
      target.remembered > target.current && !machine_memory ? target.current : target.remembered;
  if (!gpu_memory && wanted > sizing_.size) {
    wanted = sizing_.size;
    ++stats_.held_back_by_gpu_memory;
  }
  // With jobs queued for the GPUs, no new extras; the ones there are stay (letting them go would
  // tear their contexts down beside the job holding the GPU, for nothing).
  if (const size_t now_ready = std::max(sizing_.size, pool.workers.size());
      wanted > now_ready && sizing_.gpus_backlogged()) {
    wanted = now_ready;
    ++stats_.held_back_by_gpu_queue;
  }
  while (pool.workers.size() > wanted)
    pool.workers.pop_back(); // the newest, which may not have finished prewarming: killed
  // The others keep what their own demand asks for now, within the share: a set that came into
  // use made every share smaller, and a set whose demand is forgotten keeps `size`. Their extras
  // go now, not at their next job, which may never come: the sets in use stay within max_total
  // together, and the others keep `size`.
  for (auto& other : pools_) {
    if (&other == &pool)
      continue;
    const size_t keep = targets(other).remembered;
    while (other.workers.size() > keep)
      other.workers.pop_back();
  }
  while (pool.workers.size() < wanted) {
    if (pool.workers.size() >= sizing_.size && !machine_memory) {
      ++stats_.held_back_by_memory;
      return;
    }
    // The GPU this set's ready workers open least (the first of them on a tie).
    std::optional<int> device;
    size_t fewest = std::numeric_limits<size_t>::max();
    for (const int gpu : sizing_.gpus) {
      const auto on_it = static_cast<size_t>(
          std::count_if(pool.workers.begin(), pool.workers.end(),
                        [&](const auto& worker) { return worker->open_ahead_device() == gpu; }));
      if (on_it < fewest) {
        fewest = on_it;
        device = gpu;
      }
    }
    try {
      pool.workers.push_back(
          PrestartedWorker::spawn(executor_, worker_exe_, sandbox_, pool.plugins, device));
    } catch (const std::exception& e) {
      spdlog::warn("cannot prestart a worker ({}); jobs start their own", e.what());
      return;
    }
  }
}

} // namespace keval::supervisor
