// Workers started ahead of their jobs, for `keval serve`. Each keeps serving exactly one job in a
// fresh process (nothing a job does can reach the next); what the pool saves is the start-up a
// job would otherwise wait for: the plugins' prewarm hooks (for the Python types, starting the
// interpreter and importing torch, ~3 s) run while the worker waits for a job.
//
// Workers are kept per prewarm set: the plugins of a job that have a prewarm hook. A worker
// prewarmed for every plugin would make a job of a cheap type wait for (or pay the CPU of) an
// `import torch` it never uses, so a job only ever takes a worker prewarmed for exactly its set.
// Sets are learned from the jobs that arrive: the first job of a set starts its own worker and
// from then on at least `size` workers for that set are kept ready; the least recently used set
// is dropped when more than `max_sets` are in use.
//
// A set's pool follows its demand: it keeps `size` plus the jobs of the set that arrived in the
// last kDemandWindow (10 s: longer than a torch prewarm takes, so that back-to-back jobs find the
// pool refilled, not refilling), at most `max_size`, and grows past `size` only while the machine
// has memory to spare (MemAvailable at least a quarter of MemTotal): idle workers that import
// torch hold about a GB each. It remembers its busiest window for kDemandMemory (10 min) and
// keeps that many while memory allows: a reinforcement-learning loop sends a burst of jobs every
// training step, and the next burst must find the workers the last one grew, not see one arrival,
// let them go and wait seconds for new ones to prewarm. A set's first job counts as such a window
// of `max_size` jobs: it may be the start of a burst, and a pool that grows only with the jobs
// that come finds the burst's fourth job waiting for a worker started at its first (a torch
// prewarm takes 5-8 s; 20 back-to-back torch_cuda compares on an H200 after one cold compare:
// max/median 3.15 growing with the demand, 1.42 readied; README, "Prestarted workers"). Past the
// memory, or once the machine is short of memory, extras are let go at the next take.
//
// The sets share the machine: past their `size`, the pools of the sets in use (a job in the last
// kDemandMemory) grow to at most `max_total` together, each to max_total / (sets in use) and never
// past max_size; a set whose demand is forgotten keeps `size`, and any set's job lets the others'
// extras go. A reinforcement-learning loop grading one kernel type has one hot set, which may
// take max_size; a mixed batch has three or four, whose workers would otherwise all prewarm and
// wait at once (8 per set for a mixed batch's three sets: 17 % fewer jobs a minute than 6 on the
// H200, where 8 for a burst of one set had no job wait for its worker and 6 had its seventh to
// ninth wait up to 0.8 s).
//
// On a machine with several GPUs, each worker is told which one to open ahead (Sizing::gpus): a
// worker that opened none made its job open its contexts with the GPU held, 657 ms a job on two
// H200s.
//
// GPU memory bounds a pool too: idle workers that opened their GPU ahead hold their contexts'
// memory there, which a job may need. While the GPUs they open on are short of it
// (supervisor/gpu_memory.hpp: less than half free at the latest reading), a pool grows no
// further than `size` and lets its extras go at the next take, the current demand's included.
//
// So does a queue for the GPUs: while jobs wait for a device grant (as many as there are GPUs,
// or more), a job's worker ready ahead of it would only wait longer for the GPU, and preparing
// more of them costs the job that holds it: each prestarted worker opens three contexts and warms
// the GPU up, driver work that takes the device-wide lock the holder's binds, first trials and
// the last job's teardown wait for. In the 100-sample mixed batch on the H200 (8 clients, the GPU
// busy throughout), pools grown to 18 made the GPU's cycle per job 1209 and 1342 ms (its first
// trial 467 and 504, the teardown before it 543 and 619); with this rule 928 and 956 ms (312 and
// 332, 393 and 390), 1.30x and 1.40x the jobs a minute (README, "Pools grow no further while jobs
// queue for the GPU"). A pool then grows no further than it is (at least `size`); the workers it
// has stay for the jobs to come, which would otherwise start their own.
#pragma once

#include "supervisor/worker_session.hpp"

#include <chrono>
#include <cstddef>
#include <deque>
#include <filesystem>
#include <functional>
#include <istream>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

namespace keval::supervisor {

struct WarmPoolStats {
  size_t ready = 0;     // started and waiting, over every set (some may still be prewarming)
  size_t prewarmed = 0; // of `ready`, those that have finished prewarming (said hello)
  size_t target = 0;    // what the sets' demand asks to keep ready, summed
  size_t held_back_by_memory = 0;     // times a pool did not grow for lack of the machine's memory
  size_t held_back_by_gpu_memory = 0; // ... for lack of GPU memory (GpuMemoryReadings)
  size_t held_back_by_gpu_queue = 0;  // ... while jobs queued for the GPUs (gpus_backlogged)
  size_t sets = 0;                    // prewarm sets with workers kept ready
  size_t taken = 0;                   // handed to jobs
  size_t missed = 0;             // jobs of a prewarming set that found no worker ready for them
  size_t taken_out_of_order = 0; // taken ready while an older worker was still prewarming
  size_t died_idle = 0;          // exited before any job took them
  bool disabled = false;         // stopped refilling after repeated deaths
  std::string last_death;        // how the last idle worker ended
};

class WarmPool {
public:
  using PrewarmSet = std::vector<std::filesystem::path>; // plugin libraries, sorted

  using Clock = std::chrono::steady_clock;
  struct Sizing {
    size_t size = 0;     // ready per set at least (0: the pool stays empty, take() gives null)
    size_t max_size = 0; // ready per set at most, with demand (below `size`: `size`)
    size_t max_sets = 4; // sets kept at once
    // ready over the sets in use at most, shared among them (never below `size` a set)
    size_t max_total = std::numeric_limits<size_t>::max();
    // The GPUs (CUDA ordinals) a worker may open ahead: each new one is told to open the one its
    // set's ready workers open least (`--open-ahead-device`), so a job finds a worker opened on
    // each GPU and the host grants it that one when it can (daemon/device_pool.hpp). Empty: none
    // is named, and a worker opens the one GPU there is, if there is exactly one.
    std::vector<int> gpus{};
    // Test seams: the clock, whether the machine has memory to grow a pool, and whether a
    // worker has finished its prewarm (PrestartedWorker::ready).
    std::function<Clock::time_point()> now = [] { return Clock::now(); };
    std::function<bool()> memory_to_spare = machine_has_memory_to_spare;
    // Whether the GPUs idle workers hold memory on have it to spare (GpuMemoryReadings::to_spare,
    // which `keval serve` gives). While they do not, a pool keeps `size` and no more.
    std::function<bool()> gpu_memory_to_spare = [] { return true; };
    // Whether jobs queue for the GPUs (`keval serve`: as many wait for a grant as there are
    // GPUs, or more). While they do, a pool grows no further than it is.
    std::function<bool()> gpus_backlogged = [] { return false; };
    std::function<bool(const PrestartedWorker&)> ready = [](const PrestartedWorker& worker) {
      return worker.ready();
    };
  };
  static bool machine_has_memory_to_spare(); // /proc/meminfo, as below
  // MemAvailable at least a quarter of MemTotal, in /proc/meminfo's format; false unreadable.
  static bool has_memory_to_spare(std::istream& meminfo);
  static constexpr auto kDemandWindow = std::chrono::seconds(10);
  static constexpr auto kDemandMemory = std::chrono::minutes(10);
  // `keval serve`'s max_size unless it is given: half the machine's cores, at most
  // kDefaultMaxSize; below `size` (2 cores and fewer: no growth), `size`. A worker's prewarm is
  // CPU work (an interpreter and `import torch` per runner, ~3 s), so a pool larger than the
  // cores can prewarm at once only makes each worker later; and demand past about one job a
  // second needs that many: a burst's refills prewarm in 5 to 9 s beside its jobs (a second
  // each), and 20 back-to-back load_inline compares on the H200's 16 cores had p95 4.62 s with a
  // fixed pool of 2, 1.38 s growing to 6, whose seventh to ninth jobs still waited up to 0.8 s
  // for their workers, and none waited with 8 (README, "Prestarted workers").
  static constexpr size_t kDefaultMaxSize = 8;
  // `keval serve`'s max_total unless it is given (default_max_total): three sets of 6, what a
  // mixed batch of three sets measured best with on the H200's 16 cores.
  static constexpr size_t kDefaultMaxTotal = 18;
  static size_t default_max_size(size_t size, size_t cores);
  // kDefaultMaxTotal, never below `max_size` (one set in use may always grow to it).
  static size_t default_max_total(size_t max_size);

  // Keeps `size` workers per prewarm set (0: the pool stays empty and take() returns null), for
  // at most `max_sets` sets at once.
  WarmPool(boost::asio::any_io_executor executor, std::filesystem::path worker_exe,
           protocol::SandboxPolicy sandbox, size_t size, size_t max_sets = 4);
  WarmPool(boost::asio::any_io_executor executor, std::filesystem::path worker_exe,
           protocol::SandboxPolicy sandbox, Sizing sizing);
  ~WarmPool(); // kills the workers no job took

  // A live worker prestarted for exactly `prewarm` (order does not matter), or null when there
  // is none (the caller starts one as usual): the oldest that has finished its prewarm, else the
  // oldest (it started first, so it is likely to finish first). Workers started together do not
  // finish in order: their prewarms share the cores, and their device opens take turns in no
  // set order (DeviceTurn). Starts replacements either way. Thread-safe.
  std::unique_ptr<PrestartedWorker> take(PrewarmSet prewarm);

  WarmPoolStats stats() const;

private:
  struct SetPool {
    PrewarmSet plugins;
    std::deque<std::unique_ptr<PrestartedWorker>> workers;
    std::deque<Clock::time_point> demand; // its jobs' arrivals within kDemandWindow
    // (arrival, arrivals within kDemandWindow then) of the last kDemandMemory, the counts falling
    // from front to back: front() is the busiest window remembered (a sliding-window maximum).
    std::deque<std::pair<Clock::time_point, size_t>> busiest;
  };
  // With mutex_ held: what a pool keeps, size + a demand, at most its share (share()); for the
  // current window's demand alone (`current`) and with the busiest window remembered
  // (`remembered`).
  struct Targets {
    size_t current = 0, remembered = 0;
  };
  Targets targets(const SetPool& pool) const;
  // With mutex_ held: the most a set's pool keeps now, max_total shared among the sets in use,
  // at most max_size and at least size.
  size_t share() const;
  void refill(SetPool& pool); // with mutex_ held

  boost::asio::any_io_executor executor_;
  std::filesystem::path worker_exe_;
  protocol::SandboxPolicy sandbox_;
  Sizing sizing_;
  mutable std::mutex mutex_;
  std::list<SetPool> pools_; // most recently used first
  size_t consecutive_deaths_ = 0;
  WarmPoolStats stats_;
};

} // namespace keval::supervisor
