#include "daemon/stats_report.hpp"

#include <spdlog/fmt/fmt.h>

namespace keval::daemon {

namespace json = boost::json;

namespace {

// A ratio, or null when nothing was counted yet (0 would claim a measured rate).
json::value ratio(double part, double whole) {
  return whole > 0 ? json::value(part / whole) : json::value(nullptr);
}

json::object counts(const std::map<std::string, uint64_t>& m) {
  json::object o;
  for (const auto& [key, n] : m)
    o[key] = n;
  return o;
}

} // namespace

json::object stats_json(const StatsSnapshot& s) {
  const JobCounters& c = s.counters;
  json::object out;
  out["uptime_s"] = c.uptime_s;

  json::object jobs;
  jobs["by_status"] = counts(s.jobs_by_status);
  jobs["submitted_total"] = c.submitted;
  jobs["finished_total"] = c.finished;
  jobs["finished_by_verdict"] = counts(c.finished_by_verdict);
  jobs["cancelled_total"] = c.cancelled;
  jobs["timed_out_total"] = c.timed_out;
  jobs["interrupted_total"] = c.interrupted;
  jobs["records_refused_total"] = c.records_refused;
  jobs["queued"] = s.queued;
  jobs["queue_capacity"] = s.queue_capacity;
  jobs["active"] = s.active;
  jobs["max_active"] = s.max_active;
  jobs["waiting_for_device"] = s.waiting_for_device;
  out["jobs"] = std::move(jobs);
  out["warm_workers"] = {{"per_set", s.warm_capacity},
                         {"max_per_set", s.warm_max},
                         {"max_total", s.warm_max_total},
                         {"target", s.warm.target},
                         {"held_back_by_memory_total", s.warm.held_back_by_memory},
                         {"held_back_by_gpu_memory_total", s.warm.held_back_by_gpu_memory},
                         {"held_back_by_gpu_queue_total", s.warm.held_back_by_gpu_queue},
                         {"gpu_memory", s.gpu_memory},
                         {"sets", s.warm.sets},
                         {"ready", s.warm.ready},
                         {"prewarmed", s.warm.prewarmed},
                         {"taken_total", s.warm.taken},
                         {"taken_out_of_order_total", s.warm.taken_out_of_order},
                         {"missed_total", s.warm.missed},
                         {"died_idle_total", s.warm.died_idle},
                         {"disabled", s.warm.disabled}};

  out["compilation"] = {{"total", c.compiles},
                        {"succeeded", c.compile_successes},
                        {"success_rate", ratio(c.compile_successes, c.compiles)},
                        {"mean_time_ms", ratio(c.compile_ms_sum, c.compiles)}};
  out["validation"] = {{"total", c.validations},
                       {"correct", c.validations_correct},
                       {"correctness_rate", ratio(c.validations_correct, c.validations)},
                       {"mean_time_ms", ratio(c.validation_ms_sum, c.validations)}};
  const auto graph = c.timing_methods.find("cuda_graph");
  out["profiling"] = {
      {"total", c.profiles},
      {"succeeded", c.profile_successes},
      {"mean_time_ms", ratio(c.profile_ms_sum, c.profiles)},
      {"graph_capture_rate",
       ratio(graph == c.timing_methods.end() ? 0 : graph->second, c.profile_successes)},
      {"timing_methods", counts(c.timing_methods)}};
  out["throughput"] = {{"active_jobs", s.active},
                       {"finished_last_minute", c.finished_last_minute},
                       {"jobs_per_second_last_minute", c.finished_last_minute / 60.0},
                       {"jobs_per_second_since_start", ratio(c.finished, c.uptime_s)},
                       {"mean_latency_ms", ratio(c.latency_ms_sum, c.finished)}};
  // Where finished jobs' time went (job_stats.hpp kJobStages), in the order a job passes the
  // stages: `mean_ms` over the jobs that reached the stage, `share` of all the stages' time.
  json::array stages;
  double all_ms = 0;
  for (const auto& stage : c.stages)
    all_ms += stage.ms_sum;
  for (size_t k = 0; k < kJobStageCount; ++k)
    stages.push_back(json::object{{"stage", kJobStages[k]},
                                  {"jobs", c.stages[k].jobs},
                                  {"mean_ms", ratio(c.stages[k].ms_sum, c.stages[k].jobs)},
                                  {"total_s", c.stages[k].ms_sum / 1000.0},
                                  {"share", ratio(c.stages[k].ms_sum, all_ms)}});
  // Of worker_wait: where the prestarted workers' prewarms went (job_stats.hpp PrewarmTime).
  json::object prewarm_mean_s;
  for (size_t k = 0; k < kPrewarmPartCount; ++k)
    prewarm_mean_s[kPrewarmParts[k]] = ratio(c.prewarm.s_sum[k], c.prewarm.jobs);
  out["time_breakdown"] = {
      {"jobs", c.timed_jobs},
      {"stages", std::move(stages)},
      {"prewarm", {{"jobs", c.prewarm.jobs}, {"mean_s", std::move(prewarm_mean_s)}}}};

  out["state"] = {{"bytes", s.state.bytes},
                  {"max_bytes", s.state.max_bytes},
                  {"records", s.state.records},
                  {"record_bytes", s.state.record_bytes},
                  {"blobs", s.state.blobs},
                  {"blob_bytes", s.state.blob_bytes},
                  {"expired_by_cap_total", c.expired_by_cap}};

  out["connections"] = {{"open", s.connections.open},
                        {"max", s.connections.max},
                        {"refusing", s.connections.refusing},
                        {"accepted_total", s.connections.accepted_total},
                        {"refused_total", s.connections.refused_total},
                        {"dropped_total", s.connections.dropped_total}};

  json::object http;
  for (const auto& [code, n] : s.http_responses)
    http[std::to_string(code)] = n;
  out["http_responses"] = std::move(http);

  json::array gpus;
  for (const auto& g : s.gpus)
    gpus.push_back({{"index", g.device.index},
                    {"name", g.device.name},
                    {"type", g.device.gpu_type},
                    {"arch", g.device.arch},
                    {"state", g.holders > 0 ? "busy" : "idle"},
                    {"jobs_holding", g.holders},
                    {"jobs_handing_over", g.departing},
                    {"grants_total", g.grants},
                    {"busy_ms", g.busy_ms},
                    {"utilization", ratio(g.busy_ms, c.uptime_s * 1000.0)}});
  out["gpus"] = std::move(gpus);
  return out;
}

namespace {

std::string escape_label(const std::string& value) {
  std::string out;
  for (char ch : value) {
    if (ch == '\\' || ch == '"')
      out += '\\';
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out += ch;
  }
  return out;
}

class Exposition {
public:
  // One metric family: its HELP and TYPE lines, then its samples.
  Exposition& family(const char* name, const char* type, const char* help) {
    name_ = name;
    text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    return *this;
  }
  Exposition& sample(double value, const std::string& labels = {}, const char* suffix = "") {
    text_ +=
        fmt::format("{}{}{} {}\n", name_, suffix, labels.empty() ? "" : "{" + labels + "}", value);
    return *this;
  }
  // A summary without quantiles: _sum (seconds) and _count.
  Exposition& summary(double sum, uint64_t count) {
    sample(sum, {}, "_sum");
    return sample(static_cast<double>(count), {}, "_count");
  }
  std::string take() { return std::move(text_); }

private:
  std::string name_;
  std::string text_;
};

std::string label(const char* key, const std::string& value) {
  return fmt::format("{}=\"{}\"", key, escape_label(value));
}

} // namespace

std::string prometheus_text(const StatsSnapshot& s) {
  const JobCounters& c = s.counters;
  Exposition e;
  e.family("keval_uptime_seconds", "gauge", "Seconds since the daemon started.").sample(c.uptime_s);
  e.family("keval_jobs", "gauge", "Jobs the daemon knows, by status.");
  for (const auto& [status, n] : s.jobs_by_status)
    e.sample(static_cast<double>(n), label("status", status));
  e.family("keval_jobs_submitted_total", "counter", "Jobs accepted.")
      .sample(static_cast<double>(c.submitted));
  e.family("keval_jobs_finished_total", "counter", "Jobs finished, by verdict.");
  for (const auto& [verdict, n] : c.finished_by_verdict)
    e.sample(static_cast<double>(n), label("verdict", verdict));
  e.family("keval_jobs_cancelled_total", "counter", "Jobs cancelled.")
      .sample(static_cast<double>(c.cancelled));
  e.family("keval_jobs_timed_out_total", "counter", "Jobs killed at their timeout.")
      .sample(static_cast<double>(c.timed_out));
  e.family("keval_jobs_interrupted_total", "counter",
           "Jobs found unfinished after a daemon restart.")
      .sample(static_cast<double>(c.interrupted));
  e.family("keval_records_refused_total", "counter",
           "Job records on disk refused: unsigned, modified, or not the one the daemon wrote.")
      .sample(static_cast<double>(c.records_refused));
  e.family("keval_state_bytes", "gauge",
           "Bytes of job records and request blobs in the state directory.")
      .sample(static_cast<double>(s.state.record_bytes), label("kind", "records"))
      .sample(static_cast<double>(s.state.blob_bytes), label("kind", "blobs"));
  e.family("keval_state_max_bytes", "gauge", "The state directory's cap (--state-max-bytes).")
      .sample(static_cast<double>(s.state.max_bytes));
  e.family("keval_state_files", "gauge", "Job records and request blobs in the state directory.")
      .sample(static_cast<double>(s.state.records), label("kind", "records"))
      .sample(static_cast<double>(s.state.blobs), label("kind", "blobs"));
  e.family("keval_state_expired_by_cap_total", "counter",
           "Finished jobs forgotten before their TTL because the state directory was over its cap.")
      .sample(static_cast<double>(c.expired_by_cap));
  e.family("keval_queue_depth", "gauge", "Jobs waiting for a worker.")
      .sample(static_cast<double>(s.queued));
  e.family("keval_queue_capacity", "gauge", "Jobs that may wait before submissions get 503.")
      .sample(static_cast<double>(s.queue_capacity));
  e.family("keval_active_jobs", "gauge", "Jobs with a running worker.")
      .sample(static_cast<double>(s.active));
  e.family("keval_jobs_waiting_for_device", "gauge", "Compiled jobs waiting for a GPU.")
      .sample(static_cast<double>(s.waiting_for_device));
  e.family("keval_compilations_total", "counter", "Kernels compiled, by result.")
      .sample(static_cast<double>(c.compile_successes), label("result", "ok"))
      .sample(static_cast<double>(c.compiles - c.compile_successes), label("result", "error"));
  e.family("keval_compile_seconds", "summary", "Time plugins spent compiling.")
      .summary(c.compile_ms_sum / 1000.0, c.compiles);
  e.family("keval_validations_total", "counter", "Validations, by result.")
      .sample(static_cast<double>(c.validations_correct), label("result", "correct"))
      .sample(static_cast<double>(c.validations - c.validations_correct),
              label("result", "incorrect"));
  e.family("keval_validation_seconds", "summary", "Time from the device grant to validated.")
      .summary(c.validation_ms_sum / 1000.0, c.validations);
  e.family("keval_profiles_total", "counter", "Successful profiles, by timing method.");
  for (const auto& [method, n] : c.timing_methods)
    e.sample(static_cast<double>(n), label("method", method));
  e.family("keval_profiling_seconds", "summary", "Time from validated to profiled.")
      .summary(c.profile_ms_sum / 1000.0, c.profiles);
  e.family("keval_job_latency_seconds", "summary", "Time from submission to result.")
      .summary(c.latency_ms_sum / 1000.0, c.finished);
  e.family("keval_job_stage_seconds_total", "counter",
           "Time finished jobs spent in each stage (queue, start, compile, device_wait, ...).");
  for (size_t k = 0; k < kJobStageCount; ++k)
    e.sample(c.stages[k].ms_sum / 1000.0, label("stage", kJobStages[k]));
  e.family("keval_job_stage_jobs_total", "counter", "Finished jobs that reached each stage.");
  for (size_t k = 0; k < kJobStageCount; ++k)
    e.sample(static_cast<double>(c.stages[k].jobs), label("stage", kJobStages[k]));
  e.family("keval_worker_prewarm_seconds_total", "counter",
           "Prewarm of the prestarted workers that finished jobs took, and its parts (device-open "
           "turn wait, of it after the job took the worker, opens).");
  for (size_t k = 0; k < kPrewarmPartCount; ++k)
    e.sample(c.prewarm.s_sum[k], label("part", kPrewarmParts[k]));
  e.family("keval_worker_prewarm_jobs_total", "counter",
           "Finished jobs that took a prestarted worker.")
      .sample(static_cast<double>(c.prewarm.jobs));
  // The pools of prestarted workers (supervisor/warm_pool.hpp): how many wait, how many jobs
  // found one, and what held a pool back from growing with its demand.
  e.family("keval_warm_workers_ready", "gauge",
           "Prestarted workers started and waiting for a job, over every prewarm set.")
      .sample(static_cast<double>(s.warm.ready));
  e.family("keval_warm_workers_taken_total", "counter", "Prestarted workers handed to jobs.")
      .sample(static_cast<double>(s.warm.taken));
  e.family("keval_warm_workers_missed_total", "counter",
           "Jobs of a prewarming set that found no prestarted worker ready.")
      .sample(static_cast<double>(s.warm.missed));
  e.family("keval_warm_workers_held_back_total", "counter",
           "Refills of a pool that grew it less than its demand asked, by what held it back: the "
           "machine's memory, GPU memory, or jobs queued for the GPUs.")
      .sample(static_cast<double>(s.warm.held_back_by_memory), label("reason", "memory"))
      .sample(static_cast<double>(s.warm.held_back_by_gpu_memory), label("reason", "gpu_memory"))
      .sample(static_cast<double>(s.warm.held_back_by_gpu_queue), label("reason", "gpu_queue"));
  e.family("keval_connections_open", "gauge", "HTTP connections served now.")
      .sample(static_cast<double>(s.connections.open));
  e.family("keval_connections_max", "gauge", "HTTP connections served at most (--max-connections).")
      .sample(static_cast<double>(s.connections.max));
  e.family("keval_connections_refused_total", "counter",
           "Connections over the limit: answered 503, or closed unanswered when too many were.")
      .sample(static_cast<double>(s.connections.refused_total), label("outcome", "answered_503"))
      .sample(static_cast<double>(s.connections.dropped_total), label("outcome", "closed"));
  e.family("keval_http_responses_total", "counter", "HTTP responses, by status code.");
  for (const auto& [code, n] : s.http_responses)
    e.sample(static_cast<double>(n), label("code", std::to_string(code)));
  e.family("keval_gpu_busy_seconds_total", "counter", "Time each GPU was leased to a job.");
  for (const auto& g : s.gpus)
    e.sample(g.busy_ms / 1000.0,
             label("gpu", std::to_string(g.device.index)) + "," + label("type", g.device.gpu_type));
  e.family("keval_gpu_jobs_holding", "gauge", "Jobs holding each GPU now.");
  for (const auto& g : s.gpus)
    e.sample(static_cast<double>(g.holders),
             label("gpu", std::to_string(g.device.index)) + "," + label("type", g.device.gpu_type));
  return e.take();
}

} // namespace keval::daemon
