// The daemon's jobs: a bounded queue of submitted jobs, at most `max_running` workers at once
// (compiling concurrently on CPU cores without a device), device leases from the DevicePool for
// validation and profiling, every phase persisted the moment it arrives, results kept for a TTL
// and served again after a restart, and a graceful shutdown.
#pragma once

#include "daemon/device_pool.hpp"
#include "daemon/job_stats.hpp"
#include "protocol/sandbox_policy.hpp"
#include "registry/registry.hpp"
#include "request/model.hpp"

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/json/object.hpp>

namespace keval::daemon {

class DeviceVerifiers;

struct JobManagerConfig {
  std::filesystem::path worker_exe;
  protocol::SandboxPolicy sandbox; // for every worker (supervisor/sandbox_setup.hpp)
  std::filesystem::path state_dir; // records in jobs/, work directories in work/
  size_t max_queued = 256;         // submitted jobs waiting for a worker; beyond: refused
  size_t max_running = 4;          // workers at once
  std::chrono::milliseconds job_ttl = std::chrono::hours(1); // finished jobs, then forgotten
  // Records and blobs in the state directory (store::StoreUsage) at most; past it, finished jobs
  // are forgotten oldest-first before their TTL. Queued and running jobs never are, so a
  // directory holding only those may stay over it (logged).
  uint64_t state_max_bytes = 2ull << 30;
  // Workers kept started ahead of jobs, per set of plugins that prewarm (see WarmPool; 0: every
  // job starts its own worker, as the CLI does).
  size_t warm_workers = 0;
  // At most this many per set when the set's demand asks for more (WarmPool::Sizing::max_size).
  size_t warm_workers_max = 0;
  // Past `warm_workers`, at most this many over the sets in use, shared among them
  // (WarmPool::Sizing::max_total).
  size_t warm_workers_total = std::numeric_limits<size_t>::max();
  // Each GPU's device verifier (device_verifiers.hpp), named in the grants of its jobs; null or
  // disabled: every job's trusted worker opens a context of its own. Outlives the manager.
  DeviceVerifiers* verifiers = nullptr;
};

// A submission the daemon cannot take now.
class SubmitRefused : public std::runtime_error {
public:
  enum class Reason { queue_full, shutting_down, duplicate_job_id };
  SubmitRefused(Reason reason, const std::string& message)
      : std::runtime_error(message), reason_(reason) {}
  Reason reason() const noexcept { return reason_; }

private:
  Reason reason_;
};

// Receives a finished job's stored record (see job_record.hpp). Runs on an executor thread.
using JobDone = std::function<void(const boost::json::object& record)>;

class JobManager {
public:
  // `registry` and `devices` must outlive the manager; so must the executor's io_context, which
  // must be run by one thread: workers are spawned (forked) on it.
  JobManager(boost::asio::any_io_executor executor, const registry::Registry& registry,
             DevicePool& devices, JobManagerConfig config);
  ~JobManager();
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Loads the records an earlier daemon left: finished jobs are served again until their TTL;
  // unfinished ones failed with the restart (status "failed", "interrupted": true, whatever
  // phases they completed kept). A record that does not verify as this host's (store::JobStore)
  // is refused: logged, counted (records_refused) and moved aside to <id>.json.refused, never
  // served. Then starts expiring finished jobs (by TTL, and oldest-first past the state
  // directory's size cap). Call once, first.
  void recover();

  // Queues a job that passed job::check_against_registry and returns its id. `on_done`, when
  // set, receives the record once the job has finished. Throws SubmitRefused.
  std::string submit(request::EvalRequest request, std::optional<std::string> gpu_type,
                     JobDone on_done);

  // The job as job_view shows it, or nullopt for an unknown (or expired) id. Throws
  // store::RecordRefused when the finished job's record on disk is not the one the daemon wrote.
  std::optional<boost::json::object> view(const std::string& job_id) const;

  enum class CancelResult { not_found, already_finished, cancelling };
  // Cancels a queued job, or kills a running job's worker. `on_done` receives the final record
  // (a 500 "job cancelled" result with the phases that completed) when the result is cancelling.
  CancelResult cancel(const std::string& job_id, JobDone on_done);

  // Jobs by status, queue, workers and the counters (devices and HTTP are the caller's).
  StatsSnapshot stats() const;
  bool shutting_down() const;

  // Stops taking jobs; queued ones fail at once, running ones have `grace` to finish and are
  // cancelled after it. `on_idle` runs once no job is running.
  void shutdown(std::chrono::milliseconds grace, std::function<void()> on_idle);
  // Cancels every running job now (a second signal during shutdown).
  void cancel_running();

private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace keval::daemon
