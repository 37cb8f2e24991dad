// The state directory under load (issue 12): identical submissions keep one copy of a source, a
// blob that does not match its digest is never served, and past --state-max-bytes finished jobs
// are forgotten oldest-first while running ones stay; /stats reports the figures.
#include "support/daemon_harness.hpp"

#include <random>

#include <gtest/gtest.h>

namespace keval::test::daemon {
namespace {

// Text that barely compresses, so that bytes on disk count copies.
std::string noisy_source(size_t size, uint32_t seed) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::mt19937 rng(seed);
  std::string text = "// ";
  while (text.size() < size)
    text += kAlphabet[rng() % 64];
  return text;
}

json::object with_source(json::object request, const std::string& source) {
  request["kernel"].as_object()["source_code"] = source;
  return request;
}

uint64_t bytes_under(const fs::path& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    // Records and blobs; not refused ones, the blob lock or a record being replaced.
    const bool record = entry.path().extension() == ".json";
    const bool blob = name.size() == 64 && name.find('.') == std::string::npos;
    if (entry.is_regular_file() && (record || blob))
      total += entry.file_size();
  }
  return total;
}

uint64_t state_bytes(const fs::path& state) {
  return bytes_under(state / "jobs") + bytes_under(state / "blobs");
}

json::object state_stats(const fs::path& socket) {
  return HttpClient(socket).get("/stats").json_body().at("state").as_object();
}

uint64_t number(const json::object& o, const char* key) {
  return o.at(key).to_number<uint64_t>();
}

std::string submit_sync(const fs::path& socket, const json::object& request) {
  const auto r = HttpClient(socket).post("/evaluate", request);
  EXPECT_EQ(r.status, 200u) << r.body();
  return std::string(r.json_body().at("job_id").as_string());
}

TEST(DaemonState, IdenticalSubmissionsGrowTheStateByOneCopyOfTheSource) {
  DaemonDirs dirs;
  DaemonProcess daemon(dirs.state(), dirs.socket());
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
  const std::string source = noisy_source(128 * 1024, 11);
  const json::object request = with_source(fault_evaluate({}), source);
  std::vector<std::string> ids{submit_sync(dirs.socket(), request)};
  const uint64_t after_first = state_bytes(dirs.state());
  constexpr int kJobs = 10;
  for (int i = 1; i < kJobs; ++i)
    ids.push_back(submit_sync(dirs.socket(), request));
  const uint64_t after_all = state_bytes(dirs.state());
  std::cout << "[ figures  ] " << kJobs << " identical submissions of a " << source.size()
            << "-byte source: " << after_all << " bytes of records and blobs (first job "
            << after_first << ")\n";
  EXPECT_LT(after_all - after_first, source.size());

  const json::object state = state_stats(dirs.socket());
  EXPECT_EQ(number(state, "bytes"), after_all) << json::serialize(state);
  EXPECT_EQ(number(state, "records"), static_cast<uint64_t>(kJobs));
  EXPECT_EQ(number(state, "blobs"), 1u);
  EXPECT_EQ(number(state, "bytes"), number(state, "record_bytes") + number(state, "blob_bytes"));
  EXPECT_EQ(number(state, "max_bytes"), 2ull << 30);
  EXPECT_EQ(number(state, "expired_by_cap_total"), 0u);
  const std::string metrics = HttpClient(dirs.socket()).get("/metrics").body();
  EXPECT_NE(metrics.find("keval_state_bytes{kind=\"blobs\"} " +
                         std::to_string(number(state, "blob_bytes"))),
            std::string::npos)
      << metrics;
  // Every one of them still served.
  for (const auto& id : ids)
    EXPECT_EQ(HttpClient(dirs.socket()).get("/jobs/" + id).status, 200u) << id;
}

TEST(DaemonState, TamperedBlobIsRefusedAndNotServed) {
  DaemonDirs dirs;
  DaemonProcess daemon(dirs.state(), dirs.socket());
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
  const std::string id =
      submit_sync(dirs.socket(), with_source(fault_evaluate({}), noisy_source(8192, 12)));
  fs::path blob;
  for (const auto& entry : fs::directory_iterator(dirs.state() / "blobs"))
    if (entry.path().filename().string().size() == 64)
      blob = entry.path();
  ASSERT_FALSE(blob.empty());
  std::ofstream(blob, std::ios::binary | std::ios::trunc) << "x\x9c tampered";

  const auto r = HttpClient(dirs.socket()).get("/jobs/" + id);
  EXPECT_EQ(r.status, 500u) << r.body();
  EXPECT_EQ(r.json_body().at("error").at("class"), "record_refused") << r.body();
  EXPECT_FALSE(r.json_body().contains("result")) << r.body();
  EXPECT_NE(r.body().find("blob"), std::string::npos) << r.body();
  EXPECT_TRUE(fs::exists(blob.string() + ".refused"));
  EXPECT_EQ(HttpClient(dirs.socket())
                .get("/stats")
                .json_body()
                .at("jobs")
                .at("records_refused_total")
                .to_number<uint64_t>(),
            1u);
}

TEST(DaemonState, CapForgetsOldestFinishedJobsFirstAndNeverARunningOne) {
  DaemonDirs dirs;
  // About three jobs' records and (barely compressible) 48 KiB sources.
  constexpr uint64_t kCap = 200 * 1000;
  DaemonProcess daemon(dirs.state(), dirs.socket(), {"--state-max-bytes", std::to_string(kCap)});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
  const auto running =
      HttpClient(dirs.socket())
          .post("/evaluate", with_async(with_source(hang(), noisy_source(48 * 1024, 20))));
  ASSERT_EQ(running.status, 202u) << running.body();
  const std::string running_id(running.json_body().at("job_id").as_string());
  ASSERT_TRUE(wait_status(dirs.socket(), running_id, "validating")) << daemon.log();

  constexpr int kJobs = 8;
  std::vector<std::string> finished;
  for (int i = 0; i < kJobs; ++i)
    finished.push_back(submit_sync(
        dirs.socket(), with_source(fault_evaluate({}), noisy_source(48 * 1024, 21 + i))));

  // The served ones are the newest: once one is served, every later one is.
  std::vector<bool> served;
  for (const auto& id : finished)
    served.push_back(HttpClient(dirs.socket()).get("/jobs/" + id).status == 200u);
  EXPECT_FALSE(served.front());
  EXPECT_TRUE(served.back());
  EXPECT_TRUE(std::is_sorted(served.begin(), served.end())) << "a newer job went first";
  const auto still = static_cast<uint64_t>(std::count(served.begin(), served.end(), true));
  const auto view = HttpClient(dirs.socket()).get("/jobs/" + running_id);
  EXPECT_EQ(view.status, 200u) << view.body();
  EXPECT_EQ(view.json_body().at("status"), "validating");

  json::object state = state_stats(dirs.socket());
  EXPECT_LE(number(state, "bytes"), kCap) << json::serialize(state);
  EXPECT_EQ(number(state, "bytes"), state_bytes(dirs.state()));
  EXPECT_EQ(number(state, "max_bytes"), kCap);
  EXPECT_EQ(number(state, "records"), still + 1);
  EXPECT_EQ(number(state, "expired_by_cap_total"), kJobs - still);
  EXPECT_NE(HttpClient(dirs.socket())
                .get("/metrics")
                .body()
                .find("keval_state_expired_by_cap_total " + std::to_string(kJobs - still)),
            std::string::npos);
  // Gone with their blobs: only the served jobs' sources remain.
  EXPECT_EQ(number(state, "blobs"), still + 1);
}

TEST(DaemonState, CapSmallerThanARunningJobsRecordForgetsOnlyFinishedOnes) {
  DaemonDirs dirs;
  DaemonProcess daemon(dirs.state(), dirs.socket(), {"--state-max-bytes", "1"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
  const auto running = HttpClient(dirs.socket()).post("/evaluate", with_async(hang()));
  ASSERT_EQ(running.status, 202u) << running.body();
  const std::string running_id(running.json_body().at("job_id").as_string());
  ASSERT_TRUE(wait_status(dirs.socket(), running_id, "validating")) << daemon.log();
  constexpr int kJobs = 3;
  for (int i = 0; i < kJobs; ++i) {
    const std::string id = submit_sync(dirs.socket(), fault_evaluate({}));
    EXPECT_EQ(HttpClient(dirs.socket()).get("/jobs/" + id).status, 404u);
  }
  EXPECT_EQ(HttpClient(dirs.socket()).get("/jobs/" + running_id).status, 200u);
  const json::object state = state_stats(dirs.socket());
  EXPECT_EQ(number(state, "records"), 1u) << json::serialize(state);
  EXPECT_EQ(number(state, "expired_by_cap_total"), static_cast<uint64_t>(kJobs));
  EXPECT_GT(number(state, "bytes"), number(state, "max_bytes"));
  EXPECT_NE(daemon.log().find("still over its cap"), std::string::npos) << daemon.log();
}

} // namespace
} // namespace keval::test::daemon
