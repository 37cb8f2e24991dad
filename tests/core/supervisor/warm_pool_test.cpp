// Prestarted workers are kept per prewarm set: a job only ever takes a worker that prewarmed
// exactly its plugins, sets are learned from the jobs that arrive, and the least recently used
// set is dropped past the limit.
#include "supervisor/warm_pool.hpp"
#include "support/test_env.hpp"

#include <set>

#include <boost/asio/io_context.hpp>
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
