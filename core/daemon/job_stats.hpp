// What GET /stats and GET /metrics report (the V2 contract's "Metrics Collection": compilation
// success rate and time, profiling time and graph-capture rate, correctness rate, throughput,
// latency, active jobs, GPU utilisation), and the counters that accumulate it.
#pragma once

#include "daemon/device_pool.hpp"
#include "result/response.hpp"
#include "supervisor/warm_pool.hpp"
#include "supervisor/worker_session.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

namespace keval::daemon {

// Where a job's time goes, stage by stage, in the order a job passes them (/stats
// time_breakdown, /metrics keval_job_stage_seconds):
//   queue        submitted, waiting for a worker slot (the daemon's clock)
//   worker_wait  waiting for the worker to be ready for the job: a fresh worker's start, or a
//                prestarted one's prewarm and device open still under way (the daemon's clock,
//                up to the job frame it sent)
//   start        the worker has the job; its runners up (a fresh worker starts its interpreters
//                here; a prestarted one's are up already)
//   cuda_init    the driver probed (jobs that need CUDA)
//   compile      every side compiled, no device held
//   device_wait  waiting for the device grant
//   device_open  the worker's own context on the granted device
//   bind         the runners' contexts and the arguments bound
//   validation   the correctness trials
//   quiet_wait   granted the GPU while its last job was still ending (that job handed it over),
//                waiting for that job to be gone before anything is timed, and for the GPU's
//                timing turn (a prestarted worker warming it up: worker/engine/device_turn.hpp)
//   profiling    the timed samples
//   teardown     every process of the job killed and reaped
//   process      the worker process itself: spawn, the job frame, exit, its last output read
// The worker's steps come from its `done` timeline; a stage whose steps a job did not reach (a
// compile error has no validation) is not counted for it.
inline constexpr const char* kJobStages[] = {
    "queue", "worker_wait", "start",      "cuda_init", "compile",  "device_wait", "device_open",
    "bind",  "validation",  "quiet_wait", "profiling", "teardown", "process"};
inline constexpr size_t kJobStageCount = std::size(kJobStages);

struct StageTime {
  uint64_t jobs = 0;
  double ms_sum = 0;
};

// What a job's worker_wait waited for when it took a prestarted worker still at its prewarm:
// where the worker's prewarm went (its hello's account: SessionOutcome::prewarm_seconds and its
// parts), over the finished jobs that took one (/stats time_breakdown.prewarm, /metrics
// keval_worker_prewarm_seconds_total). The whole prewarm; of it the wait for the machine's
// device-open turn, and of that the part after the job had taken the worker; and the opens. A
// worker that opened no device ahead counts 0 for the last three.
inline constexpr const char* kPrewarmParts[] = {"prewarm", "device_turn_wait",
                                                "device_turn_wait_taken", "device_open"};
inline constexpr size_t kPrewarmPartCount = std::size(kPrewarmParts);

struct PrewarmTime {
  uint64_t jobs = 0;
  std::array<double, kPrewarmPartCount> s_sum{}; // kPrewarmParts order
};

// One job's stages (kJobStages order; nullopt: not reached), from the daemon's queue time, its
// wait for the worker (negative: the job was never sent), the worker's timeline and the time
// from its `done` to its exit (SessionOutcome::after_done_ms).
std::array<std::optional<double>, kJobStageCount>
job_stage_times(double queue_ms, double worker_wait_ms, const boost::json::object& timeline,
                double after_done_ms);

// Counted since start-up.
struct JobCounters {
  double uptime_s = 0;
  uint64_t submitted = 0;
  std::map<std::string, uint64_t> finished_by_verdict; // result::verdict_name
  uint64_t cancelled = 0, timed_out = 0, interrupted = 0;
  // Job records on disk refused (not served): unsigned, modified, or not the one the daemon wrote.
  uint64_t records_refused = 0;
  // Finished jobs forgotten before their TTL because the state directory was over its cap.
  uint64_t expired_by_cap = 0;
  uint64_t compiles = 0, compile_successes = 0; // one per kernel: a compare compiles two
  double compile_ms_sum = 0;
  uint64_t validations = 0, validations_correct = 0;
  double validation_ms_sum = 0; // from the device grant to the validated phase
  uint64_t profiles = 0, profile_successes = 0;
  double profile_ms_sum = 0;                      // from validated to profiled
  std::map<std::string, uint64_t> timing_methods; // "cuda_graph", "cuda_event", ...
  uint64_t finished = 0;
  double latency_ms_sum = 0; // submission to result, over finished jobs
  uint64_t finished_last_minute = 0;
  std::array<StageTime, kJobStageCount> stages{}; // kJobStages order
  uint64_t timed_jobs = 0;                        // jobs whose worker sent its timeline
  PrewarmTime prewarm{};                          // jobs that took a prestarted worker
};

// HTTP connections (keval serve --max-connections).
struct ConnectionStats {
  size_t open = 0, max = 0;                       // served now, and the limit
  size_t refusing = 0;                            // over the limit, being answered 503 now
  uint64_t accepted_total = 0, refused_total = 0; // refused: answered 503 for the limit
  uint64_t dropped_total = 0; // over the limit with every refusing place taken: closed at once
};

// The state directory's records and blobs (store::StoreUsage) and its cap (--state-max-bytes).
struct StateStats {
  uint64_t bytes = 0, max_bytes = 0;
  uint64_t records = 0, record_bytes = 0;
  uint64_t blobs = 0, blob_bytes = 0;
};

struct StatsSnapshot {
  JobCounters counters;
  std::map<std::string, uint64_t> jobs_by_status; // jobs the daemon knows now, every status
  size_t queued = 0, queue_capacity = 0;          // submitted, waiting for a worker
  size_t active = 0, max_active = 0;              // workers running
  size_t waiting_for_device = 0;
  std::map<int, uint64_t> http_responses; // by status code
  std::vector<GpuState> gpus;
  supervisor::WarmPoolStats warm; // prestarted workers (keval serve --warm-workers)
  size_t warm_capacity = 0;       // prestarted workers kept per prewarm set
  size_t warm_max = 0;            // ... at most, when a set's demand asks for more
  size_t warm_max_total = 0;      // ... over the sets in use together
  boost::json::array gpu_memory;  // GpuMemoryReadings::report, where the pool is kept
  ConnectionStats connections;
  StateStats state;
};

// Accumulates JobCounters. Not thread-safe: the job manager calls it under its lock.
class JobStats {
public:
  JobStats();
  void submitted();
  void compiled(const boost::json::object& phase);
  void validated(const boost::json::object& phase, double ms);
  void profiled(const boost::json::object& phase, double ms);
  void finished(result::Verdict verdict, supervisor::SessionOutcome::End end, double latency_ms);
  // A finished job's stages (job_stage_times); nothing when its worker sent no timeline.
  void time_spent(double queue_ms, double worker_wait_ms, const boost::json::object& timeline,
                  double after_done_ms);
  // A finished job's prestarted worker's prewarm (PrewarmTime); nothing for a fresh worker.
  void prewarm_spent(const supervisor::SessionOutcome& outcome);
  void interrupted();
  void record_refused();
  void expired_by_cap(uint64_t jobs);
  JobCounters counters() const;

private:
  using Clock = std::chrono::steady_clock;
  JobCounters totals_;
  Clock::time_point started_;
  std::deque<Clock::time_point> recent_finishes_; // the last minute's
};

} // namespace keval::daemon
