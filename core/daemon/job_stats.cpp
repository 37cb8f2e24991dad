#include "daemon/job_stats.hpp"

#include <algorithm>

#include <boost/json/value_to.hpp>

namespace keval::daemon {

namespace json = boost::json;
using End = supervisor::SessionOutcome::End;

namespace {

constexpr auto kThroughputWindow = std::chrono::minutes(1);

bool ok_of(const json::object& o) {
  const auto* ok = o.if_contains("ok");
  return ok != nullptr && ok->is_bool() && ok->as_bool();
}

} // namespace

JobStats::JobStats() : started_(Clock::now()) {}

void JobStats::submitted() {
  ++totals_.submitted;
}

void JobStats::compiled(const json::object& phase) {
  for (const char* side : {"ref", "custom"}) {
    const auto* entry = phase.if_contains(side);
    if (entry == nullptr || !entry->is_object())
      continue;
    const auto& result = entry->as_object();
    ++totals_.compiles;
    if (ok_of(result))
      ++totals_.compile_successes;
    if (const auto* ms = result.if_contains("time_ms"); ms != nullptr && ms->is_number())
      totals_.compile_ms_sum += ms->to_number<double>();
  }
}

void JobStats::validated(const json::object& phase, double ms) {
  ++totals_.validations;
  if (ok_of(phase))
    ++totals_.validations_correct;
  totals_.validation_ms_sum += ms;
}

void JobStats::profiled(const json::object& phase, double ms) {
  ++totals_.profiles;
  totals_.profile_ms_sum += ms;
  if (!ok_of(phase))
    return;
  ++totals_.profile_successes;
  if (const auto* method = phase.if_contains("method"); method != nullptr && method->is_string())
    ++totals_.timing_methods[std::string(method->as_string())];
}

void JobStats::finished(result::Verdict verdict, End end, double latency_ms) {
  ++totals_.finished;
  ++totals_.finished_by_verdict[result::verdict_name(verdict)];
  if (end == End::cancelled)
    ++totals_.cancelled;
  if (end == End::timed_out)
    ++totals_.timed_out;
  totals_.latency_ms_sum += latency_ms;
  const auto now = Clock::now();
  recent_finishes_.push_back(now);
  while (!recent_finishes_.empty() && now - recent_finishes_.front() > kThroughputWindow)
    recent_finishes_.pop_front();
}

std::array<std::optional<double>, kJobStageCount> job_stage_times(double queue_ms,
                                                                  double worker_wait_ms,
                                                                  const json::object& timeline,
                                                                  double after_done_ms) {
  const auto at = [&](const char* step) -> std::optional<double> {
    const json::value* v = timeline.if_contains(step);
    if (v == nullptr || !v->is_number())
      return std::nullopt;
    return v->to_number<double>();
  };
  const auto between = [](std::optional<double> from, std::optional<double> to) {
    return from && to && *to >= *from ? std::optional<double>(*to - *from) : std::nullopt;
  };
  std::array<std::optional<double>, kJobStageCount> out{};
  const auto runners = at("runners_started");
  const auto probed = at("cuda_probed");
  const auto known = [](double ms) { return ms >= 0 ? std::optional<double>(ms) : std::nullopt; };
  out[0] = known(queue_ms);
  out[1] = known(worker_wait_ms);
  out[2] = runners;
  out[3] = between(runners, probed);
  out[4] = between(probed ? probed : runners, at("compiled"));
  out[5] = between(at("compiled"), at("granted"));
  out[6] = between(at("granted"), at("engine_open"));
  out[7] = between(at("engine_open"), at("bound"));
  out[8] = between(at("bound"), at("validated"));
  // Its timing starts once the GPU is quiet (the job handing it over gone) and its timing turn
  // is held (no prestarted worker warming the GPU up), whichever came last.
  auto quiet = at("timing_turn");
  if (!quiet)
    quiet = at("quiet");
  out[9] = quiet            ? between(at("validated"), quiet)
           : at("profiled") ? std::optional(0.0)
                            : std::nullopt;
  out[10] = between(quiet ? quiet : at("validated"), at("profiled"));
  out[11] = between(at("stopping"), at("ended"));
  // The worker's exit, measured by the host: a prestarted worker's wall time would count the
  // time it waited for its job.
  out[12] = after_done_ms;
  return out;
}

void JobStats::time_spent(double queue_ms, double worker_wait_ms, const json::object& timeline,
                          double after_done_ms) {
  if (timeline.empty())
    return;
  ++totals_.timed_jobs;
  const auto times = job_stage_times(queue_ms, worker_wait_ms, timeline, after_done_ms);
  for (size_t k = 0; k < kJobStageCount; ++k)
    if (times[k]) {
      ++totals_.stages[k].jobs;
      totals_.stages[k].ms_sum += *times[k];
    }
}

void JobStats::prewarm_spent(const supervisor::SessionOutcome& outcome) {
  if (!outcome.prewarm_seconds)
    return;
  ++totals_.prewarm.jobs;
  const std::optional<double> parts[] = {outcome.prewarm_seconds, outcome.device_turn_wait_seconds,
                                         outcome.device_turn_wait_taken_seconds,
                                         outcome.device_open_seconds};
  static_assert(std::size(parts) == kPrewarmPartCount);
  for (size_t k = 0; k < kPrewarmPartCount; ++k)
    totals_.prewarm.s_sum[k] += parts[k].value_or(0);
}

void JobStats::interrupted() {
  ++totals_.interrupted;
}

void JobStats::record_refused() {
  ++totals_.records_refused;
}

void JobStats::expired_by_cap(uint64_t jobs) {
  totals_.expired_by_cap += jobs;
}

JobCounters JobStats::counters() const {
  const auto now = Clock::now();
  JobCounters out = totals_;
  out.uptime_s = std::chrono::duration<double>(now - started_).count();
  out.finished_last_minute = static_cast<uint64_t>(
      std::count_if(recent_finishes_.begin(), recent_finishes_.end(),
                    [&](Clock::time_point t) { return now - t <= kThroughputWindow; }));
  return out;
}

} // namespace keval::daemon
