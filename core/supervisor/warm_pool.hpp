// Workers started ahead of their jobs, for `keval serve`. Each keeps serving exactly one job in a
// fresh process (nothing a job does can reach the next); what the pool saves is the start-up a
// job would otherwise wait for: the plugins' prewarm hooks (for the Python types, starting the
// interpreter and importing torch, ~3 s) run while the worker waits for a job.
#pragma once

#include "supervisor/worker_session.hpp"

#include <cstddef>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

namespace keval::supervisor {

struct WarmPoolStats {
  size_t ready = 0;       // started and waiting (some may still be prewarming)
  size_t taken = 0;       // handed to jobs
  size_t died_idle = 0;   // exited before any job took them
  bool disabled = false;  // stopped refilling after repeated deaths
  std::string last_death; // how the last idle worker ended
};

class WarmPool {
public:
  // Starts `size` workers (0: the pool stays empty and take() always returns null).
  WarmPool(boost::asio::any_io_executor executor, std::filesystem::path worker_exe,
           std::vector<std::filesystem::path> prewarm_plugins, size_t size);
  ~WarmPool(); // kills the workers no job took

  // A live prestarted worker, or null when there is none (the caller starts one as usual).
  // Starts a replacement either way. Thread-safe.
  std::unique_ptr<PrestartedWorker> take();

  WarmPoolStats stats() const;

private:
  void refill(); // with mutex_ held

  boost::asio::any_io_executor executor_;
  std::filesystem::path worker_exe_;
  std::vector<std::filesystem::path> prewarm_;
  size_t size_;
  mutable std::mutex mutex_;
  std::deque<std::unique_ptr<PrestartedWorker>> workers_;
  size_t consecutive_deaths_ = 0;
  WarmPoolStats stats_;
};

} // namespace keval::supervisor
