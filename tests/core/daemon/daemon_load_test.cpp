// The daemon under sustained load: 500 jobs through kept-alive connections, and its memory and
// descriptors measured at job 100 and job 500.
#include "common/address_sanitizer.hpp"
#include "support/daemon_harness.hpp"

#include <atomic>
#include <deque>
#include <mutex>

#include <gtest/gtest.h>

namespace keval::test::daemon {
namespace {

struct Usage {
  size_t open_fds = 0;
  size_t rss_kib = 0;
};

Usage usage_of(pid_t pid) {
  Usage usage;
  const fs::path proc = fs::path("/proc") / std::to_string(pid);
  for ([[maybe_unused]] const auto& fd : fs::directory_iterator(proc / "fd"))
    ++usage.open_fds;
  std::ifstream status(proc / "status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0)
      usage.rss_kib = std::stoul(line.substr(6));
  return usage;
}

// A mix of what clients send: passing kernels, a compare, a compile error, a kernel that throws.
// Each carries 32 KiB of source, so a daemon that kept requests would grow visibly.
json::object job_number(size_t n) {
  json::object request;
  switch (n % 4) {
  case 0:
    request = fault_evaluate({});
    break;
  case 1:
    request = fault_compare({}, {});
    break;
  case 2:
    request = fault_evaluate(json::object{{"fault", "compile_error"}});
    break;
  default:
    request = fault_evaluate(json::object{{"fault", "throw_in_launch"}});
  }
  const std::string source = "// " + std::string(32 * 1024, 'k');
  for (const char* side : {"kernel", "ref_kernel", "custom_kernel"})
    if (request.contains(side))
      request[side].as_object()["source_code"] = source;
  return request;
}

// Sends jobs [first, last) over `clients` concurrently. Empty when every one answered 200, else
// the count of those that did not and the first of them.
std::string run_jobs(std::deque<HttpClient>& clients, size_t first, size_t last) {
  std::atomic<size_t> next{first};
  std::mutex mutex;
  size_t failures = 0;
  std::string first_failure;
  std::vector<std::thread> threads;
  for (auto& client : clients)
    threads.emplace_back([&] {
      for (size_t n = next++; n < last; n = next++) {
        const auto request = job_number(n);
        std::string failure;
        try {
          const auto r =
              client.post(request.contains("ref_kernel") ? "/compare" : "/evaluate", request);
          if (r.status != 200)
            failure =
                "job " + std::to_string(n) + ": HTTP " + std::to_string(r.status) + " " + r.body();
        } catch (const std::exception& e) {
          failure = "job " + std::to_string(n) + ": " + e.what();
        }
        if (!failure.empty()) {
          std::lock_guard lock(mutex);
          if (failures++ == 0)
            first_failure = failure;
        }
      }
    });
  for (auto& thread : threads)
    thread.join();
  return failures == 0 ? std::string()
                       : std::to_string(failures) + " job(s) failed; the first: " + first_failure;
}

TEST(DaemonLoad, MemoryAndDescriptorsStayFlatOver500Jobs) {
  std::vector<std::string> env;
  if (kAddressSanitizer) {
    // ASan keeps freed memory in a quarantine (256 MiB by default): cap it, or the measurement
    // shows the quarantine filling rather than the daemon's own growth.
    const char* asan = std::getenv("ASAN_OPTIONS");
    env.push_back(std::string("ASAN_OPTIONS=") + (asan ? std::string(asan) + ":" : "") +
                  "quarantine_size_mb=4:thread_local_quarantine_size_kb=64");
  }
  DaemonDirs dirs;
  DaemonProcess daemon(dirs.state(), dirs.socket(), {"--max-workers", "4", "--threads", "2"}, env);
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();

  // The same kept-alive connections throughout, so every measurement sees the same sockets.
  std::deque<HttpClient> clients;
  for (int i = 0; i < 6; ++i)
    ASSERT_EQ(clients.emplace_back(dirs.socket()).get("/health").status, 200u); // accepted
  const pid_t pid = daemon.pid();
  // A finished job's descriptors (its worker's socket, pipes, process handle) close just after
  // its answer has gone out: wait (bounded) for the count to come down to `limit`.
  auto settled_fds = [&](size_t limit) {
    size_t seen = 0;
    eventually([&] { return (seen = usage_of(pid).open_fds) <= limit; }, 30s);
    return seen;
  };
  // Jobs 0-3 (one of each kind) first: the daemon learns their prewarm set and keeps workers
  // prestarted for it from then on; those are part of its idle state, not growth.
  ASSERT_EQ(run_jobs(clients, 0, 4), "") << daemon.log_tail();
  // Their descriptors close just after the answers: wait (bounded) until the count holds still.
  size_t idle_fds = usage_of(pid).open_fds, unchanged_reads = 0;
  eventually(
      [&] {
        const size_t now = usage_of(pid).open_fds;
        unchanged_reads = now == idle_fds ? unchanged_reads + 1 : 0;
        idle_fds = now;
        return unchanged_reads >= 10;
      },
      10s);

  ASSERT_EQ(run_jobs(clients, 4, 100), "") << daemon.log_tail();
  const size_t fds_at_100 = settled_fds(idle_fds);
  const size_t rss_at_100 = usage_of(pid).rss_kib;
  ASSERT_EQ(run_jobs(clients, 100, 500), "") << daemon.log_tail();
  const size_t fds_at_500 = settled_fds(fds_at_100);
  const size_t rss_at_500 = usage_of(pid).rss_kib;

  const auto jobs = HttpClient(dirs.socket()).get("/stats").json_body().at("jobs");
  EXPECT_EQ(jobs.at("finished_total"), 500);
  EXPECT_EQ(jobs.at("active"), 0);
  // Flat: no descriptor per job, and no memory per job beyond the small summary a finished job
  // keeps until its TTL (about 1 KiB). Generous for allocator caches and arenas, which settle at
  // their own pace; a daemon that kept each job's request (32 KiB of source) would not fit.
  EXPECT_LE(fds_at_500, fds_at_100) << "descriptors: idle " << idle_fds << ", at job 100 "
                                    << fds_at_100 << ", at job 500 " << fds_at_500;
  EXPECT_LE(rss_at_500, rss_at_100 + 8 * 1024)
      << "RSS at job 100: " << rss_at_100 << " KiB, at job 500: " << rss_at_500 << " KiB";
  RecordProperty("fds_at_100", std::to_string(fds_at_100));
  RecordProperty("fds_at_500", std::to_string(fds_at_500));
  RecordProperty("rss_kib_at_100", std::to_string(rss_at_100));
  RecordProperty("rss_kib_at_500", std::to_string(rss_at_500));
}

} // namespace
} // namespace keval::test::daemon
