// The GPU pool without GPUs: leases over fake devices, delivered on a private io_context.
#include "daemon/device_discovery.hpp"
#include "daemon/device_pool.hpp"

#include <optional>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

namespace keval::daemon {
namespace {

namespace json = boost::json;

GpuDevice gpu(int index, std::string type, int arch) {
  return GpuDevice{index, "NVIDIA " + type, std::move(type), arch, 80ull << 30};
}

DeviceWish cuda_wish(std::optional<std::string> type = std::nullopt, int arch = 0) {
  return DeviceWish{json::array{"cuda", "cpu"}, std::move(type), arch};
}

// A job whose worker opened its contexts ahead on GPU `index`.
DeviceWish opened_on(int index, std::optional<std::string> type = std::nullopt) {
  DeviceWish wish = cuda_wish(std::move(type));
  wish.opened_cuda = index;
  return wish;
}

// Collects grants; `pump` runs what the pool posted.
struct Grants {
  boost::asio::io_context ioc;
  std::vector<std::pair<int, DeviceGrant>> received; // (caller's tag, grant)

  std::vector<int> quiet; // the tags told their GPU is quiet, in order

  std::function<void(DeviceGrant)> tagged(int tag) {
    return [this, tag](DeviceGrant g) { received.emplace_back(tag, std::move(g)); };
  }
  std::function<void()> quiet_for(int tag) {
    return [this, tag] { quiet.push_back(tag); };
  }
  void pump() {
    ioc.restart();
    ioc.poll();
  }
};

// A job whose processes are stopped for good hands its GPU over: the next waiter gets it at once,
// told it is not quiet, and hears that it is once the job handing over is gone, never before;
// the one after that still waits for a GPU of its own.
TEST(DevicePool, AHandedOverGpuGoesToTheNextJobWhichHearsItIsQuietOnceTheLastOneIsGone) {
  Grants grants;
  DevicePool pool(grants.ioc.get_executor(), {gpu(0, "H100", 90)});
  const std::vector<int>& quiet = grants.quiet;
  const auto first = pool.acquire(cuda_wish(), grants.tagged(1), grants.quiet_for(1));
  const auto second = pool.acquire(cuda_wish(), grants.tagged(2), grants.quiet_for(2));
  const auto third = pool.acquire(cuda_wish(), grants.tagged(3), grants.quiet_for(3));
  grants.pump();
  ASSERT_EQ(grants.received.size(), 1u);
  EXPECT_TRUE(grants.received[0].second.quiet);
  EXPECT_FALSE(grants.received[0].second.to_protocol().contains("quiet"));
  EXPECT_EQ(grants.received[0].second.to_protocol().at("handover"), true);

  pool.hand_over(first);
  pool.hand_over(first); // once is enough
  grants.pump();
  ASSERT_EQ(grants.received.size(), 2u); // the second, not the third
  EXPECT_EQ(grants.received[1].first, 2);
  EXPECT_FALSE(grants.received[1].second.quiet);
  EXPECT_EQ(grants.received[1].second.to_protocol().at("quiet"), false);
  EXPECT_TRUE(quiet.empty());
  auto gpu_now = pool.snapshot()[0];
  EXPECT_EQ(gpu_now.holders, 2u);
  EXPECT_EQ(gpu_now.departing, 1u);
  EXPECT_EQ(pool.waiting(), 1u);

  pool.release(first); // gone: the second may time now
  grants.pump();
  EXPECT_EQ(quiet, std::vector<int>{2});
  EXPECT_EQ(grants.received.size(), 2u);
  EXPECT_EQ(pool.snapshot()[0].departing, 0u);

  // The second ends without handing over: the third gets a quiet GPU, the usual way.
  pool.release(second);
  grants.pump();
  ASSERT_EQ(grants.received.size(), 3u);
  EXPECT_EQ(grants.received[2].first, 3);
  EXPECT_TRUE(grants.received[2].second.quiet);
  pool.release(third);
  grants.pump();
  EXPECT_EQ(quiet, std::vector<int>{2});
  EXPECT_EQ(pool.snapshot()[0].holders, 0u);
}

// A job granted a GPU that is not quiet and gone (or handing over itself) before it became quiet
// hears nothing; two jobs handing over one after the other keep the GPU from being quiet until
// both are gone.
TEST(DevicePool, QuietComesOnceEveryJobHandingTheGpuOverIsGoneAndOnlyToHoldersStillWaiting) {
  Grants grants;
  DevicePool pool(grants.ioc.get_executor(), {gpu(0, "H100", 90)});
  const std::vector<int>& quiet = grants.quiet;
  const auto a = pool.acquire(cuda_wish(), grants.tagged(1), grants.quiet_for(1));
  const auto b = pool.acquire(cuda_wish(), grants.tagged(2), grants.quiet_for(2));
  const auto c = pool.acquire(cuda_wish(), grants.tagged(3), grants.quiet_for(3));
  const auto d = pool.acquire(cuda_wish(), grants.tagged(4), grants.quiet_for(4));
  pool.hand_over(a); // b granted, not quiet
  pool.hand_over(b); // b failed quickly and hands over too: c granted, not quiet
  grants.pump();
  ASSERT_EQ(grants.received.size(), 3u);
  EXPECT_FALSE(grants.received[2].second.quiet);
  pool.release(a);
  grants.pump();
  EXPECT_TRUE(quiet.empty()); // b is still ending
  pool.release(c);            // c gives up before it became quiet
  grants.pump();
  ASSERT_EQ(grants.received.size(), 4u);
  EXPECT_FALSE(grants.received[3].second.quiet); // d: b is still ending
  pool.release(b);
  grants.pump();
  EXPECT_EQ(quiet, std::vector<int>{4});
  pool.release(d);
  // The CPU device is never handed over.
  const auto cpu = pool.acquire(DeviceWish{json::array{"cpu"}, std::nullopt, 0}, grants.tagged(5));
  pool.hand_over(cpu);
  pool.release(cpu);
  grants.pump();
  EXPECT_EQ(pool.snapshot()[0].holders, 0u);
  EXPECT_EQ(pool.snapshot()[0].departing, 0u);
}

TEST(DevicePool, GpuIsExclusiveAndWaitersAreServedInOrder) {
  Grants grants;
  DevicePool pool(grants.ioc.get_executor(), {gpu(0, "H100", 90)});
  const auto first = pool.acquire(cuda_wish(), grants.tagged(1));
  const auto second = pool.acquire(cuda_wish(), grants.tagged(2));
  pool.acquire(cuda_wish(), grants.tagged(3));
  grants.pump();
  ASSERT_EQ(grants.received.size(), 1u);
  EXPECT_EQ(grants.received[0].first, 1);
  EXPECT_EQ(grants.received[0].second.type, "cuda");
  EXPECT_EQ(grants.received[0].second.gpu_type, "H100");
  EXPECT_EQ(pool.waiting(), 2u);
  EXPECT_EQ(pool.snapshot()[0].holders, 1u);

  pool.release(first);
  grants.pump();
  ASSERT_EQ(grants.received.size(), 2u);
  EXPECT_EQ(grants.received[1].first, 2);
  pool.release(second);
  grants.pump();
  ASSERT_EQ(grants.received.size(), 3u);
  EXPECT_EQ(grants.received[2].first, 3);
  EXPECT_EQ(pool.snapshot()[0].grants, 3u);
}

TEST(DevicePool, ReleasingAWaitingTicketWithdrawsIt) {
  Grants grants;
  DevicePool pool(grants.ioc.get_executor(), {gpu(0, "A100", 80)});
  const auto holder = pool.acquire(cuda_wish(), grants.tagged(1));
  const auto withdrawn = pool.acquire(cuda_wish(), grants.tagged(2));
  pool.release(withdrawn);
  pool.release(holder);
  grants.pump();
  ASSERT_EQ(grants.received.size(), 1u);
  EXPECT_EQ(pool.waiting(), 0u);
  EXPECT_EQ(pool.snapshot()[0].holders, 0u);
  pool.release(holder); // idempotent
  EXPECT_EQ(pool.snapshot()[0].holders, 0u);
}

TEST(DevicePool, JobsPerGpuAllowsSharing) {
  Grants grants;
  DevicePool pool(grants.ioc.get_executor(), {gpu(0, "H100", 90)}, /*jobs_per_gpu=*/2);
  pool.acquire(cuda_wish(), grants.tagged(1));
  pool.acquire(cuda_wish(), grants.tagged(2));
  pool.acquire(cuda_wish(), grants.tagged(3));
  grants.pump();
  EXPECT_EQ(grants.received.size(), 2u);
  EXPECT_EQ(pool.waiting(), 1u);
}

TEST(DevicePool, SpreadsJobsOverIdleGpus) {
  Grants grants;
  DevicePool pool(grants.ioc.get_executor(), {gpu(0, "H100", 90), gpu(1, "H100", 90)});
  pool.acquire(cuda_wish(), grants.tagged(1));
  pool.acquire(cuda_wish(), grants.tagged(2));
  grants.pump();
  ASSERT_EQ(grants.received.size(), 2u);
  EXPECT_NE(grants.received[0].second.index, grants.received[1].second.index);
}

// A job whose worker opened a GPU ahead gets that one when it is free, though another is idler.
TEST(DevicePool, AJobGetsTheFreeGpuItsWorkerOpenedAhead) {
  Grants grants;
  DevicePool pool(grants.ioc.get_executor(), {gpu(0, "H100", 90), gpu(1, "H100", 90)});
  pool.acquire(opened_on(1), grants.tagged(1));
  pool.acquire(cuda_wish(), grants.tagged(2));  // no preference: the idle one
  pool.acquire(opened_on(0), grants.tagged(3)); // its GPU is taken: it waits
  grants.pump();
  ASSERT_EQ(grants.received.size(), 2u);
  EXPECT_EQ(grants.received[0].second.index, 1);
  EXPECT_EQ(grants.received[1].second.index, 0);
  EXPECT_EQ(pool.waiting(), 1u);
}

// A GPU that comes free goes to the earliest waiter that opened it ahead, before an earlier
// waiter that opened the other one (which gets its own when that comes free); a waiter without a
// preference still gets a GPU nobody waiting opened.
TEST(DevicePool, AFreedGpuGoesToTheEarliestWaiterThatOpenedIt) {
  Grants grants;
  DevicePool pool(grants.ioc.get_executor(), {gpu(0, "H100", 90), gpu(1, "H100", 90)});
  const auto on0 = pool.acquire(opened_on(0), grants.tagged(1));
  const auto on1 = pool.acquire(opened_on(1), grants.tagged(2));
  pool.acquire(opened_on(1), grants.tagged(3)); // waits first
  pool.acquire(opened_on(0), grants.tagged(4)); // then this one
  grants.pump();
  ASSERT_EQ(grants.received.size(), 2u);
  pool.release(on0);
  grants.pump();
  ASSERT_EQ(grants.received.size(), 3u);
  EXPECT_EQ(grants.received[2].first, 4); // GPU 0 to the waiter that opened it
  EXPECT_EQ(grants.received[2].second.index, 0);
  pool.release(on1);
  grants.pump();
  ASSERT_EQ(grants.received.size(), 4u);
  EXPECT_EQ(grants.received[3].first, 3);
  EXPECT_EQ(grants.received[3].second.index, 1);
}

// Passed over by later waiters that opened the GPUs coming free, a waiter takes the next GPU that
// fits it once that has happened as many times as there are other GPUs: none waits for ever.
TEST(DevicePool, AWaiterPassedOverOftenEnoughTakesTheNextGpu) {
  Grants grants;
  DevicePool pool(grants.ioc.get_executor(),
                  {gpu(0, "H100", 90), gpu(1, "H100", 90), gpu(2, "H100", 90)});
  const auto on0 = pool.acquire(opened_on(0), grants.tagged(0));
  pool.acquire(opened_on(1), grants.tagged(0));
  pool.acquire(opened_on(2), grants.tagged(0));
  pool.acquire(cuda_wish(), grants.tagged(1)); // no preference, first in line
  std::vector<DevicePool::Ticket> later;
  for (int k = 0; k < 3; ++k)
    later.push_back(pool.acquire(opened_on(0), grants.tagged(10 + k)));
  grants.pump();
  ASSERT_EQ(grants.received.size(), 3u);
  pool.release(on0);
  grants.pump();
  ASSERT_EQ(grants.received.size(), 4u);
  EXPECT_EQ(grants.received.back().first, 10); // passed over once
  pool.release(later[0]);
  grants.pump();
  ASSERT_EQ(grants.received.size(), 5u);
  EXPECT_EQ(grants.received.back().first, 11); // twice: as many as the other GPUs
  pool.release(later[1]);
  grants.pump();
  ASSERT_EQ(grants.received.size(), 6u);
  EXPECT_EQ(grants.received.back().first, 1); // its patience is out: GPU 0 is its
  EXPECT_EQ(grants.received.back().second.index, 0);
  EXPECT_EQ(pool.waiting(), 1u);
}

// A GPU opened ahead that does not fit the wish (another type) is no preference at all.
TEST(DevicePool, AnOpenedGpuThatDoesNotFitTheWishIsIgnored) {
  Grants grants;
  DevicePool pool(grants.ioc.get_executor(), {gpu(0, "A100", 80), gpu(1, "H100", 90)});
  pool.acquire(opened_on(0, "H100"), grants.tagged(1));
  grants.pump();
  ASSERT_EQ(grants.received.size(), 1u);
  EXPECT_EQ(grants.received[0].second.index, 1);
}

TEST(DevicePool, GpuTypeAndArchConstrainTheGrant) {
  Grants grants;
  DevicePool pool(grants.ioc.get_executor(), {gpu(0, "A100", 80), gpu(1, "H200", 90)});
  pool.acquire(cuda_wish("H200"), grants.tagged(1));
  pool.acquire(cuda_wish(std::nullopt, 80), grants.tagged(2));
  grants.pump();
  ASSERT_EQ(grants.received.size(), 2u);
  EXPECT_EQ(grants.received[0].second.index, 1);
  EXPECT_EQ(grants.received[1].second.index, 0);
  EXPECT_TRUE(pool.has_gpu_type("A100"));
  EXPECT_FALSE(pool.has_gpu_type("H100"));
  EXPECT_EQ(pool.uniform_gpu_type(), "");
}

TEST(DevicePool, AWaiterForABusyTypeDoesNotBlockAnotherType) {
  Grants grants;
  DevicePool pool(grants.ioc.get_executor(), {gpu(0, "A100", 80), gpu(1, "H100", 90)});
  const auto a100 = pool.acquire(cuda_wish("A100"), grants.tagged(1));
  const auto h100 = pool.acquire(cuda_wish("H100"), grants.tagged(2));
  pool.acquire(cuda_wish("A100"), grants.tagged(3)); // waits for GPU 0
  pool.acquire(cuda_wish("H100"), grants.tagged(4)); // waits for GPU 1
  grants.pump();
  ASSERT_EQ(grants.received.size(), 2u);
  pool.release(h100);
  grants.pump();
  ASSERT_EQ(grants.received.size(), 3u);
  EXPECT_EQ(grants.received[2].first, 4);
  pool.release(a100);
  grants.pump();
  ASSERT_EQ(grants.received.size(), 4u);
  EXPECT_EQ(grants.received[3].first, 3);
}

TEST(DevicePool, CpuIsSharedAndNeedsNoLease) {
  Grants grants;
  DevicePool pool(grants.ioc.get_executor(), {});
  const DeviceWish cpu{json::array{"cpu"}, std::nullopt, 0};
  for (int i = 0; i < 5; ++i)
    pool.acquire(cpu, grants.tagged(i));
  grants.pump();
  ASSERT_EQ(grants.received.size(), 5u);
  for (const auto& [tag, grant] : grants.received) {
    EXPECT_EQ(grant.type, "cpu");
    EXPECT_EQ(grant.gpu_type, "cpu");
    EXPECT_EQ(json::serialize(grant.to_protocol()), R"({"device":{"type":"cpu","index":0}})");
  }
}

TEST(DevicePool, RefusesWhatNoDeviceHereCanServe) {
  Grants grants;
  DevicePool pool(grants.ioc.get_executor(), {gpu(0, "A100", 80)});
  pool.acquire(DeviceWish{json::array{"cuda"}, std::string("H200"), 0}, grants.tagged(1));
  grants.pump();
  ASSERT_EQ(grants.received.size(), 1u);
  const DeviceGrant& refusal = grants.received[0].second;
  EXPECT_TRUE(refusal.type.empty());
  EXPECT_NE(refusal.error.find("no GPU of type H200"), std::string::npos) << refusal.error;
  EXPECT_TRUE(refusal.to_protocol().contains("error"));

  Grants none;
  DevicePool empty(none.ioc.get_executor(), {});
  empty.acquire(DeviceWish{json::array{"cuda"}, std::nullopt, 0}, none.tagged(1));
  none.pump();
  ASSERT_EQ(none.received.size(), 1u);
  EXPECT_NE(none.received[0].second.error.find("no CUDA device"), std::string::npos);
}

TEST(DevicePool, BusyTimeAccumulatesOnlyWhileHeld) {
  Grants grants;
  DevicePool pool(grants.ioc.get_executor(), {gpu(0, "H100", 90)});
  EXPECT_EQ(pool.snapshot()[0].busy_ms, 0.0);
  const auto ticket = pool.acquire(cuda_wish(), grants.tagged(1));
  pool.release(ticket);
  const double after_release = pool.snapshot()[0].busy_ms;
  EXPECT_GE(after_release, 0.0);
  EXPECT_EQ(pool.snapshot()[0].busy_ms, after_release); // idle: no longer growing
}

TEST(DevicePool, CompileArchPicksTheLeastLoadedArchitecture) {
  Grants grants;
  DevicePool pool(grants.ioc.get_executor(), {gpu(0, "A100", 80), gpu(1, "H100", 90)});
  EXPECT_EQ(pool.compile_arch(std::nullopt), 90); // tie: the newer one
  pool.acquire(cuda_wish(std::nullopt, 90), grants.tagged(1));
  EXPECT_EQ(pool.compile_arch(std::nullopt), 80);
  EXPECT_EQ(pool.compile_arch(std::string("H100")), 90);
  Grants none;
  EXPECT_EQ(DevicePool(none.ioc.get_executor(), {}).compile_arch(std::nullopt), 0);
}

TEST(DevicePool, JobsArrivingTogetherSpreadOverTheArchitectures) {
  Grants grants;
  DevicePool pool(grants.ioc.get_executor(), {gpu(0, "A100", 80), gpu(1, "H100", 90)});
  // Neither job holds or waits for a GPU yet: the first one's reservation is what tells them
  // apart (without it both would compile for sm_90 and queue for the one H100).
  const int first = pool.reserve_compile_arch(std::nullopt);
  const int second = pool.reserve_compile_arch(std::nullopt);
  EXPECT_EQ(first, 90);
  EXPECT_EQ(second, 80);
  EXPECT_EQ(pool.compile_arch(std::nullopt), 90); // one job per architecture: the tie again
  // Asking for a device ends a reservation: the job is counted as waiting or holding instead.
  pool.end_compile_reservation(first);
  pool.acquire(cuda_wish(std::nullopt, first), grants.tagged(1));
  EXPECT_EQ(pool.compile_arch(std::nullopt), 90);
  pool.end_compile_reservation(second); // that job ended without asking
  EXPECT_EQ(pool.compile_arch(std::nullopt), 80);
  pool.end_compile_reservation(second); // nothing left to end: no effect
  pool.end_compile_reservation(0);
  EXPECT_EQ(pool.compile_arch(std::nullopt), 80);
}

TEST(DeviceDiscovery, ParsesTheWorkersDeviceList) {
  const auto found = parse_device_list(
      R"({"devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "gpu_type": "H100",
                        "arch": 90, "memory_bytes": 85520809984}]})");
  ASSERT_EQ(found.gpus.size(), 1u);
  EXPECT_EQ(found.gpus[0].gpu_type, "H100");
  EXPECT_EQ(found.gpus[0].arch, 90);
  EXPECT_EQ(found.gpus[0].memory_bytes, 85520809984ull);

  const auto none = parse_device_list(R"({"devices": [], "reason": "no CUDA driver"})");
  EXPECT_TRUE(none.gpus.empty());
  EXPECT_EQ(none.reason, "no CUDA driver");

  EXPECT_THROW(parse_device_list("garbage"), std::runtime_error);
  EXPECT_THROW(parse_device_list(R"({"devices": [{"index": "zero"}]})"), std::runtime_error);
}

} // namespace
} // namespace keval::daemon
