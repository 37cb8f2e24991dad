// Prestarted workers are kept per prewarm set: a job only ever takes a worker that prewarmed
// exactly its plugins, sets are learned from the jobs that arrive, and the least recently used
// set is dropped past the limit.
#include "supervisor/warm_pool.hpp"
#include "support/test_env.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/json/parse.hpp>
#include <gtest/gtest.h>

namespace keval::test {
namespace {

using supervisor::WarmPool;

WarmPool::PrewarmSet set_of(std::initializer_list<const char*> names) {
  WarmPool::PrewarmSet set;
  for (const char* name : names)
    set.push_back(test_plugin_dir() / name);
  return set;
}

// A pool whose clock and memory reading the test sets.
struct ScriptedPool {
  ScriptedPool(size_t size, size_t max_size)
      : pool(ctx.get_executor(), worker_exe(), {},
             WarmPool::Sizing{.size = size,
                              .max_size = max_size,
                              .max_sets = 4,
                              .now = [this] { return now; },
                              .memory_to_spare = [this] { return memory; },
                              .gpu_memory_to_spare = [this] { return gpu_memory; },
                              .gpus_backlogged = [this] { return gpu_queue; }}) {}

  boost::asio::io_context ctx;
  WarmPool::Clock::time_point now = WarmPool::Clock::time_point{} + std::chrono::hours(1);
  bool memory = true;
  bool gpu_memory = true;
  bool gpu_queue = false;
  WarmPool pool;
};

TEST(WarmPool, TheFirstJobOfASetStartsItsOwnAndLaterOnesFindPrestartedWorkers) {
  boost::asio::io_context ctx;
  WarmPool pool(ctx.get_executor(), worker_exe(), {}, 2);
  const auto fault = set_of({"libkeval_fault_plugin.so"});
  EXPECT_EQ(pool.take(fault), nullptr); // not seen before: nothing was prewarmed for it
  EXPECT_EQ(pool.stats().ready, 2u);
  EXPECT_EQ(pool.stats().sets, 1u);

  std::set<int> pids;
  for (int i = 0; i < 3; ++i) {
    auto worker = pool.take(fault);
    ASSERT_NE(worker, nullptr) << "take " << i;
    EXPECT_TRUE(worker->alive());
    pids.insert(worker->pid());
  }
  EXPECT_EQ(pids.size(), 3u); // one process per job, never reused
  const auto stats = pool.stats();
  EXPECT_EQ(stats.taken, 3u);
  EXPECT_EQ(stats.missed, 1u);
  EXPECT_EQ(stats.ready, 2u); // refilled after every take
}

TEST(WarmPool, AWorkerIsOnlyHandedToAJobOfExactlyItsSetInAnyOrder) {
  boost::asio::io_context ctx;
  WarmPool pool(ctx.get_executor(), worker_exe(), {}, 1);
  const auto a = set_of({"libkeval_fault_plugin.so"});
  const auto ab = set_of({"libkeval_fault_plugin.so", "other_plugin.so"});
  const auto ba = set_of({"other_plugin.so", "libkeval_fault_plugin.so"});
  EXPECT_EQ(pool.take(a), nullptr);
  EXPECT_EQ(pool.take(ab), nullptr); // a's worker would prewarm too little
  EXPECT_NE(pool.take(ba), nullptr); // the same set as ab
  EXPECT_NE(pool.take(a), nullptr);
  EXPECT_EQ(pool.stats().sets, 2u);
  EXPECT_EQ(pool.take({}), nullptr); // a job with nothing to prewarm never takes one
  EXPECT_EQ(pool.stats().taken, 2u);
}

TEST(WarmPool, TheLeastRecentlyUsedSetIsDroppedPastTheLimit) {
  boost::asio::io_context ctx;
  WarmPool pool(ctx.get_executor(), worker_exe(), {}, 1, /*max_sets=*/2);
  const auto a = set_of({"a.so"}), b = set_of({"b.so"}), c = set_of({"c.so"});
  EXPECT_EQ(pool.take(a), nullptr);
  EXPECT_EQ(pool.take(b), nullptr);
  EXPECT_NE(pool.take(a), nullptr); // a used last: b is now the least recent
  EXPECT_EQ(pool.take(c), nullptr); // drops b and its idle worker
  const auto stats = pool.stats();
  EXPECT_EQ(stats.sets, 2u);
  EXPECT_EQ(stats.ready, 2u);
  EXPECT_NE(pool.take(a), nullptr);
  EXPECT_EQ(pool.take(b), nullptr); // learned again from scratch
}

// A set's pool follows its demand: back-to-back jobs find it grown, not refilling (the third
// warm torch_cuda request used to wait seconds for an import torch), up to max_size, only while
// the machine has memory to spare, and it shrinks back once the demand is over and forgotten.
TEST(WarmPool, APoolGrowsWithItsSetsDemandWithinMemoryAndShrinksAfter) {
  ScriptedPool scripted(1, 3);
  auto& now = scripted.now;
  auto& memory = scripted.memory;
  auto& pool = scripted.pool;
  const auto fault = set_of({"libkeval_fault_plugin.so"});
  EXPECT_EQ(pool.take(fault), nullptr); // learns the set (readied for a burst: the next test)
  now += WarmPool::kDemandMemory + std::chrono::seconds(1);
  EXPECT_NE(pool.take(fault), nullptr);
  EXPECT_EQ(pool.stats().ready, 2u); // 1 + one job in the window
  EXPECT_NE(pool.take(fault), nullptr);
  EXPECT_EQ(pool.stats().ready, 3u); // 1 + two, the most it may keep
  EXPECT_NE(pool.take(fault), nullptr);
  EXPECT_EQ(pool.stats().ready, 3u); // capped at max_size
  EXPECT_EQ(pool.stats().target, 3u);

  // The demand is over and no longer remembered: the next take sees only itself and lets extras
  // go.
  now += WarmPool::kDemandMemory + std::chrono::seconds(1);
  EXPECT_NE(pool.take(fault), nullptr);
  EXPECT_EQ(pool.stats().ready, 2u);

  // Without memory to spare it keeps `size` but does not grow past it.
  memory = false;
  EXPECT_NE(pool.take(fault), nullptr);
  EXPECT_NE(pool.take(fault), nullptr);
  const auto stats = pool.stats();
  EXPECT_EQ(stats.ready, 1u);
  EXPECT_GE(stats.held_back_by_memory, 1u);
}

// A set's first job may start a burst (20 back-to-back compares): the pool readies max_size for
// it at once, rather than grow with the jobs that come and have the fourth wait for a worker
// started at the first; within memory, and only for as long as a busiest window is remembered.
TEST(WarmPool, ASetsFirstJobReadiesThePoolForABurstWithinMemoryUntilForgotten) {
  ScriptedPool scripted(1, 4);
  auto& now = scripted.now;
  auto& pool = scripted.pool;
  const auto fault = set_of({"libkeval_fault_plugin.so"});
  EXPECT_EQ(pool.take(fault), nullptr);
  EXPECT_EQ(pool.stats().ready, 4u); // max_size, not 1 + this job
  EXPECT_EQ(pool.stats().target, 4u);
  now += std::chrono::minutes(5); // no burst came yet: still ready for one
  EXPECT_NE(pool.take(fault), nullptr);
  EXPECT_EQ(pool.stats().ready, 4u);

  now += WarmPool::kDemandMemory + std::chrono::seconds(1); // forgotten: 1 + this job
  EXPECT_NE(pool.take(fault), nullptr);
  EXPECT_EQ(pool.stats().ready, 2u);

  // Short of memory, a new set gets `size` and no more.
  ScriptedPool short_of_memory(1, 4);
  short_of_memory.memory = false;
  EXPECT_EQ(short_of_memory.pool.take(fault), nullptr);
  EXPECT_EQ(short_of_memory.pool.stats().ready, 1u);
  EXPECT_GE(short_of_memory.pool.stats().held_back_by_memory, 1u);
}

// A reinforcement-learning loop sends a burst every training step: the next burst, minutes later,
// finds the workers the last one grew (its first job does not see a quiet window and let them
// go), while the machine has memory to spare; short of memory, only the current demand is kept.
TEST(WarmPool, TheBusiestWindowIsRememberedForTheNextBurstWhileMemoryAllows) {
  ScriptedPool scripted(1, 4);
  auto& now = scripted.now;
  auto& memory = scripted.memory;
  auto& pool = scripted.pool;
  const auto fault = set_of({"libkeval_fault_plugin.so"});
  const auto burst = [&] {
    for (int i = 0; i < 2; ++i)
      pool.take(fault);
  };
  pool.take(fault); // learns the set; its first job's readiness is forgotten before the burst
  now += WarmPool::kDemandMemory + std::chrono::seconds(1);
  burst();
  EXPECT_EQ(pool.stats().ready, 3u); // 1 + two jobs in the window

  now += std::chrono::minutes(5); // the next training step
  EXPECT_NE(pool.take(fault), nullptr);
  EXPECT_EQ(pool.stats().ready, 3u) << "the first job of the next burst let the grown pool go";
  EXPECT_EQ(pool.stats().target, 3u);

  burst();
  now += std::chrono::minutes(5);
  memory = false; // the machine needs its memory back: extras past the current demand go
  EXPECT_NE(pool.take(fault), nullptr);
  EXPECT_EQ(pool.stats().ready, 2u); // 1 + this job
}

// Idle workers hold GPU memory a job may need: while the GPU they open on is short of it
// (supervisor/gpu_memory.hpp), a pool keeps `size` and no more, a burst's workers included, and
// grows again once it is not.
TEST(WarmPool, APoolShortOfGpuMemoryKeepsItsSizeAndNoMoreThenGrowsBack) {
  ScriptedPool scripted(1, 4);
  auto& now = scripted.now;
  auto& gpu_memory = scripted.gpu_memory;
  auto& pool = scripted.pool;
  const auto fault = set_of({"libkeval_fault_plugin.so"});
  gpu_memory = false;
  EXPECT_EQ(pool.take(fault), nullptr); // a first job would ready 4
  EXPECT_EQ(pool.stats().ready, 1u);
  EXPECT_GE(pool.stats().held_back_by_gpu_memory, 1u);
  EXPECT_EQ(pool.stats().held_back_by_memory, 0u); // the machine's memory is not what is short

  gpu_memory = true;
  EXPECT_NE(pool.take(fault), nullptr);
  EXPECT_EQ(pool.stats().ready, 4u); // the burst remembered from the first job

  // Mid-burst, a job's reading finds the GPU short: the extras go at the next take, the
  // current demand's too (the machine's memory alone would keep those).
  now += std::chrono::seconds(1);
  EXPECT_NE(pool.take(fault), nullptr);
  EXPECT_EQ(pool.stats().ready, 4u);
  gpu_memory = false;
  const size_t held_back = pool.stats().held_back_by_gpu_memory;
  EXPECT_NE(pool.take(fault), nullptr);
  EXPECT_EQ(pool.stats().ready, 1u);
  EXPECT_GT(pool.stats().held_back_by_gpu_memory, held_back);
  EXPECT_EQ(pool.stats().target, 4u) << "the demand is still known; memory holds it back";
}

// While jobs queue for the GPU, a worker ready ahead of its job would only wait longer for it,
// and preparing more slows the job that holds it: a pool grows no further than it is, keeps the
// workers it has (down to `size`, which it refills) and grows again once the queue is gone.
TEST(WarmPool, WhileJobsQueueForTheGpuAPoolGrowsNoFurtherAndKeepsWhatItHas) {
  ScriptedPool scripted(1, 4);
  auto& now = scripted.now;
  auto& pool = scripted.pool;
  const auto fault = set_of({"libkeval_fault_plugin.so"});
  EXPECT_EQ(pool.take(fault), nullptr); // readies 4: the start of a burst
  EXPECT_EQ(pool.stats().ready, 4u);
  EXPECT_EQ(pool.stats().held_back_by_gpu_queue, 0u);

  scripted.gpu_queue = true;
  for (size_t left = 3; left >= 1; --left) {
    now += std::chrono::seconds(1);
    EXPECT_NE(pool.take(fault), nullptr);
    EXPECT_EQ(pool.stats().ready, left) << "a take while jobs queue for the GPU refilled it";
  }
  const size_t held_back = pool.stats().held_back_by_gpu_queue;
  EXPECT_GE(held_back, 3u);
  EXPECT_EQ(pool.stats().target, 4u) << "the demand is still known; the queue holds it back";
  now += std::chrono::seconds(1);
  EXPECT_NE(pool.take(fault), nullptr);
  EXPECT_EQ(pool.stats().ready, 1u) << "the pool's size is refilled, queue or not";
  EXPECT_EQ(pool.stats().held_back_by_memory + pool.stats().held_back_by_gpu_memory, 0u);

  scripted.gpu_queue = false;
  now += std::chrono::seconds(1);
  EXPECT_NE(pool.take(fault), nullptr);
  EXPECT_EQ(pool.stats().ready, 4u) << "the queue is gone: the pool grows to its demand again";
  EXPECT_EQ(pool.stats().held_back_by_gpu_queue, held_back + 1);
}

TEST(WarmPool, MemoryToSpareIsAQuarterOfTheMachineAvailable) {
  const auto spare = [](const char* text) {
    std::istringstream in(text);
    return WarmPool::has_memory_to_spare(in);
  };
  EXPECT_TRUE(spare("MemTotal:       24000000 kB\nMemFree: 100 kB\nMemAvailable:    6000000 kB\n"));
  EXPECT_FALSE(
      spare("MemTotal:       24000000 kB\nMemFree: 100 kB\nMemAvailable:    5999999 kB\n"));
  EXPECT_FALSE(spare("MemAvailable:    6000000 kB\n")); // no total: not believed
  EXPECT_FALSE(spare(""));
}

TEST(WarmPool, ByDefaultAPoolGrowsToHalfTheCoresAtMostEightAndNeverBelowItsSize) {
  EXPECT_EQ(WarmPool::default_max_size(2, 16), 8u); // the GPU machine: 16 cores
  EXPECT_EQ(WarmPool::default_max_size(2, 128), 8u);
  EXPECT_EQ(WarmPool::default_max_size(2, 8), 4u);
  EXPECT_EQ(WarmPool::default_max_size(2, 2), 2u); // CI's 2 cores: no growth
  EXPECT_EQ(WarmPool::default_max_size(2, 1), 2u);
  EXPECT_EQ(WarmPool::default_max_size(10, 16), 10u); // --warm-workers above it: no growth
  EXPECT_EQ(WarmPool::default_max_size(0, 16), 8u);   // unused: a size of 0 keeps nothing
  // The sets in use share 18 by default, never less than one set may take.
  EXPECT_EQ(WarmPool::default_max_total(8), 18u);
  EXPECT_EQ(WarmPool::default_max_total(20), 20u);
}

// The sets in use share max_total: one hot set (a reinforcement-learning loop grading one kernel
// type) grows to max_size, and as more sets come into use each keeps a smaller share, never below
// `size`, the others' extras let go as the new set comes; a set no job used for kDemandMemory no
// longer counts, and its extras go at the next job of any set.
TEST(WarmPool, TheSetsInUseShareTheTotalAndOneHotSetTakesItsMax) {
  boost::asio::io_context ctx;
  WarmPool::Clock::time_point now = WarmPool::Clock::time_point{} + std::chrono::hours(1);
  WarmPool pool(ctx.get_executor(), worker_exe(), {},
                WarmPool::Sizing{.size = 1,
                                 .max_size = 4,
                                 .max_sets = 4,
                                 .max_total = 6,
                                 .now = [&] { return now; },
                                 .memory_to_spare = [] { return true; },
                                 .gpu_memory_to_spare = [] { return true; }});
  const auto a = set_of({"a.so"}), b = set_of({"b.so"}), c = set_of({"c.so"}), d = set_of({"d.so"});
  // Whether a job of `set` found a worker ready (each take readies the set's pool again).
  const auto found_one = [&](const WarmPool::PrewarmSet& set) { return pool.take(set) != nullptr; };
  EXPECT_FALSE(found_one(a));
  EXPECT_EQ(pool.stats().ready, 4u); // one set in use: its first job readies max_size (not 6)
  EXPECT_FALSE(found_one(b));
  EXPECT_EQ(pool.stats().ready, 6u) << "two sets: 3 each";
  EXPECT_EQ(pool.stats().target, 6u);
  EXPECT_FALSE(found_one(c));
  EXPECT_EQ(pool.stats().ready, 6u) << "three sets: 2 each, a's and b's extras let go";
  EXPECT_FALSE(found_one(d));
  EXPECT_EQ(pool.stats().ready, 4u) << "four sets: 6 / 4 is 1, and `size` is 1";
  EXPECT_EQ(pool.stats().sets, 4u);

  // Past kDemandMemory without jobs, b, c and d are no longer in use: a takes its max again.
  now += WarmPool::kDemandMemory + std::chrono::seconds(1);
  EXPECT_TRUE(found_one(a));
  EXPECT_TRUE(found_one(a));
  EXPECT_TRUE(found_one(a));
  const auto stats = pool.stats();
  EXPECT_EQ(stats.ready, 4u + 3u) << "a grew with its jobs to max_size; b, c, d keep `size`";
  EXPECT_EQ(stats.held_back_by_memory, 0u);

  // Ten minutes on, b alone is in use: a's demand is forgotten, and its extras go as b's job
  // comes, not at a next job of a's that may never come.
  now += WarmPool::kDemandMemory + std::chrono::seconds(1);
  EXPECT_TRUE(found_one(b));
  EXPECT_EQ(pool.stats().ready, 1u + 2u + 1u + 1u) << "a back to 1, b 1 + this job";
}

// Workers started together do not finish their prewarm in order (the cores are shared, device
// opens take turns in no set order): a job takes the oldest that is done, not the oldest, which
// would have it wait while a younger one sits ready; with none done, the oldest.
TEST(WarmPool, AJobTakesTheOldestWorkerDonePrewarmingOverAnOlderOneStillAtIt) {
  boost::asio::io_context ctx;
  int slow_pid = -1; // the first worker asked about never finishes its prewarm
  bool none_done = false;
  WarmPool pool(ctx.get_executor(), worker_exe(), {},
                WarmPool::Sizing{.size = 3,
                                 .max_size = 3,
                                 .max_sets = 4,
                                 .ready = [&](const supervisor::PrestartedWorker& worker) {
                                   if (slow_pid < 0)
                                     slow_pid = worker.pid();
                                   return !none_done && worker.pid() != slow_pid;
                                 }});
  const auto fault = set_of({"libkeval_fault_plugin.so"});
  EXPECT_EQ(pool.take(fault), nullptr); // learns the set: three started, the oldest first
  auto first = pool.take(fault);
  ASSERT_NE(first, nullptr);
  ASSERT_GT(slow_pid, 0);
  EXPECT_NE(first->pid(), slow_pid); // the oldest was asked first and passed over
  auto second = pool.take(fault);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(second->pid(), slow_pid);
  EXPECT_NE(second->pid(), first->pid());
  auto stats = pool.stats();
  EXPECT_EQ(stats.taken_out_of_order, 2u);
  EXPECT_EQ(stats.ready, 3u);
  EXPECT_EQ(stats.prewarmed, 2u); // the slow one is not

  none_done = true;
  auto oldest = pool.take(fault);
  ASSERT_NE(oldest, nullptr);
  EXPECT_EQ(oldest->pid(), slow_pid); // none done: the oldest, which started first
  stats = pool.stats();
  EXPECT_EQ(stats.taken_out_of_order, 2u);
  EXPECT_EQ(stats.taken, 3u);
  EXPECT_EQ(stats.prewarmed, 0u);
}

// On a machine with several GPUs each new worker is told to open the GPU its set's ready workers
// open least ahead, on its command line, and the worker takes the option (it says hello): a
// pool's workers are spread over the GPUs as it refills. No worker counts as prewarmed here, so
// the jobs take them in the order they started: a take of the first to say hello instead (which
// worker that is depends on the machine's load) may take two of one GPU in a row, and the counts
// below would be the load's, not the refills'.
TEST(WarmPool, EachNewWorkerOpensAheadTheGpuItsSetsWorkersOpenLeast) {
  boost::asio::io_context ctx;
  WarmPool pool(
      ctx.get_executor(), worker_exe(), {},
      WarmPool::Sizing{.size = 4,
                       .max_size = 4,
                       .gpus = {0, 1},
                       .ready = [](const supervisor::PrestartedWorker&) { return false; }});
  const auto fault = set_of({"libkeval_fault_plugin.so"});
  EXPECT_EQ(pool.take(fault), nullptr);
  std::map<int, int> opened; // GPU -> workers taken that were told to open it
  std::vector<std::unique_ptr<supervisor::PrestartedWorker>> taken;
  for (int i = 0; i < 6; ++i) {
    auto worker = pool.take(fault);
    ASSERT_NE(worker, nullptr) << "take " << i;
    ASSERT_TRUE(worker->open_ahead_device()) << "take " << i;
    ++opened[*worker->open_ahead_device()];
    std::ifstream cmdline("/proc/" + std::to_string(worker->pid()) + "/cmdline");
    std::string command((std::istreambuf_iterator<char>(cmdline)), {});
    std::replace(command.begin(), command.end(), '\0', ' ');
    EXPECT_NE(command.find("--open-ahead-device " + std::to_string(*worker->open_ahead_device())),
              std::string::npos)
        << command;
    taken.push_back(std::move(worker));
  }
  EXPECT_EQ(opened, (std::map<int, int>{{0, 3}, {1, 3}}));
  bool ready = false;
  for (int i = 0; i < 3000 && !ready && taken.back()->alive(); ++i) { // at most 30 s
    ready = taken.back()->ready();
    if (!ready)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(ready) << "a worker told to open a GPU ahead never said hello";
}

// ready() is whether the worker's hello is waiting on its channel: a real worker's, once its
// prewarm is done, and never a process's that has not written it. Reading nothing, it leaves
// the hello for the session that adopts the worker.
TEST(PrestartedWorker, IsReadyOnceItsHelloIsWaitingAndNeverBefore) {
  boost::asio::io_context ctx;
  TempDir tmp;
  const auto silent = tmp.path() / "never-says-hello";
  {
    std::ofstream script(silent);
    script << "#!/bin/sh\nexec sleep 60\n";
  }
  std::filesystem::permissions(silent, std::filesystem::perms::owner_all);
  auto mute = supervisor::PrestartedWorker::spawn(ctx.get_executor(), silent, {},
                                                  set_of({"libkeval_fault_plugin.so"}));
  auto worker = supervisor::PrestartedWorker::spawn(ctx.get_executor(), worker_exe(), {},
                                                    set_of({"libkeval_fault_plugin.so"}));
  bool ready = false;
  for (int i = 0; i < 3000 && !ready && worker->alive(); ++i) { // at most 30 s
    ready = worker->ready();
    if (!ready)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(ready) << "the prestarted worker never said hello";
  EXPECT_TRUE(worker->ready()) << "ready() consumed the hello";
  EXPECT_TRUE(mute->alive());
  EXPECT_FALSE(mute->ready());
}

// A job that takes a prestarted worker tells it so before anything else: the worker may still be
// prewarming, and then waits for its device-open turn before the pool's spares
// (worker/engine/device_turn.hpp's OpenTurn). This worker only records what the host sends it and
// never says hello, so the host sends nothing but that.
TEST(PrestartedWorker, AJobThatTakesItTellsItSoFirst) {
  boost::asio::io_context ctx;
  TempDir tmp;
  const auto received = tmp.path() / "received";
  const auto recorder = tmp.path() / "records-what-the-host-sends";
  {
    std::ofstream script(recorder);
    script << "#!/bin/sh\nexec cat <&3 > '" << received.string() << "'\n";
  }
  std::filesystem::permissions(recorder, std::filesystem::perms::owner_all);
  auto worker = supervisor::PrestartedWorker::spawn(ctx.get_executor(), recorder, {},
                                                    set_of({"libkeval_fault_plugin.so"}));
  supervisor::JobLaunch launch;
  launch.worker_exe = recorder;
  launch.job_id = "takes-a-prestarted-worker";
  launch.mode = "evaluate";
  std::optional<supervisor::SessionOutcome> outcome;
  supervisor::SessionHandlers handlers;
  handlers.on_complete = [&](supervisor::SessionOutcome o) { outcome = std::move(o); };
  auto session = supervisor::WorkerSession::start(ctx.get_executor(), std::move(launch),
                                                  std::move(handlers), std::move(worker));
  // One frame: the 8-byte header (protocol/frame.hpp), then its JSON.
  std::string bytes;
  const auto read_all = [&] {
    std::ifstream in(received, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  };
  for (int i = 0; i < 3000 && bytes.find('}') == std::string::npos; ++i) { // at most 30 s
    ctx.run_for(std::chrono::milliseconds(10));
    read_all();
  }
  ASSERT_GT(bytes.size(), 8u) << "the worker was told nothing";
  EXPECT_EQ(bytes.substr(0, 4), "KEV1");
  const boost::json::object first = boost::json::parse(bytes.substr(8)).as_object();
  EXPECT_EQ(first.at("type"), "taken") << bytes.substr(8);
  session->cancel();
  for (int i = 0; i < 3000 && !outcome; ++i)
    ctx.run_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->end, supervisor::SessionOutcome::End::cancelled) << outcome->message;
}

TEST(WarmPool, SizeZeroKeepsNothing) {
  boost::asio::io_context ctx;
  WarmPool pool(ctx.get_executor(), worker_exe(), {}, 0);
  const auto a = set_of({"libkeval_fault_plugin.so"});
  EXPECT_EQ(pool.take(a), nullptr);
  EXPECT_EQ(pool.take(a), nullptr);
  EXPECT_EQ(pool.stats().ready, 0u);
}

} // namespace
} // namespace keval::test
