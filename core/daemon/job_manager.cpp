#include "daemon/job_manager.hpp"

#include "common/log.hpp"
#include "daemon/device_verifiers.hpp"
#include "daemon/job_record.hpp"
#include "job/job_runner.hpp"
#include "protocol/job_contract.hpp"
#include "result/response.hpp"
#include "store/job_store.hpp"
#include "supervisor/gpu_memory.hpp"
#include "supervisor/orphan_reaper.hpp"
#include "supervisor/warm_pool.hpp"
#include "supervisor/worker_session.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/value_to.hpp>

namespace keval::daemon {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using End = supervisor::SessionOutcome::End;

namespace {

constexpr const char* kStatuses[] = {"submitted", "compiling", "validating",
                                     "profiling", "completed", "failed"};

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

json::value time_or_null(double unix_seconds) {
  return unix_seconds > 0 ? json::value(unix_seconds) : json::value(nullptr);
}

std::string string_field(const json::object& o, const char* key) {
  const auto* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

double number_field(const json::object& o, const char* key) {
  const auto* v = o.if_contains(key);
  return v != nullptr && v->is_number() ? v->to_number<double>() : 0.0;
}

supervisor::SessionOutcome cancelled(std::string message, protocol::JobStage stage) {
  supervisor::SessionOutcome outcome;
  outcome.end = End::cancelled;
  outcome.message = std::move(message);
  outcome.stage = stage;
  return outcome;
}

bool is_final(const std::string& status) {
  return status == "completed" || status == "failed";
}

} // namespace

class JobManager::Impl {
public:
  Impl(asio::any_io_executor executor, const registry::Registry& registry, DevicePool& devices,
       JobManagerConfig config)
      : executor_(executor), registry_(registry), devices_(devices), config_(std::move(config)),
        store_(config_.state_dir / "jobs"), expiry_timer_(executor), grace_timer_(executor) {
    run_options_.worker_exe = config_.worker_exe;
    run_options_.work_root = config_.state_dir / "work";
    run_options_.sandbox = config_.sandbox;
    std::vector<int> gpus; // each prestarted worker opens one of them ahead
    for (const auto& gpu : devices_.snapshot())
      gpus.push_back(gpu.device.index);
    const size_t gpu_count = gpus.size();
    if (config_.warm_workers > 0)
      warm_ = std::make_unique<supervisor::WarmPool>(
          executor_, config_.worker_exe, config_.sandbox,
          supervisor::WarmPool::Sizing{
              .size = config_.warm_workers,
              .max_size = config_.warm_workers_max,
              .max_total = config_.warm_workers_total,
              .gpus = std::move(gpus),
              .gpu_memory_to_spare = [this] { return gpu_memory_.to_spare(); },
              // A queue as long as the GPUs are many: each has a job waiting behind its holder.
              .gpus_backlogged =
                  [this, gpu_count] { return gpu_count > 0 && devices_.waiting() >= gpu_count; }});
  }

  // --- start-up ------------------------------------------------------------------------------

  void recover() {
    // Work directories of jobs that died with an earlier daemon: nothing will ever read them.
    std::error_code ec;
    fs::remove_all(run_options_.work_root, ec);
    fs::create_directories(run_options_.work_root);
    // Owner-only, except that a job uid (keval as root) must walk through it to its runner's
    // directory: then traversable, still not listable.
    fs::permissions(run_options_.work_root,
                    protocol::switches_user(config_.sandbox)
                        ? fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec
                        : fs::perms::owner_all,
                    fs::perm_options::replace);

    const double now = unix_now();
    std::lock_guard lock(mutex_);
    for (const auto& id : store_.list()) {
      std::optional<store::StoredRecord> stored;
      try {
        stored = store_.load(id);
      } catch (const store::RecordRefused& e) {
        // Not this host's record (planted, or rewritten by something a job left behind): never
        // served. Moved aside, so it is reported once and kept for whoever investigates.
        spdlog::warn("job record {} refused: {}; moved aside to {}.refused",
                     store_.record_path(id).string(), e.what(),
                     store_.record_path(id).filename().string());
        store_.quarantine(id);
        stats_.record_refused();
        continue;
      } catch (const std::exception& e) {
        spdlog::warn("job record {} is unreadable ({}); ignored", store_.record_path(id).string(),
                     e.what());
        continue;
      }
      // The daemon's records carry submitted_at; others (`keval evaluate --keep-record` into the
      // same directory) are not the daemon's to expire or to call interrupted.
      if (!stored || !stored->record.contains("submitted_at"))
        continue;
      json::object& record = stored->record;
      auto job = std::make_shared<Job>();
      job->id = id;
      job->mode = string_field(record, "mode");
      job->status = string_field(record, "status");
      job->submitted_at = number_field(record, "submitted_at");
      job->started_at = number_field(record, "started_at");
      job->finished_at = number_field(record, "finished_at");
      job->record_mac = stored->mac;
      if (!is_final(job->status)) {
        spdlog::warn("job {} was {} when the daemon stopped: reported as interrupted", id,
                     job->status);
        record = interrupted(std::move(record), now);
        job->record_mac = store_.save(id, record);
        job->status = "failed";
        job->finished_at = now;
        stats_.interrupted();
      }
      if (job->finished_at + ttl_seconds() <= now) {
        store_.remove(id);
        continue;
      }
      job->stage = protocol::JobStage::done;
      job->finished = true;
      job->http_status = record_http_status(record);
      jobs_.emplace(id, std::move(job));
    }
    if (!jobs_.empty())
      spdlog::info("recovered {} finished job(s) from {}", jobs_.size(), store_.root().string());
    enforce_state_cap();
    schedule_expiry();
  }

  // --- submitting ----------------------------------------------------------------------------

  std::string submit(request::EvalRequest request, std::optional<std::string> gpu_type,
                     JobDone on_done) {
    auto job = std::make_shared<Job>();
    job->id = request.job_id.value_or(job::new_job_id());
    job->mode = request.mode == request::EvalRequest::Mode::compare ? "compare" : "evaluate";
    job->record.job_id = job->id;
    job->record.mode = job->mode;
    job->record.warnings = request.warnings;
    job->record.strict_flags = request.strict_flags;
    job->record.device_metrics_sides = result::device_metrics_sides(request);
    job->gpu_type = std::move(gpu_type);
    job->submitted_at = unix_now();
    job->submitted_clock = Clock::now();
    if (on_done)
      job->waiters.push_back(std::move(on_done));
    job->request = std::make_shared<const request::EvalRequest>(std::move(request));
    update(job, [&](Job& j) {
      if (shutting_down_)
        throw SubmitRefused(SubmitRefused::Reason::shutting_down, "the daemon is shutting down");
      if (pending_.size() >= config_.max_queued)
        throw SubmitRefused(SubmitRefused::Reason::queue_full,
                            "the job queue is full (" + std::to_string(pending_.size()) +
                                " jobs waiting for a worker); retry later");
      if (jobs_.count(j.id) != 0)
        throw SubmitRefused(SubmitRefused::Reason::duplicate_job_id,
                            "a job with id '" + j.id + "' already exists");
      jobs_.emplace(j.id, job);
      pending_.push_back(job);
      stats_.submitted();
    });
    dispatch();
    return job->id;
  }

  // --- reading -------------------------------------------------------------------------------

  std::optional<json::object> view(const std::string& id) const {
    std::shared_ptr<Job> job;
    {
      std::lock_guard lock(mutex_);
      auto it = jobs_.find(id);
      if (it == jobs_.end())
        return std::nullopt;
      job = it->second;
    }
    RecordSnapshot snapshot;
    std::string written_mac;
    {
      // Not while a change is being written: a client sees no status or phase a crash would lose.
      std::lock_guard save_lock(job->save_mutex);
      std::lock_guard lock(mutex_);
      if (!job->finished)
        snapshot = snapshot_of(job, /*with_request=*/false);
      written_mac = job->record_mac;
    }
    if (snapshot.job)
      return job_view(record_of(snapshot));
    // Finished: only the summary stays in memory, the record is on disk. Served only if it is
    // the very record this daemon wrote last (same MAC): not one planted or rewritten since, nor
    // an older or another job's record of ours copied over it.
    std::optional<store::StoredRecord> stored;
    try {
      stored = store_.load(id);
    } catch (const store::RecordRefused& e) {
      throw refused(id, e.what());
    }
    if (!stored)
      return std::nullopt;
    if (written_mac.empty() || stored->mac != written_mac)
      throw refused(id, "it is not the record this daemon wrote (replaced on disk)");
    return job_view(stored->record);
  }

  StatsSnapshot stats() const {
    StatsSnapshot s;
    std::lock_guard lock(mutex_);
    for (const char* status : kStatuses)
      s.jobs_by_status[status] = 0;
    for (const auto& [id, job] : jobs_) {
      ++s.jobs_by_status[job->status];
      if (job->stage == protocol::JobStage::waiting_for_device)
        ++s.waiting_for_device;
    }
    s.queued = pending_.size();
    s.queue_capacity = config_.max_queued;
    s.active = running_;
    s.max_active = config_.max_running;
    s.counters = stats_.counters();
    if (warm_) {
      s.warm = warm_->stats();
      s.warm_capacity = config_.warm_workers;
      s.warm_max = std::max(config_.warm_workers, config_.warm_workers_max);
      s.warm_max_total = config_.warm_workers_total;
      s.gpu_memory = gpu_memory_.report(supervisor::GpuMemoryReadings::Clock::now());
    }
    const store::StoreUsage usage = store_.usage();
    s.state =
        StateStats{usage.total_bytes(), config_.state_max_bytes, usage.records, usage.record_bytes,
                   usage.blobs,         usage.blob_bytes};
    return s;
  }

  bool shutting_down() const {
    std::lock_guard lock(mutex_);
    return shutting_down_;
  }

  // --- cancelling and stopping ---------------------------------------------------------------

  CancelResult cancel(const std::string& id, JobDone on_done) {
    std::shared_ptr<Job> unstarted;
    {
      std::lock_guard lock(mutex_);
      auto it = jobs_.find(id);
      if (it == jobs_.end())
        return CancelResult::not_found;
      const auto& job = it->second;
      if (job->finished || job->ending)
        return CancelResult::already_finished;
      job->waiters.push_back(std::move(on_done));
      if (!job->started) {
        pending_.erase(std::find(pending_.begin(), pending_.end(), job));
        unstarted = job;
      } else {
        job->cancel_reason = "job cancelled by the client";
        if (job->session)
          job->session->cancel(); // its on_complete finishes the job
      }
    }
    if (unstarted)
      finish(unstarted, cancelled("job cancelled by the client before it started",
                                  protocol::JobStage::queued));
    return CancelResult::cancelling;
  }

  void shutdown(std::chrono::milliseconds grace, std::function<void()> on_idle) {
    {
      std::lock_guard lock(mutex_);
      if (shutting_down_)
        return;
      shutting_down_ = true; // from now on nothing is submitted or started
    }
    // The timers belong to the executor's thread, like everything else on it.
    asio::post(executor_, [this, grace, on_idle = std::move(on_idle)]() mutable {
      drain(grace, std::move(on_idle));
    });
  }

  void cancel_running(const std::string& reason) {
    std::lock_guard lock(mutex_);
    for (auto& [id, job] : jobs_)
      if (job->started && !job->finished && !job->ending) {
        job->cancel_reason = reason;
        if (job->session)
          job->session->cancel();
      }
  }

private:
  struct Job {
    std::string id;
    std::string mode;
    std::string status = "submitted";
    protocol::JobStage stage = protocol::JobStage::queued;
    std::shared_ptr<const request::EvalRequest> request; // until the final record is written
    std::optional<std::string> gpu_type;
    result::JobRecord record; // phases and outcome, until the final record is written
    std::optional<DeviceGrant> device;
    std::optional<DevicePool::Ticket> ticket;
    int compile_arch = 0; // reserved with the device pool until the job asks for a device
    std::shared_ptr<supervisor::WorkerSession> session; // reset when it ends (it refers to us)
    // When set: the outcome's message; the worker is killed once it exists, or never started.
    std::string cancel_reason;
    bool started = false;
    bool ending = false;   // the outcome is known and the final record is being written
    bool finished = false; // the final record is on disk; only this summary stays in memory
    int http_status = 0;
    double submitted_at = 0, started_at = 0, finished_at = 0; // Unix seconds
    Clock::time_point submitted_clock, started_clock, granted_clock, validated_clock;
    std::vector<JobDone> waiters;
    // Held from a change until its record is written, and by readers: the status and phases that
    // GET /jobs shows are on disk already. Taken before mutex_, never while holding it.
    std::mutex save_mutex;
    // The MAC of the record last written (under save_mutex; empty when that write failed): a
    // finished job is served from disk only if the record there still has it.
    std::string record_mac;
  };

  // What a record needs, copied under the lock and turned into JSON outside it.
  struct RecordSnapshot {
    std::shared_ptr<Job> job;
    result::JobRecord record;
    std::shared_ptr<const request::EvalRequest> request;
    std::string status;
    json::object fields;
  };

  // Caller holds mutex_.
  RecordSnapshot snapshot_of(const std::shared_ptr<Job>& job, bool with_request) const {
    RecordSnapshot s;
    s.job = job;
    s.record = job->record;
    if (with_request)
      s.request = job->request;
    s.status = job->status;
    s.fields["stage"] = protocol::stage_name(job->stage);
    s.fields["submitted_at"] = time_or_null(job->submitted_at);
    s.fields["started_at"] = time_or_null(job->started_at);
    s.fields["finished_at"] = time_or_null(job->finished_at);
    s.fields["device"] = job->device ? json::value(job->device->to_json()) : json::value(nullptr);
    if (job->http_status != 0)
      s.fields["http_status"] = job->http_status;
    return s;
  }

  static json::object record_of(const RecordSnapshot& s) {
    static const json::object no_request;
    json::object record =
        job::record_json(s.record, s.request ? s.request->original : no_request, s.status);
    for (const auto& [key, value] : s.fields)
      record[key] = value;
    return record;
  }

  // Applies `change` (under mutex_; it may throw, changing nothing) and writes the job's record
  // before anyone can read the change. Returns the record.
  json::object update(const std::shared_ptr<Job>& job, const std::function<void(Job&)>& change) {
    std::lock_guard save_lock(job->save_mutex);
    RecordSnapshot snapshot;
    {
      std::lock_guard lock(mutex_);
      change(*job);
      snapshot = snapshot_of(job, /*with_request=*/true);
    }
    json::object record = record_of(snapshot);
    try {
      job->record_mac = store_.save(job->id, record);
    } catch (const std::exception& e) {
      job->record_mac.clear(); // what is on disk now is not this record
      spdlog::error("job {}: cannot write its record: {}", job->id, e.what());
    }
    return record;
  }

  // A finished job's record on disk that is not served: logged, counted, and the error a
  // client gets instead.
  store::RecordRefused refused(const std::string& id, const std::string& why) const {
    spdlog::warn("job {}: its record {} is refused, not served: {}", id,
                 store_.record_path(id).string(), why);
    {
      std::lock_guard lock(mutex_);
      stats_.record_refused();
    }
    return store::RecordRefused("the stored record of job '" + id +
                                "' is refused and not served: " + why);
  }

  // A record left unfinished by an earlier daemon, failed as interrupted with what it had.
  json::object interrupted(json::object record, double now) const {
    result::JobRecord r;
    r.job_id = string_field(record, "job_id");
    r.mode = string_field(record, "mode");
    if (const auto* phases = record.if_contains("phases"); phases && phases->is_object())
      for (const auto& [name, result] : phases->as_object())
        if (result.is_object())
          r.phases[name] = result.as_object();
    const std::string was = string_field(record, "status");
    // A restart is keval's failure, never the kernel's: reported like a cancellation (HTTP 500).
    r.outcome = cancelled(
        "the daemon stopped while this job was " + was +
            "; it was interrupted by the restart (completed phases are kept)",
        protocol::parse_stage(string_field(record, "stage")).value_or(protocol::JobStage::queued));
    static const json::object no_request;
    const auto* request = record.if_contains("request");
    json::object out = job::record_json(
        r, request && request->is_object() ? request->as_object() : no_request, "failed");
    for (const char* key : {"submitted_at", "started_at", "device"})
      if (const auto* v = record.if_contains(key))
        out[key] = *v;
    out["stage"] = protocol::stage_name(protocol::JobStage::done);
    out["finished_at"] = now;
    out["http_status"] = result::http_status(result::build_response(r).verdict);
    out["interrupted"] = true;
    return out;
  }

  // --- running -------------------------------------------------------------------------------

  // Shutdown, on the executor: queued jobs fail now, running ones get `grace`.
  void drain(std::chrono::milliseconds grace, std::function<void()> on_idle) {
    std::deque<std::shared_ptr<Job>> unstarted;
    {
      std::lock_guard lock(mutex_);
      expiry_timer_.cancel();
      unstarted.swap(pending_);
      for (auto& job : unstarted)
        job->ending = true; // out of the queue: nobody else may start or cancel it now
    }
    for (auto& job : unstarted)
      finish(job,
             cancelled("the daemon shut down before this job started", protocol::JobStage::queued));
    {
      std::lock_guard lock(mutex_);
      if (running_ > 0) {
        spdlog::info("waiting up to {} s for {} running job(s)", grace.count() / 1000.0, running_);
        on_idle_ = std::move(on_idle);
        grace_timer_.expires_after(grace);
        grace_timer_.async_wait([this](boost::system::error_code ec) {
          if (!ec)
            cancel_running("the daemon shut down and the job did not finish within the "
                           "shutdown grace period");
        });
        return;
      }
    }
    on_idle();
  }

  void dispatch() {
    std::vector<std::shared_ptr<Job>> starting;
    {
      std::lock_guard lock(mutex_);
      while (!shutting_down_ && running_ < config_.max_running && !pending_.empty()) {
        starting.push_back(pending_.front());
        pending_.pop_front();
        starting.back()->started = true; // out of the queue: a cancel now goes to its worker
        ++running_;
      }
    }
    // Workers are spawned on the executor's own thread only: Boost.Process brackets fork() with
    // notify_fork on the worker's io_context, which must not race with other threads using it.
    for (auto& job : starting)
      asio::post(executor_, [this, job = std::move(job)] {
        std::string cancelled_before_start;
        update(job, [&](Job& j) {
          cancelled_before_start = j.cancel_reason;
          j.status = "compiling";
          j.stage = protocol::JobStage::compiling;
          j.started_at = unix_now();
          j.started_clock = Clock::now();
        });
        if (cancelled_before_start.empty())
          launch(job);
        else
          finish(job, cancelled(cancelled_before_start, protocol::JobStage::starting));
      });
  }

  void launch(const std::shared_ptr<Job>& job) {
    supervisor::JobLaunch launch;
    try {
      launch = job::make_launch(*job->request, registry_, job->id, run_options_);
      launch.cuda_arch = devices_.reserve_compile_arch(job->gpu_type);
      launch.device_verifier = config_.verifiers != nullptr && config_.verifiers->enabled();
      {
        std::lock_guard lock(mutex_);
        job->compile_arch = launch.cuda_arch;
      }
      fs::create_directories(launch.work_dir);
    } catch (const std::exception& e) {
      supervisor::SessionOutcome failed;
      failed.end = End::spawn_failed;
      failed.message = std::string("cannot prepare the job: ") + e.what();
      failed.stage = protocol::JobStage::starting;
      finish(job, std::move(failed));
      return;
    }
    const int arch = launch.cuda_arch;
    supervisor::SessionHandlers handlers;
    handlers.on_phase = [this, job](const std::string& name, const json::object& result) {
      on_phase(job, name, result);
    };
    handlers.on_need_device = [this, job, arch](const json::array& types,
                                                std::optional<int> opened_cuda,
                                                std::function<void(json::object)> grant) {
      on_need_device(job, types, arch, opened_cuda, std::move(grant));
    };
    handlers.on_device_handover = [this, job] {
      std::lock_guard lock(mutex_);
      if (job->ticket)
        devices_.hand_over(*job->ticket);
    };
    handlers.on_complete = [this, job](supervisor::SessionOutcome outcome) {
      finish(job, std::move(outcome));
    };
    // A prestarted worker helps only a job whose plugins prewarm something, and only when it
    // prewarmed exactly those (a cuda job must not wait for a worker importing torch).
    supervisor::WarmPool::PrewarmSet prewarm;
    for (const auto& [type, path] : launch.plugins)
      if (const auto* plugin = registry_.find(type); plugin != nullptr && plugin->prewarm)
        prewarm.push_back(path);
    auto prestarted = warm_ && !prewarm.empty() ? warm_->take(std::move(prewarm)) : nullptr;
    auto session = supervisor::WorkerSession::start(executor_, std::move(launch),
                                                    std::move(handlers), std::move(prestarted));
    std::lock_guard lock(mutex_);
    if (job->ending || job->finished)
      return; // it could not start and has already ended (keeping it would be a cycle)
    job->session = std::move(session);
    if (!job->cancel_reason.empty())
      job->session->cancel();
  }

  void on_phase(const std::shared_ptr<Job>& job, const std::string& name,
                const json::object& result) {
    update(job, [&](Job& j) {
      j.record.phases[name] = result;
      j.status = job::status_after_phase(name);
      if (name == "compiled") {
        stats_.compiled(result);
        j.stage = protocol::JobStage::compiled;
        j.granted_clock = Clock::now(); // until a grant: a worker may fail before asking
      } else if (name == "validated") {
        stats_.validated(result, ms_since(j.granted_clock));
        j.stage = protocol::JobStage::profiling;
        j.validated_clock = Clock::now();
      } else if (name == "profiled") {
        stats_.profiled(result, ms_since(j.validated_clock));
        j.stage = protocol::JobStage::finishing;
      }
    });
  }

  void on_need_device(const std::shared_ptr<Job>& job, const json::array& types, int arch,
                      std::optional<int> opened_cuda, std::function<void(json::object)> grant) {
    {
      std::lock_guard lock(mutex_);
      job->stage = protocol::JobStage::waiting_for_device;
      devices_.end_compile_reservation(std::exchange(job->compile_arch, 0)); // acquire counts it
    }
    DeviceWish wish{types, job->gpu_type, arch, opened_cuda};
    const auto ticket = devices_.acquire(
        std::move(wish),
        [this, job, grant = std::move(grant)](const DeviceGrant& decision) {
          {
            std::lock_guard lock(mutex_);
            job->granted_clock = Clock::now();
            if (!decision.type.empty()) {
              job->device = decision;
              job->stage = protocol::JobStage::validating;
            }
          }
          json::object granted = decision.to_protocol();
          // The verifier's address and token go in the grant, which only the job's trusted
          // worker reads (never in `device`, which it hands on to its runners).
          if (decision.type == "cuda" && config_.verifiers != nullptr)
            if (const auto verifier = config_.verifiers->address(decision.index))
              granted["verifier"] =
                  json::object{{"socket", verifier->socket}, {"token", verifier->token}};
          grant(std::move(granted));
        },
        [this, job] { // the job that handed this GPU over is gone: this one may time now
          std::shared_ptr<supervisor::WorkerSession> session;
          {
            std::lock_guard lock(mutex_);
            session = job->session;
          }
          if (session)
            session->device_quiet();
        });
    std::lock_guard lock(mutex_);
    job->ticket = ticket; // on the session's strand, so before its on_complete
  }

  void finish(const std::shared_ptr<Job>& job, supervisor::SessionOutcome outcome) {
    const auto now = supervisor::GpuMemoryReadings::Clock::now();
    if (outcome.prestart_device_memory)
      gpu_memory_.record_prestarted(*outcome.prestart_device_memory, now);
    if (outcome.device_memory)
      gpu_memory_.record_job(*outcome.device_memory, now);
    std::vector<JobDone> waiters;
    const json::object record = update(job, [&](Job& j) {
      if (j.ticket) // the worker is gone: the device is free now, not after the write
        devices_.release(*std::exchange(j.ticket, std::nullopt));
      devices_.end_compile_reservation(std::exchange(j.compile_arch, 0)); // it never asked
      if (outcome.end == End::cancelled && !j.cancel_reason.empty())
        outcome.message = j.cancel_reason;
      j.record.outcome = std::move(outcome);
      const result::Verdict verdict = result::build_response(j.record).verdict;
      j.ending = true;
      j.status = job::final_status(verdict);
      j.stage = protocol::JobStage::done;
      j.http_status = result::http_status(verdict);
      j.finished_at = unix_now();
      stats_.finished(verdict, j.record.outcome->end, ms_since(j.submitted_clock));
      if (j.started_clock != Clock::time_point{}) {
        stats_.time_spent(
            std::chrono::duration<double, std::milli>(j.started_clock - j.submitted_clock).count(),
            j.record.outcome->ready_wait_ms, j.record.outcome->timeline,
            j.record.outcome->after_done_ms);
        stats_.prewarm_spent(*j.record.outcome);
      }
      waiters.swap(j.waiters);
    });
    std::error_code ec;
    fs::remove_all(run_options_.work_root / job->id, ec);
    // The worker is gone; so must be whatever it left behind (orphan_reaper.hpp).
    supervisor::reap_orphans();

    std::function<void()> idle;
    {
      std::lock_guard lock(mutex_);
      job->finished = true;
      enforce_state_cap(); // the record just written may be the one over it
      job->ending = false;
      job->request.reset();
      job->record = result::JobRecord{};
      job->session.reset();
      job->device.reset();
      if (job->started)
        --running_;
      if (shutting_down_ && running_ == 0 && on_idle_)
        idle = std::exchange(on_idle_, nullptr); // a grace timer still pending finds none left
    }
    for (auto& waiter : waiters)
      waiter(record);
    dispatch();
    if (idle)
      idle();
  }

  // --- expiry --------------------------------------------------------------------------------

  double ttl_seconds() const { return std::chrono::duration<double>(config_.job_ttl).count(); }

  // Caller holds mutex_.
  void schedule_expiry() {
    const auto interval = std::clamp<std::chrono::milliseconds>(
        config_.job_ttl / 4, std::chrono::milliseconds(100), std::chrono::minutes(1));
    expiry_timer_.expires_after(interval);
    expiry_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec)
        expire();
    });
  }

  void expire() {
    // Also a regular sweep for processes left behind while no job ended.
    supervisor::reap_orphans();
    std::lock_guard lock(mutex_);
    if (shutting_down_)
      return;
    const double now = unix_now();
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->second->finished && it->second->finished_at + ttl_seconds() <= now) {
        store_.remove(it->first);
        it = jobs_.erase(it);
      } else {
        ++it;
      }
    }
    enforce_state_cap();
    schedule_expiry();
  }

  // Caller holds mutex_. Past the cap, forgets finished jobs oldest-first (by finished_at) until
  // the records and blobs fit; a job's blobs go with its record when no other record names them.
  // Queued and running jobs are never forgotten: their records are what a crash would leave.
  void enforce_state_cap() {
    store::StoreUsage usage = store_.usage();
    if (usage.total_bytes() <= config_.state_max_bytes) {
      over_cap_logged_ = false;
      return;
    }
    std::vector<std::pair<double, std::string>> finished;
    for (const auto& [id, job] : jobs_)
      if (job->finished)
        finished.emplace_back(job->finished_at, id);
    std::sort(finished.begin(), finished.end());
    const uint64_t before = usage.total_bytes();
    uint64_t expired = 0;
    for (const auto& [finished_at, id] : finished) {
      if (usage.total_bytes() <= config_.state_max_bytes)
        break;
      store_.remove(id);
      jobs_.erase(id);
      ++expired;
      usage = store_.usage();
    }
    stats_.expired_by_cap(expired);
    if (expired > 0)
      spdlog::info("state directory over its cap ({} > {} bytes): forgot the {} oldest finished "
                   "job(s); {} bytes now",
                   before, config_.state_max_bytes, expired, usage.total_bytes());
    if (usage.total_bytes() > config_.state_max_bytes && !over_cap_logged_) {
      over_cap_logged_ = true; // once until it fits again: every finish would repeat it
      spdlog::warn("state directory still over its cap ({} > {} bytes --state-max-bytes) with "
                   "only queued and running jobs' records (or records that are not this daemon's) "
                   "left",
                   usage.total_bytes(), config_.state_max_bytes);
    }
  }

  asio::any_io_executor executor_;
  const registry::Registry& registry_;
  DevicePool& devices_;
  const JobManagerConfig config_;
  const store::JobStore store_;
  job::RunOptions run_options_;
  // What the workers last read of the GPUs' memory (its own lock): the pool grows by it.
  supervisor::GpuMemoryReadings gpu_memory_;
  std::unique_ptr<supervisor::WarmPool> warm_; // null: --warm-workers 0

  mutable std::mutex mutex_; // everything below
  std::map<std::string, std::shared_ptr<Job>> jobs_;
  std::deque<std::shared_ptr<Job>> pending_;
  size_t running_ = 0;
  bool shutting_down_ = false;
  std::function<void()> on_idle_;
  mutable JobStats stats_; // mutable: a reader (view) counts the records it refuses
  bool over_cap_logged_ = false;
  asio::steady_timer expiry_timer_;
  asio::steady_timer grace_timer_;
};

JobManager::JobManager(asio::any_io_executor executor, const registry::Registry& registry,
                       DevicePool& devices, JobManagerConfig config)
    : impl_(std::make_unique<Impl>(std::move(executor), registry, devices, std::move(config))) {}

JobManager::~JobManager() = default;

void JobManager::recover() {
  impl_->recover();
}

std::string JobManager::submit(request::EvalRequest request, std::optional<std::string> gpu_type,
                               JobDone on_done) {
  return impl_->submit(std::move(request), std::move(gpu_type), std::move(on_done));
}

std::optional<json::object> JobManager::view(const std::string& job_id) const {
  return impl_->view(job_id);
}

JobManager::CancelResult JobManager::cancel(const std::string& job_id, JobDone on_done) {
  return impl_->cancel(job_id, std::move(on_done));
}

StatsSnapshot JobManager::stats() const {
  return impl_->stats();
}

bool JobManager::shutting_down() const {
  return impl_->shutting_down();
}

void JobManager::shutdown(std::chrono::milliseconds grace, std::function<void()> on_idle) {
  impl_->shutdown(grace, std::move(on_idle));
}

void JobManager::cancel_running() {
  impl_->cancel_running("the daemon was told to stop at once (second signal)");
}

} // namespace keval::daemon
