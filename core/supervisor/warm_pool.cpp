#include "supervisor/warm_pool.hpp"

#include "common/log.hpp"

#include <algorithm>

namespace keval::supervisor {

namespace {
// Idle workers that die one after another (a prewarm that crashes the process) stop the refill:
// jobs then start their own workers, as without a pool.
constexpr size_t kMaxConsecutiveDeaths = 3;
} // namespace

WarmPool::WarmPool(boost::asio::any_io_executor executor, std::filesystem::path worker_exe,
                   protocol::SandboxPolicy sandbox, size_t size, size_t max_sets)
    : executor_(std::move(executor)), worker_exe_(std::move(worker_exe)),
      sandbox_(std::move(sandbox)), size_(size), max_sets_(std::max<size_t>(1, max_sets)) {}

WarmPool::~WarmPool() {
  std::lock_guard lock(mutex_);
  pools_.clear();
}

std::unique_ptr<PrestartedWorker> WarmPool::take(PrewarmSet prewarm) {
  if (size_ == 0 || prewarm.empty())
    return nullptr;
  std::sort(prewarm.begin(), prewarm.end());
  prewarm.erase(std::unique(prewarm.begin(), prewarm.end()), prewarm.end());

  std::lock_guard lock(mutex_);
  auto pool = std::find_if(pools_.begin(), pools_.end(),
                           [&](const SetPool& p) { return p.plugins == prewarm; });
  if (pool == pools_.end()) {
    // A set not seen yet (or dropped): this job starts its own worker; later ones find theirs.
    pools_.push_front(SetPool{std::move(prewarm), {}});
    if (pools_.size() > max_sets_)
      pools_.pop_back(); // its idle workers are killed
  } else {
    pools_.splice(pools_.begin(), pools_, pool);
  }
  SetPool& current = pools_.front();

  std::unique_ptr<PrestartedWorker> found;
  while (!current.workers.empty() && !found) {
    auto worker = std::move(current.workers.front());
    current.workers.pop_front();
    std::string why;
    if (worker->alive(&why)) {
      found = std::move(worker);
      consecutive_deaths_ = 0;
      ++stats_.taken;
    } else {
      ++stats_.died_idle;
      ++consecutive_deaths_;
      stats_.last_death = why;
      spdlog::warn("a prestarted worker died before any job took it ({})", why);
    }
  }
  if (!found)
    ++stats_.missed;
  refill(current);
  return found;
}

WarmPoolStats WarmPool::stats() const {
  std::lock_guard lock(mutex_);
  WarmPoolStats out = stats_;
  out.sets = pools_.size();
  for (const auto& pool : pools_)
    out.ready += pool.workers.size();
  return out;
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
  while (pool.workers.size() < size_) {
    try {
      pool.workers.push_back(
          PrestartedWorker::spawn(executor_, worker_exe_, sandbox_, pool.plugins));
    } catch (const std::exception& e) {
      spdlog::warn("cannot prestart a worker ({}); jobs start their own", e.what());
      return;
    }
  }
}

} // namespace keval::supervisor
