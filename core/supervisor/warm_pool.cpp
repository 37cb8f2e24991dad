#include "supervisor/warm_pool.hpp"

#include "common/log.hpp"

namespace keval::supervisor {

namespace {
// Idle workers that die one after another (a prewarm that crashes the process) stop the refill:
// jobs then start their own workers, as without a pool.
constexpr size_t kMaxConsecutiveDeaths = 3;
} // namespace

WarmPool::WarmPool(boost::asio::any_io_executor executor, std::filesystem::path worker_exe,
                   std::vector<std::filesystem::path> prewarm_plugins, size_t size)
    : executor_(std::move(executor)), worker_exe_(std::move(worker_exe)),
      prewarm_(std::move(prewarm_plugins)), size_(size) {
  std::lock_guard lock(mutex_);
  refill();
}

WarmPool::~WarmPool() {
  std::lock_guard lock(mutex_);
  workers_.clear();
}

std::unique_ptr<PrestartedWorker> WarmPool::take() {
  std::lock_guard lock(mutex_);
  std::unique_ptr<PrestartedWorker> found;
  while (!workers_.empty() && !found) {
    auto worker = std::move(workers_.front());
    workers_.pop_front();
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
  refill();
  return found;
}

WarmPoolStats WarmPool::stats() const {
  std::lock_guard lock(mutex_);
  WarmPoolStats out = stats_;
  out.ready = workers_.size();
  return out;
}

void WarmPool::refill() {
  if (consecutive_deaths_ >= kMaxConsecutiveDeaths) {
    if (!stats_.disabled)
      spdlog::error("prestarted workers keep dying before use (last: {}); jobs start their own "
                    "workers from now on",
                    stats_.last_death);
    stats_.disabled = true;
    return;
  }
  while (workers_.size() < size_) {
    try {
      workers_.push_back(PrestartedWorker::spawn(executor_, worker_exe_, prewarm_));
    } catch (const std::exception& e) {
      spdlog::warn("cannot prestart a worker ({}); jobs start their own", e.what());
      return;
    }
  }
}

} // namespace keval::supervisor
