// A sample's device trace summarised (what the runner sends) and merged (what the trusted worker
// keeps): the window between keval's markers, work outside it, keval's own copies, the bounds on
// what a runner may send, and the names library_only matches.
#include "worker/engine/device_work.hpp"

#include <string>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace keval::worker {
namespace {

using Kind = TracedWork::Kind;
using ::testing::HasSubstr;

constexpr const char* kFlush = "keval_sample_start";
constexpr const char* kStop = "keval_sample_stop";
constexpr uint32_t kKevalStream = 7;

// The two markers: the window is [1000, 2000) ns.
std::vector<TracedWork> markers() {
  return {{Kind::kernel, kFlush, 900, 1000, kKevalStream},
          {Kind::kernel, kStop, 2000, 2001, kKevalStream}};
}

std::vector<TracedWork> with(std::vector<TracedWork> extra) {
  std::vector<TracedWork> all = markers();
  all.insert(all.end(), extra.begin(), extra.end());
  return all;
}

TEST(SummarizeSample, WorkInsideTheWindowIsBusyTimeWithOverlapsCountedOnce) {
  const SampleActivity a = summarize_sample(with({{Kind::kernel, "add", 1100, 1500, kKevalStream},
                                                  {Kind::kernel, "add", 1400, 1600, 3},
                                                  {Kind::memset, "memset", 1700, 1800, 3}}),
                                            kFlush, kStop);
  EXPECT_DOUBLE_EQ(a.busy_ms, 600e-6); // [1100, 1600) and [1700, 1800)
  EXPECT_DOUBLE_EQ(a.outside_ms, 0.0);
  ASSERT_EQ(a.work.size(), 2u);
  EXPECT_EQ(a.work[0].name, "add"); // longest total first
  EXPECT_EQ(a.work[0].count, 2);
  EXPECT_DOUBLE_EQ(a.work[0].total_ms, 600e-6);
  EXPECT_EQ(a.work[0].streams, (std::vector<uint32_t>{3, kKevalStream}));
  EXPECT_EQ(a.work[0].outside, 0);
  EXPECT_EQ(a.work[1].kind, "memset");
}

TEST(SummarizeSample, WorkRunningPastTheStopOrBeforeTheFlushIsOutside) {
  const SampleActivity a =
      summarize_sample(with({{Kind::kernel, "late", 1900, 5000, 3},   // 100 in, 3000 out
                             {Kind::kernel, "early", 100, 800, 3},    // before the flush
                             {Kind::memcpy, "DtoD", 2500, 2600, 3}}), // a copy of its own
                       kFlush, kStop);
  EXPECT_DOUBLE_EQ(a.busy_ms, 100e-6);
  EXPECT_DOUBLE_EQ(a.outside_ms, (3000 + 700) * 1e-6); // the copy overlaps "late": once
  int64_t outside = 0;
  for (const auto& w : a.work)
    outside += w.outside;
  EXPECT_EQ(outside, 3);
}

TEST(SummarizeSample, KevalsOwnCopiesBeforeTheFlushAreLeftOut) {
  const SampleActivity a = summarize_sample(
      with({{Kind::memcpy, "DtoD", 100, 200, kKevalStream},
            {Kind::kernel, "keval_gather", 300, 400, kKevalStream},
            {Kind::kernel, "keval_l2_flush", 500, 800, kKevalStream},
            // The same on another stream, or a kernel of another name, is the process's own.
            {Kind::memcpy, "DtoD", 100, 200, 3},
            {Kind::kernel, "gather", 300, 400, kKevalStream}}),
      kFlush, kStop);
  ASSERT_EQ(a.work.size(), 2u) << boost::json::serialize(to_json(a));
  EXPECT_DOUBLE_EQ(a.outside_ms, 200e-6);
}

TEST(SummarizeSample, MissingDoubledOrDisorderedMarkersLoseTheTrace) {
  std::vector<TracedWork> no_stop = {markers()[0]};
  EXPECT_THAT([&] { summarize_sample(no_stop, kFlush, kStop); },
              ::testing::ThrowsMessage<TraceLost>(HasSubstr("0 of keval's keval_sample_stop")));
  EXPECT_THROW(summarize_sample({}, kFlush, kStop), TraceLost);
  EXPECT_THROW(
      summarize_sample(with({{Kind::kernel, kFlush, 1200, 1300, kKevalStream}}), kFlush, kStop),
      TraceLost);
  std::vector<TracedWork> elsewhere = markers();
  elsewhere[1].stream = 3;
  EXPECT_THROW(summarize_sample(elsewhere, kFlush, kStop), TraceLost);
  std::vector<TracedWork> reversed = markers();
  reversed[1].start_ns = 500;
  EXPECT_THROW(summarize_sample(reversed, kFlush, kStop), TraceLost);
}

// One read of the trace for three samples: each record goes to the sample whose read it would
// have arrived in (the first mark after its start), and each sample then summarises as if read
// alone; what started after the last mark waits for the next read.
TEST(SplitAtCuts, EachRecordGoesToTheSampleWhoseReadItWouldHaveArrivedIn) {
  const auto sample = [](uint64_t at) {
    return std::vector<TracedWork>{{Kind::kernel, kFlush, at, at + 100, kKevalStream},
                                   {Kind::kernel, "relu", at + 150, at + 250, kKevalStream},
                                   {Kind::kernel, kStop, at + 300, at + 301, kKevalStream}};
  };
  std::vector<TracedWork> records;
  for (uint64_t at : {1000u, 2000u, 3000u}) {
    const auto one = sample(at);
    records.insert(records.end(), one.begin(), one.end());
  }
  // The second sample left a memset running past its stop; keval's copy of each sample's outputs
  // comes after that sample's mark, before the next sample's flush.
  records.push_back({Kind::memset, "memset", 2200, 2600, 3});
  records.push_back({Kind::memcpy, "DtoD", 1500, 1510, kKevalStream});
  records.push_back({Kind::memcpy, "DtoD", 2700, 2710, kKevalStream});
  records.push_back({Kind::memcpy, "DtoD", 3500, 3510, kKevalStream}); // after the last mark
  std::vector<TracedWork> after{{Kind::kernel, "left", 1, 2, 3}};      // appended to, not reset
  const auto split = split_at_cuts(records, {{1400, true}, {2650, true}, {3400, true}}, after);
  ASSERT_EQ(split.size(), 3u);
  EXPECT_EQ(split[0].size(), 3u);
  EXPECT_EQ(split[1].size(), 5u); // its markers and kernel, the memset, the first copy
  EXPECT_EQ(split[2].size(), 4u);
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[1].start_ns, 3500u);
  const SampleActivity first = summarize_sample(split[0], kFlush, kStop);
  const SampleActivity second = summarize_sample(split[1], kFlush, kStop);
  const SampleActivity third = summarize_sample(split[2], kFlush, kStop);
  EXPECT_DOUBLE_EQ(first.outside_ms, 0.0);
  EXPECT_DOUBLE_EQ(second.outside_ms, 300e-6); // 2300 to 2600 ns, past the stop marker
  EXPECT_DOUBLE_EQ(third.outside_ms, 0.0);     // the copy before its flush is keval's own
  EXPECT_DOUBLE_EQ(third.busy_ms, 100e-6);
}

// A mark with nothing of its sample before it (the trace lost it) is that sample's TraceLost,
// not a sample quietly merged into its neighbour.
TEST(SplitAtCuts, ASampleWithoutRecordsLosesItsTrace) {
  std::vector<TracedWork> after;
  const auto split = split_at_cuts(markers(), {{3000, true}, {4000, true}}, after);
  ASSERT_EQ(split.size(), 2u);
  EXPECT_NO_THROW(summarize_sample(split[0], kFlush, kStop));
  EXPECT_THROW(summarize_sample(split[1], kFlush, kStop), TraceLost);
}

// Work dropped between two samples (a runner making the next inputs) is in neither: a cut that
// drops takes everything since the cut before it, as reading and dropping the trace there did.
TEST(SplitAtCuts, ADroppingCutTakesItsWorkOutOfEverySample) {
  std::vector<TracedWork> records = markers();
  records.push_back({Kind::kernel, "randn", 2500, 2600, kKevalStream}); // the next inputs made
  records.push_back({Kind::kernel, kFlush, 3000, 3100, kKevalStream});
  records.push_back({Kind::kernel, kStop, 3300, 3301, kKevalStream});
  std::vector<TracedWork> after;
  const auto split = split_at_cuts(records, {{2100, true}, {2700, false}, {3400, true}}, after);
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(split[0].size(), 2u);
  ASSERT_EQ(split[1].size(), 2u);
  const SampleActivity next = summarize_sample(split[1], kFlush, kStop);
  EXPECT_DOUBLE_EQ(next.outside_ms, 0.0) << "the inputs' work counted against the next sample";
  EXPECT_TRUE(after.empty());
}

TEST(SummarizeSample, NamesAreCutAndMadePrintableAndEntriesCapped) {
  std::vector<TracedWork> extra;
  extra.push_back({Kind::kernel, std::string(1000, 'k') + "\n\xff", 1100, 1200, 3});
  for (int i = 0; i < 100; ++i)
    extra.push_back({Kind::kernel, "k" + std::to_string(i), 1100, 1101, 3});
  const SampleActivity a = summarize_sample(with(extra), kFlush, kStop);
  ASSERT_EQ(a.work.size(), kMaxWorkEntries);
  EXPECT_EQ(a.work[0].name, std::string(kMaxWorkNameBytes, 'k'));
  EXPECT_EQ(a.work.back().name, "(other)");
  int64_t total = 0;
  for (const auto& w : a.work)
    total += w.count;
  EXPECT_EQ(total, 101);
}

TEST(SampleActivityJson, RoundTripsAndRejectsWhatARunnerMustNotSend) {
  const SampleActivity a =
      summarize_sample(with({{Kind::kernel, "add", 1100, 1500, 3}}), kFlush, kStop);
  const SampleActivity back = sample_activity_from_json(to_json(a));
  EXPECT_EQ(boost::json::serialize(to_json(back)), boost::json::serialize(to_json(a)));

  const auto rejects = [](const char* text, const char* field) {
    EXPECT_THAT([&] { sample_activity_from_json(boost::json::parse(text).as_object()); },
                ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr(field)))
        << text;
  };
  rejects(R"({"outside_ms":0,"work":[]})", "activity.busy_ms");
  rejects(R"({"busy_ms":-1,"outside_ms":0,"work":[]})", "activity.busy_ms");
  rejects(R"({"busy_ms":1e999,"outside_ms":0,"work":[]})", "activity.busy_ms");
  rejects(R"({"busy_ms":0,"outside_ms":0,"work":{}})", "activity.work");
  rejects(R"({"busy_ms":0,"outside_ms":0,"work":[{"kind":"fake","name":"a","count":1,)"
          R"("total_ms":0,"streams":[],"outside":0}]})",
          "activity.work[0].kind");
  rejects(R"({"busy_ms":0,"outside_ms":0,"work":[{"kind":"kernel","name":"a","count":1,)"
          R"("total_ms":0,"streams":[],"outside":2}]})",
          "activity.work[0].outside");
  rejects(R"({"busy_ms":0,"outside_ms":0,"work":[{"kind":"kernel","name":"a","count":1,)"
          R"("total_ms":0,"streams":[-1],"outside":0}]})",
          "activity.work[0].streams");
  std::string many = R"({"busy_ms":0,"outside_ms":0,"work":[)";
  for (size_t i = 0; i <= kMaxWorkEntries; ++i)
    many += std::string(i ? "," : "") +
            R"({"kind":"kernel","name":"a","count":1,"total_ms":0,"streams":[],"outside":0})";
  rejects((many + "]}").c_str(), "at most");
}

TEST(DeviceWorkInventory, MergesSamplesAndMatchesWholeIdentifiersOnly) {
  DeviceWorkInventory inventory;
  EXPECT_TRUE(inventory.empty());
  const SampleActivity a = summarize_sample(
      with({{Kind::kernel, "void add_kernel<float>(float const*, int)", 1100, 1500, 3},
            {Kind::kernel, "sm90_xmma_gemm_f32f32", 1500, 1900, 3}}),
      kFlush, kStop);
  inventory.add(a);
  inventory.add(a);
  EXPECT_FALSE(inventory.empty());
  const boost::json::array entries = inventory.to_json();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].at("count").to_number<int64_t>(), 2);
  EXPECT_TRUE(inventory.has_kernel_named({"add_kernel"}));
  EXPECT_FALSE(inventory.has_kernel_named({"add"}));    // a part of a name is not the name
  EXPECT_FALSE(inventory.has_kernel_named({"kernel"})); // nor is a suffix
  EXPECT_FALSE(inventory.has_kernel_named({}));
  EXPECT_FALSE(inventory.has_kernel_named({""}));
}

TEST(DeviceWorkInventory, KeepsAtMostItsCapOfEntries) {
  DeviceWorkInventory inventory;
  for (int i = 0; i < 100; ++i)
    inventory.add(summarize_sample(with({{Kind::kernel, "k" + std::to_string(i), 1100, 1200, 3}}),
                                   kFlush, kStop));
  const boost::json::array entries = inventory.to_json();
  EXPECT_LE(entries.size(), kMaxWorkEntries);
  int64_t total = 0;
  for (const auto& e : entries)
    total += e.at("count").to_number<int64_t>();
  EXPECT_EQ(total, 100);
}

} // namespace
} // namespace keval::worker
