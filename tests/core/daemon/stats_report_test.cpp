// Rendering the daemon's statistics: rates only where something was counted, Prometheus text
// that scrapers accept.
#include "daemon/job_record.hpp"
#include "daemon/job_stats.hpp"
#include "daemon/stats_report.hpp"

#include <algorithm>

#include <boost/json/parse.hpp>
#include <gtest/gtest.h>

namespace keval::daemon {
namespace {

namespace json = boost::json;
using End = supervisor::SessionOutcome::End;

TEST(StatsReport, RatesAreNullUntilSomethingWasCounted) {
  StatsSnapshot empty;
  const auto j = stats_json(empty);
  EXPECT_TRUE(j.at("compilation").at("success_rate").is_null());
  EXPECT_TRUE(j.at("compilation").at("mean_time_ms").is_null());
  EXPECT_TRUE(j.at("throughput").at("mean_latency_ms").is_null());
}

TEST(StatsReport, AJobsStagesComeFromTheQueueTheWorkersTimelineAndItsExit) {
  const auto timeline = json::parse(R"({"runners_started": 30, "cuda_probed": 250, "compiled": 1250,
                      "granted": 1300, "engine_open": 1400, "bound": 1450, "validated": 1650,
                      "profiled": 2650, "stopping": 2650, "ended": 2850})")
                            .as_object();
  const auto t = job_stage_times(5, 400, timeline, 50);
  const double expected[] = {5, 400, 30, 220, 1000, 50, 100, 50, 200, 0, 1000, 200, 50};
  for (size_t k = 0; k < kJobStageCount; ++k) {
    ASSERT_TRUE(t[k]) << kJobStages[k];
    EXPECT_DOUBLE_EQ(*t[k], expected[k]) << kJobStages[k];
  }
  // Granted the GPU while its last job was still ending: the wait for that job to be gone is
  // quiet_wait, not profiling.
  auto handed = timeline;
  handed["quiet"] = 1900;
  const auto waited = job_stage_times(5, 400, handed, 50);
  EXPECT_DOUBLE_EQ(*waited[9], 250);
  EXPECT_DOUBLE_EQ(*waited[10], 750);
  // And then waited for the GPU's timing turn (a prestarted worker warming it up): that wait is
  // quiet_wait too, with or without a handover before it.
  handed["timing_turn"] = 2000;
  const auto turned = job_stage_times(5, 400, handed, 50);
  EXPECT_DOUBLE_EQ(*turned[9], 350);
  EXPECT_DOUBLE_EQ(*turned[10], 650);
  auto turn_only = timeline;
  turn_only["timing_turn"] = 1700;
  const auto turn_waited = job_stage_times(5, 400, turn_only, 50);
  EXPECT_DOUBLE_EQ(*turn_waited[9], 50);
  EXPECT_DOUBLE_EQ(*turn_waited[10], 950);
  // A CPU job that failed to compile: no CUDA, no device, no validation; compile counts from
  // the runners.
  const auto failed = job_stage_times(
      0, -1, json::parse(R"({"runners_started": 20, "stopping": 300, "ended": 350})").as_object(),
      50);
  EXPECT_DOUBLE_EQ(*failed[0], 0);
  EXPECT_FALSE(failed[1]); // never sent: no wait for its worker is known
  EXPECT_DOUBLE_EQ(*failed[2], 20);
  for (const char* stage :
       {"cuda_init", "compile", "device_wait", "validation", "quiet_wait", "profiling"}) {
    const size_t k = std::find_if(std::begin(kJobStages), std::end(kJobStages),
                                  [&](const char* s) { return std::string(s) == stage; }) -
                     std::begin(kJobStages);
    EXPECT_FALSE(failed[k]) << stage;
  }
  EXPECT_DOUBLE_EQ(*failed[11], 50);
  EXPECT_DOUBLE_EQ(*failed[12], 50);

  JobStats stats;
  stats.time_spent(5, 400, timeline, 50);
  stats.time_spent(0, 0, json::object{}, 0); // no timeline: not counted
  StatsSnapshot snapshot;
  snapshot.counters = stats.counters();
  const auto j = stats_json(snapshot);
  const auto& breakdown = j.at("time_breakdown").as_object();
  EXPECT_EQ(breakdown.at("jobs"), 1);
  const auto& compile = breakdown.at("stages").at(4).as_object();
  EXPECT_EQ(compile.at("stage"), "compile");
  EXPECT_DOUBLE_EQ(compile.at("mean_ms").as_double(), 1000);
  EXPECT_NEAR(compile.at("share").as_double(), 1000.0 / 3305.0, 1e-12);
  const auto& worker_wait = breakdown.at("stages").at(1).as_object();
  EXPECT_EQ(worker_wait.at("stage"), "worker_wait");
  EXPECT_DOUBLE_EQ(worker_wait.at("mean_ms").as_double(), 400);
  EXPECT_NE(
      prometheus_text(snapshot).find("keval_job_stage_seconds_total{stage=\"profiling\"} 1\n"),
      std::string::npos);
}

TEST(StatsReport, APrestartedWorkersPrewarmIsSplitOverTheJobsThatTookOne) {
  JobStats stats;
  supervisor::SessionOutcome waited; // taken while it waited for its device-open turn
  waited.prewarm_seconds = 12;
  waited.device_turn_wait_seconds = 4;
  waited.device_turn_wait_taken_seconds = 3;
  waited.device_open_seconds = 1;
  stats.prewarm_spent(waited);
  supervisor::SessionOutcome cpu_set; // a prestarted worker that opened no device ahead
  cpu_set.prewarm_seconds = 2;
  stats.prewarm_spent(cpu_set);
  stats.prewarm_spent(supervisor::SessionOutcome{}); // a fresh worker: not counted
  StatsSnapshot snapshot;
  snapshot.counters = stats.counters();
  const auto prewarm = stats_json(snapshot).at("time_breakdown").at("prewarm").as_object();
  EXPECT_EQ(prewarm.at("jobs"), 2);
  const auto& mean_s = prewarm.at("mean_s").as_object();
  EXPECT_DOUBLE_EQ(mean_s.at("prewarm").as_double(), 7);
  EXPECT_DOUBLE_EQ(mean_s.at("device_turn_wait").as_double(), 2);
  EXPECT_DOUBLE_EQ(mean_s.at("device_turn_wait_taken").as_double(), 1.5);
  EXPECT_DOUBLE_EQ(mean_s.at("device_open").as_double(), 0.5);
  const std::string metrics = prometheus_text(snapshot);
  EXPECT_NE(metrics.find("keval_worker_prewarm_seconds_total{part=\"device_turn_wait_taken\"} 3\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("keval_worker_prewarm_jobs_total 2\n"), std::string::npos) << metrics;
  // None yet: the means say so.
  EXPECT_TRUE(stats_json(StatsSnapshot{})
                  .at("time_breakdown")
                  .at("prewarm")
                  .at("mean_s")
                  .at("prewarm")
                  .is_null());
}

// The pools of prestarted workers in /metrics: what waits, what was taken and missed, and each
// reason a pool grew less than its demand asked, the same counts /stats warm_workers shows.
TEST(StatsReport, ThePoolsOfPrestartedWorkersAreInTheMetrics) {
  StatsSnapshot snapshot;
  snapshot.warm.ready = 9;
  snapshot.warm.taken = 24;
  snapshot.warm.missed = 1;
  snapshot.warm.held_back_by_memory = 2;
  snapshot.warm.held_back_by_gpu_memory = 3;
  snapshot.warm.held_back_by_gpu_queue = 16;
  const std::string metrics = prometheus_text(snapshot);
  for (const char* line : {"keval_warm_workers_ready 9\n", "keval_warm_workers_taken_total 24\n",
                           "keval_warm_workers_missed_total 1\n",
                           "keval_warm_workers_held_back_total{reason=\"memory\"} 2\n",
                           "keval_warm_workers_held_back_total{reason=\"gpu_memory\"} 3\n",
                           "keval_warm_workers_held_back_total{reason=\"gpu_queue\"} 16\n",
                           "# TYPE keval_warm_workers_held_back_total counter\n"})
    EXPECT_NE(metrics.find(line), std::string::npos) << line << metrics;
  const json::object warm = stats_json(snapshot).at("warm_workers").as_object();
  EXPECT_EQ(warm.at("held_back_by_gpu_queue_total"), 16);
  EXPECT_EQ(warm.at("ready"), 9);
}

TEST(StatsReport, CountsPhasesFromWhatWorkersReport) {
  JobStats stats;
  stats.submitted();
  stats.submitted();
  stats.compiled(json::parse(R"({"ok": false, "ref": {"ok": true, "time_ms": 10},
                                 "custom": {"ok": false, "time_ms": 30}})")
                     .as_object());
  stats.compiled(json::parse(R"({"ok": true, "custom": {"ok": true, "time_ms": 20}})").as_object());
  stats.validated(json::parse(R"({"ok": true})").as_object(), 4);
  stats.profiled(json::parse(R"({"ok": true, "method": "cuda_graph"})").as_object(), 8);
  stats.finished(result::Verdict::kernel_failed, End::completed, 100);
  stats.finished(result::Verdict::infrastructure, End::timed_out, 300);

  StatsSnapshot snapshot;
  snapshot.counters = stats.counters();
  snapshot.jobs_by_status = {{"completed", 1}, {"failed", 1}};
  snapshot.gpus.push_back(GpuState{GpuDevice{0, "NVIDIA H100", "H100", 90, 1}, 1, 0, 3, 1500});
  snapshot.http_responses = {{200, 1}, {500, 1}};
  const auto j = stats_json(snapshot);
  EXPECT_EQ(j.at("jobs").at("submitted_total"), 2);
  EXPECT_EQ(j.at("jobs").at("timed_out_total"), 1);
  EXPECT_EQ(j.at("compilation").at("total"), 3);
  EXPECT_EQ(j.at("compilation").at("succeeded"), 2);
  EXPECT_DOUBLE_EQ(j.at("compilation").at("mean_time_ms").as_double(), 20.0);
  EXPECT_DOUBLE_EQ(j.at("profiling").at("graph_capture_rate").as_double(), 1.0);
  EXPECT_DOUBLE_EQ(j.at("throughput").at("mean_latency_ms").as_double(), 200.0);
  EXPECT_EQ(j.at("throughput").at("finished_last_minute"), 2);
  EXPECT_EQ(j.at("gpus").at(0).at("state"), "busy");
  EXPECT_EQ(j.at("http_responses").at("500"), 1);

  const std::string text = prometheus_text(snapshot);
  for (const char* line :
       {"# TYPE keval_jobs_submitted_total counter\n", "keval_jobs_submitted_total 2\n",
        "keval_jobs_finished_total{verdict=\"infrastructure_failure\"} 1\n",
        "keval_compilations_total{result=\"error\"} 1\n", "keval_compile_seconds_sum 0.06\n",
        "keval_compile_seconds_count 3\n", "keval_profiles_total{method=\"cuda_graph\"} 1\n",
        "keval_gpu_busy_seconds_total{gpu=\"0\",type=\"H100\"} 1.5\n",
        "keval_http_responses_total{code=\"500\"} 1\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
}

TEST(StatsReport, LabelValuesAreEscaped) {
  StatsSnapshot snapshot;
  snapshot.counters.timing_methods["odd\"name\\"] = 1;
  EXPECT_NE(prometheus_text(snapshot).find(R"(keval_profiles_total{method="odd\"name\\"} 1)"),
            std::string::npos);
}

TEST(JobRecord, ViewFollowsSeedJobState) {
  const auto record = json::parse(R"({
      "job_id": "j1", "mode": "evaluate", "status": "completed", "stage": "done",
      "request": {"kernel": {}}, "submitted_at": 1.0, "started_at": 2.0, "finished_at": 3.0,
      "device": {"type": "cuda", "index": 1, "gpu_type": "H200"}, "http_status": 200,
      "phases": {"compiled": {"ok": true}, "validated": {"ok": true}},
      "response": {"job_id": "j1", "status": "success"}})")
                          .as_object();
  const auto view = job_view(record);
  EXPECT_EQ(view.at("status"), "completed");
  EXPECT_TRUE(view.at("compilation_result").at("ok").as_bool());
  EXPECT_TRUE(view.at("profiling_result").is_null());
  EXPECT_EQ(view.at("result").at("status"), "success");
  EXPECT_FALSE(view.contains("request"));
  EXPECT_FALSE(view.at("interrupted").as_bool());
  EXPECT_EQ(record_http_status(record), 200);
  EXPECT_EQ(record_gpu_type(record), "H200");
  EXPECT_EQ(record_response(record).at("status"), "success");
}

} // namespace
} // namespace keval::daemon
