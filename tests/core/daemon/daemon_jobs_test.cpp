// The job manager through the API: concurrency without loss or duplication, cancellation,
// timeouts that do not hold up other jobs, expiry.
#include "support/daemon_harness.hpp"

#include <algorithm>
#include <dirent.h>
#include <future>
#include <set>

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

namespace keval::test::daemon {
namespace {

// The processes whose parent is `pid` (scans /proc/*/stat).
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> children;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line))
      continue;
    // pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
    std::istringstream rest(line.substr(line.rfind(')') + 1));
    std::string state;
    pid_t parent = 0;
    rest >> state >> parent;
    if (parent == pid)
      children.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return children;
}

json::object stats(const fs::path& socket) {
  return HttpClient(socket).get("/stats").json_body();
}

class DaemonJobs : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_TRUE(daemon_.wait_ready()) << daemon_.log(); }
  fs::path socket() const { return dirs_.socket(); }
  std::string submit_async(const json::object& request) {
    const auto r = HttpClient(socket()).post("/evaluate", with_async(request));
    if (r.status != 202)
      throw std::runtime_error("submission refused: " + r.body());
    return std::string(r.json_body().at("job_id").as_string());
  }

  DaemonDirs dirs_;
  // The pool stays at its default two workers: on a machine of many cores it would grow with
  // the jobs' demand, and the processes counted below with it.
  DaemonProcess daemon_{
      dirs_.state(), dirs_.socket(), {"--max-workers", "8", "--warm-workers-max", "2"}};
};

TEST_F(DaemonJobs, FiftyConcurrentJobsAllCompleteNoneLostOrDuplicated) {
  constexpr size_t kJobs = 50;
  std::vector<std::future<HttpResult>> answers;
  for (size_t i = 0; i < kJobs; ++i)
    answers.push_back(std::async(std::launch::async, [this, i] {
      const bool compare = i % 2 == 1;
      const auto request =
          compare ? fault_compare({}, {}) : fault_evaluate(json::object{{"scale", int(i)}});
      return HttpClient(socket()).post(compare ? "/compare" : "/evaluate", request);
    }));
  std::set<std::string> ids;
  for (auto& answer : answers) {
    ASSERT_EQ(answer.wait_for(600s), std::future_status::ready);
    const HttpResult r = answer.get();
    ASSERT_EQ(r.status, 200u) << r.body();
    EXPECT_TRUE(r.json_body().at("kernel_exec_result").at("correctness").as_bool()) << r.body();
    ids.insert(std::string(r.json_body().at("job_id").as_string()));
  }
  EXPECT_EQ(ids.size(), kJobs); // fifty different jobs answered fifty requests

  const auto s = stats(socket());
  const auto& jobs = s.at("jobs").as_object();
  EXPECT_EQ(jobs.at("submitted_total"), kJobs);
  EXPECT_EQ(jobs.at("finished_total"), kJobs);
  EXPECT_EQ(jobs.at("by_status").at("completed"), kJobs);
  EXPECT_EQ(jobs.at("active"), 0);
  EXPECT_EQ(jobs.at("queued"), 0);
  EXPECT_EQ(s.at("compilation").at("total"), kJobs / 2 * 3); // compares compile two kernels
  EXPECT_EQ(s.at("compilation").at("success_rate"), 1.0);
  // Where their time went: every job's worker sent its timeline; CPU jobs reach every stage but
  // cuda_init and device_open (no context to open on the CPU engine is still a step).
  const auto& breakdown = s.at("time_breakdown").as_object();
  EXPECT_EQ(breakdown.at("jobs"), kJobs);
  for (const auto& stage : breakdown.at("stages").as_array()) {
    const std::string name(stage.at("stage").as_string());
    if (name == "cuda_init")
      EXPECT_EQ(stage.at("jobs"), 0) << name;
    else
      EXPECT_EQ(stage.at("jobs"), kJobs) << name;
  }
  for (const auto& id : ids)
    EXPECT_EQ(HttpClient(socket()).get("/jobs/" + id).json_body().at("status"), "completed");
  size_t records = 0;
  for (const auto& entry : fs::directory_iterator(dirs_.state() / "jobs"))
    records += entry.path().extension() == ".json" ? 1 : 0;
  EXPECT_EQ(records, kJobs);
}

TEST_F(DaemonJobs, CancellingARunningJobKillsItsWorker) {
  const std::string id = submit_async(hang());
  ASSERT_TRUE(wait_status(socket(), id, "validating"));
  // The hung worker and the prestarted ones (--warm-workers, default 2) waiting for jobs.
  const std::vector<pid_t> before = children_of(daemon_.pid());
  EXPECT_EQ(before.size(), 3u);

  const auto r = HttpClient(socket()).request("DELETE", "/jobs/" + id);
  ASSERT_EQ(r.status, 200u) << r.body();
  const auto view = r.json_body();
  EXPECT_EQ(view.at("status"), "failed");
  EXPECT_EQ(view.at("http_status"), 500);
  EXPECT_EQ(view.at("result").at("error").at("message"), "job cancelled by the client");
  EXPECT_TRUE(view.at("compilation_result").at("ok").as_bool()); // what it finished is kept
  const std::vector<pid_t> after = children_of(daemon_.pid());   // the hung worker is gone
  EXPECT_EQ(after.size(), before.size() - 1);
  for (pid_t pid : after)
    EXPECT_NE(std::find(before.begin(), before.end(), pid), before.end()) << pid;

  EXPECT_EQ(HttpClient(socket()).get("/jobs/" + id).json_body().at("status"), "failed");
  EXPECT_EQ(stats(socket()).at("jobs").at("cancelled_total"), 1);
}

TEST_F(DaemonJobs, AHungJobTimesOutWith500WhileOtherJobsProceed) {
  const std::string stuck = submit_async(hang());
  ASSERT_TRUE(wait_status(socket(), stuck, "validating"));
  for (int i = 0; i < 5; ++i) {
    const auto r = HttpClient(socket()).post("/evaluate", fault_evaluate({}));
    EXPECT_EQ(r.status, 200u) << r.body();
  }
  EXPECT_EQ(HttpClient(socket()).get("/jobs/" + stuck).json_body().at("status"), "validating");

  // Past its own timeout a hung job is keval's failure (500), with the phases it completed.
  const auto timed_out = HttpClient(socket()).post("/evaluate", hang("hang_in_launch", 1.0));
  ASSERT_EQ(timed_out.status, 500u) << timed_out.body();
  const auto body = timed_out.json_body();
  EXPECT_EQ(body.at("status"), "failed");
  EXPECT_EQ(body.at("error").at("class"), "infrastructure");
  EXPECT_NE(body.at("error").at("message").as_string().find("exceeded its timeout"),
            std::string::npos)
      << body;
  EXPECT_TRUE(body.at("kernel_exec_result").at("compiled").as_bool());
  EXPECT_TRUE(body.at("kernel_exec_result").at("metadata").as_object().contains("compile"));

  EXPECT_EQ(HttpClient(socket()).request("DELETE", "/jobs/" + stuck).status, 200u);
  const auto s = stats(socket());
  EXPECT_EQ(s.at("jobs").at("timed_out_total"), 1);
  EXPECT_EQ(s.at("jobs").at("finished_by_verdict").at("success"), 5);
}

// The fault plugin's compile info: whether its prewarm ran in this worker, and at which nice.
const json::object& compile_info(const json::value& body) {
  return body.at("kernel_exec_result")
      .at("metadata")
      .at("compile")
      .at("custom")
      .at("info")
      .as_object();
}

// Whether the job's kernel was compiled in a worker whose plugins had run their prewarm.
bool compiled_in_prewarmed_worker(const HttpResult& r) {
  return compile_info(r.json_body()).at("prewarmed").as_bool();
}

TEST(DaemonWarmWorkers, JobsRunInPrestartedWorkersThatRanTheirPluginsPrewarm) {
  DaemonDirs dirs;
  DaemonProcess daemon(dirs.state(), dirs.socket(),
                       {"--warm-workers", "1", "--warm-workers-total", "5"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
  // The first job of a prewarm set starts its own worker (the daemon learns the set from it);
  // from then on one worker prestarted for that set waits, each job takes it and the pool starts
  // the next, so every later job lands in a prewarmed worker, each in its own process.
  std::set<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    const auto r = HttpClient(dirs.socket()).post("/evaluate", fault_evaluate({}));
    ASSERT_EQ(r.status, 200u) << r.body();
    const json::value body = r.json_body();
    EXPECT_TRUE(body.at("kernel_exec_result").at("correctness").as_bool()) << r.body();
    const json::object& info = compile_info(body);
    EXPECT_EQ(info.at("prewarmed").as_bool(), i > 0) << "job " << i << ": " << r.body();
    // A prewarm is no job's GPU time: it runs in the background from the runner's start
    // (worker/isolation/cpu_priority.hpp), where the job's account says runners were sent there.
    if (i > 0) {
      const auto& priority = body.at("kernel_exec_result")
                                 .at("metadata")
                                 .at("profiling")
                                 .at("sampling")
                                 .at("cpu_priority")
                                 .as_string();
      const bool background = priority.find("waited at nice 10") != json::string::npos;
      EXPECT_EQ(info.at("prewarm_nice"), background ? 10 : 0) << r.body();
    }
    // Every job says how long it waited for its worker; a prestarted one also how long its
    // prewarm took.
    const auto& worker = body.at("kernel_exec_result").at("metadata").at("worker");
    EXPECT_GE(worker.at("ready_wait_ms").to_number<double>(), 0) << r.body();
    EXPECT_EQ(worker.as_object().contains("prewarm"), i > 0) << r.body();
    if (i > 0) {
      EXPECT_GE(worker.at("prewarm").at("total_s").to_number<double>(), 0) << r.body();
    }
    ids.insert(std::string(body.at("job_id").as_string()));
  }
  EXPECT_EQ(ids.size(), 4u);
  const json::value all = stats(dirs.socket());
  // /stats splits the three prestarted workers' prewarms (a CPU set opens no device ahead).
  const auto& prewarm = all.at("time_breakdown").at("prewarm");
  EXPECT_EQ(prewarm.at("jobs"), 3) << json::serialize(prewarm);
  EXPECT_GE(prewarm.at("mean_s").at("prewarm").to_number<double>(), 0) << json::serialize(prewarm);
  EXPECT_EQ(prewarm.at("mean_s").at("device_open").to_number<double>(), 0)
      << json::serialize(prewarm);
  const auto warm = all.at("warm_workers").as_object();
  EXPECT_EQ(warm.at("per_set"), 1);
  EXPECT_EQ(warm.at("max_total"), 5); // --warm-workers-total: the sets in use share it
  EXPECT_EQ(warm.at("sets"), 1);
  EXPECT_EQ(warm.at("taken_total"), 3);
  EXPECT_EQ(warm.at("missed_total"), 1);
  // At least the one per set, more where the machine's cores let the pool follow the demand.
  EXPECT_GE(warm.at("ready").to_number<int64_t>(), 1);
  EXPECT_LE(warm.at("prewarmed").to_number<int64_t>(), warm.at("ready").to_number<int64_t>());
  EXPECT_EQ(warm.at("died_idle_total"), 0);
  EXPECT_FALSE(warm.at("disabled").as_bool());
  // CPU jobs read no GPU's memory, so nothing of it held the pool back (supervisor/gpu_memory).
  EXPECT_TRUE(warm.at("gpu_memory").as_array().empty()) << json::serialize(warm);
  EXPECT_EQ(warm.at("held_back_by_gpu_memory_total"), 0);
  // Nor a queue for GPUs there are none of (gpus_backlogged).
  EXPECT_EQ(warm.at("held_back_by_gpu_queue_total"), 0);
}

TEST(DaemonWarmWorkers, ZeroMeansEveryJobStartsItsOwnWorker) {
  DaemonDirs dirs;
  DaemonProcess daemon(dirs.state(), dirs.socket(), {"--warm-workers", "0"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
  const auto r = HttpClient(dirs.socket()).post("/evaluate", fault_evaluate({}));
  ASSERT_EQ(r.status, 200u) << r.body();
  EXPECT_FALSE(compiled_in_prewarmed_worker(r)) << r.body();
  EXPECT_EQ(stats(dirs.socket()).at("warm_workers").at("taken_total"), 0);
}

TEST(DaemonJobsTtl, FinishedJobsExpireAfterTheirTtl) {
  DaemonDirs dirs;
  DaemonProcess daemon(dirs.state(), dirs.socket(), {"--job-ttl", "1"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
  const auto r = HttpClient(dirs.socket()).post("/evaluate", fault_evaluate({}));
  ASSERT_EQ(r.status, 200u) << r.body();
  const std::string id(r.json_body().at("job_id").as_string());
  EXPECT_TRUE(
      eventually([&] { return HttpClient(dirs.socket()).get("/jobs/" + id).status == 404; }));
  EXPECT_FALSE(fs::exists(dirs.state() / "jobs" / (id + ".json")));
}

} // namespace
} // namespace keval::test::daemon
