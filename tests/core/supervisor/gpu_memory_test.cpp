// The GPU memory readings the pools of prestarted workers grow by: only GPUs that prestarted
// workers open on count, the newest reading of each stands, and nothing read is nothing held back.
#include "supervisor/gpu_memory.hpp"

#include <chrono>

#include <gtest/gtest.h>

namespace keval::test {
namespace {

using std::chrono::seconds;
using supervisor::GpuMemoryReadings;

constexpr uint64_t kGiB = 1ull << 30;

protocol::DeviceMemoryReading reading(const char* gpu, uint64_t free_gib, uint64_t total_gib) {
  return {gpu, free_gib * kGiB, total_gib * kGiB};
}

TEST(GpuMemoryReadings, APoolGrowsWhileItsWorkersGpuHasHalfItsMemoryFree) {
  GpuMemoryReadings readings;
  const auto t0 = GpuMemoryReadings::Clock::time_point{} + std::chrono::hours(1);
  EXPECT_TRUE(readings.to_spare()); // nothing read: nothing to hold back by
  readings.record_prestarted(reading("0000:01:00.0", 70, 80), t0);
  EXPECT_TRUE(readings.to_spare());
  readings.record_job(reading("0000:01:00.0", 41, 80), t0 + seconds(1));
  EXPECT_TRUE(readings.to_spare()); // just over half
  readings.record_job(reading("0000:01:00.0", 39, 80), t0 + seconds(2));
  EXPECT_FALSE(readings.to_spare()); // a job's memory counts as used as it ends
  readings.record_job(reading("0000:01:00.0", 75, 80), t0 + seconds(3));
  EXPECT_TRUE(readings.to_spare()); // the next, smaller job's reading
}

TEST(GpuMemoryReadings, OnlyGpusThatPrestartedWorkersOpenOnCount) {
  GpuMemoryReadings readings;
  const auto t0 = GpuMemoryReadings::Clock::time_point{} + std::chrono::hours(1);
  // A job on a GPU where no idle worker holds memory (several GPUs: none is opened ahead).
  readings.record_job(reading("0000:02:00.0", 1, 80), t0);
  EXPECT_TRUE(readings.to_spare());
  // Once a prestarted worker says it opened there, that GPU's latest reading decides.
  readings.record_prestarted(reading("0000:02:00.0", 60, 80), t0 + seconds(1));
  EXPECT_FALSE(readings.to_spare()) << "the job's reading is newer than what the worker read";
  readings.record_job(reading("0000:02:00.0", 60, 80), t0 + seconds(2));
  EXPECT_TRUE(readings.to_spare());
}

TEST(GpuMemoryReadings, TheNewestReadingStandsAndNonsenseIsIgnored) {
  GpuMemoryReadings readings;
  const auto t0 = GpuMemoryReadings::Clock::time_point{} + std::chrono::hours(1);
  readings.record_prestarted(reading("a", 10, 80), t0);
  readings.record_job(reading("a", 70, 80), t0 + seconds(5));
  readings.record_job(reading("a", 10, 80), t0 + seconds(4)); // heard late, read earlier
  EXPECT_TRUE(readings.to_spare());
  readings.record_job(reading("a", 90, 80), t0 + seconds(6)); // more free than there is
  readings.record_job({"a", 0, 0}, t0 + seconds(6));
  readings.record_job({"", 0, 80}, t0 + seconds(6));
  const boost::json::array report = readings.report(t0 + seconds(8));
  ASSERT_EQ(report.size(), 1u);
  const auto& a = report[0].as_object();
  EXPECT_EQ(a.at("gpu").as_string(), "a");
  EXPECT_EQ(a.at("free_bytes").to_number<uint64_t>(), 70 * kGiB);
  EXPECT_EQ(a.at("total_bytes").to_number<uint64_t>(), 80 * kGiB);
  EXPECT_DOUBLE_EQ(a.at("free_fraction").as_double(), 70.0 / 80.0);
  EXPECT_DOUBLE_EQ(a.at("age_s").as_double(), 3.0);
  EXPECT_TRUE(a.at("prestarted_workers_open").as_bool());
}

TEST(GpuMemoryReadings, AnyShortGpuHoldsThePoolsBack) {
  GpuMemoryReadings readings;
  const auto t0 = GpuMemoryReadings::Clock::time_point{} + std::chrono::hours(1);
  readings.record_prestarted(reading("a", 70, 80), t0);
  readings.record_prestarted(reading("b", 20, 80), t0);
  EXPECT_FALSE(readings.to_spare());
  EXPECT_EQ(readings.report(t0).size(), 2u);
}

} // namespace
} // namespace keval::test
