#include "supervisor/worker_session.hpp"

#include "common/log.hpp"
#include "common/unix_clock.hpp"
#include "protocol/frame.hpp"
#include "protocol/job_contract.hpp"
#include "supervisor/detail/child_setup.hpp"
#include "supervisor/detail/exec_launcher.hpp"
#include "supervisor/detail/spawned_worker.hpp"
#include "supervisor/sandbox_setup.hpp"

#include <array>
#include <csignal>
#include <deque>
#include <utility>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value_to.hpp>

namespace keval::supervisor {

namespace asio = boost::asio;
namespace bp = boost::process::v2;
namespace json = boost::json;
using local_socket = asio::local::stream_protocol::socket;
using Clock = std::chrono::steady_clock;
using End = SessionOutcome::End;

namespace detail {

std::unique_ptr<SpawnedWorker> spawn_worker(asio::strand<asio::any_io_executor> strand,
                                            const std::filesystem::path& worker_exe,
                                            const protocol::SandboxPolicy& sandbox,
                                            const std::vector<std::filesystem::path>& prewarm,
                                            std::optional<int> open_ahead_device) {
  static std::atomic<uint64_t> workers_started{0};
  auto worker = std::make_unique<SpawnedWorker>(std::move(strand));
  worker->sandbox = sandbox;
  worker->sandbox.worker_tag =
      std::to_string(::getpid()) + "w" + std::to_string(workers_started.fetch_add(1));
  local_socket child_end(worker->strand);
  asio::local::connect_pair(worker->socket, child_end);
  std::vector<std::string> args{"--protocol-fd", "3", "--sandbox",
                                json::serialize(protocol::to_json(worker->sandbox))};
  for (const auto& plugin : prewarm) {
    args.emplace_back("--prewarm");
    args.push_back(plugin.string());
  }
  if (open_ahead_device) {
    args.emplace_back("--open-ahead-device");
    args.push_back(std::to_string(*open_ahead_device));
  }
  worker->process.emplace(ExecLauncher{}(worker->strand, worker_exe, args,
                                         bp::process_stdio{nullptr, worker->out, worker->err},
                                         ChildSetup{child_end.native_handle(), 3}));
  // child_end closes here: only the worker holds it now, so its exit means EOF for us.
  return worker;
}

} // namespace detail

namespace {

// Once the worker has exited, how long its pipes may stay open (held by a leftover grandchild
// that escaped the process group) before we stop waiting for them.
constexpr auto kDrainGrace = std::chrono::milliseconds(500);
// How long a job waits for a prestarted worker that is still prewarming (importing torch and
// Triton takes seconds; this only catches a prewarm that never ends).
constexpr auto kPrestartedReadyLimit = std::chrono::seconds(120);
// How long a job granted a GPU that another job is still handing over waits for device_quiet. The
// wait is not the job's time (its timeout would otherwise drain while the other job ends); this
// only catches an ending that never comes: the other job's processes were already killed when it
// handed the GPU over, and its own timeout bounds the rest.
constexpr auto kQuietWaitLimit = std::chrono::seconds(120);
// How long a worker told to stop (SIGTERM) may take to end its job's processes before its whole
// process group is killed.
constexpr auto kTerminateGrace = std::chrono::seconds(2);

class Session final : public WorkerSession, public std::enable_shared_from_this<Session> {
public:
  Session(asio::strand<asio::any_io_executor> strand, JobLaunch launch, SessionHandlers handlers)
      : strand_(std::move(strand)), launch_(std::move(launch)), handlers_(std::move(handlers)),
        socket_(strand_), out_pipe_(strand_), err_pipe_(strand_), timer_(strand_),
        drain_timer_(strand_), terminate_timer_(strand_), out_(launch_.output_cap),
        err_(launch_.output_cap), budget_left_(launch_.timeout) {}

  // Supervises `worker` (spawned on this session's strand), or, when null, spawns one.
  void begin(std::unique_ptr<detail::SpawnedWorker> worker) {
    started_ = Clock::now();
    if (!worker) {
      try {
        worker = detail::spawn_worker(strand_, launch_.worker_exe, launch_.sandbox, {});
      } catch (const std::exception& e) {
        force(End::spawn_failed, "cannot start " + launch_.worker_exe.string() + ": " + e.what());
        exited_ = socket_closed_ = out_closed_ = err_closed_ = true;
        asio::post(strand_, [self = shared_from_this()] { self->maybe_finish(); });
        return;
      }
    } else {
      prestarted_ = true;
    }
    worker_sandbox_ = worker->sandbox;
    socket_ = std::move(worker->socket);
    out_pipe_ = std::move(worker->out);
    err_pipe_ = std::move(worker->err);
    process_.emplace(std::move(*worker->process));
    pgid_ = process_->id();
    stage_ = protocol::JobStage::starting;
    read_socket();
    read_pipe(out_pipe_, out_buf_, out_, out_closed_);
    read_pipe(err_pipe_, err_buf_, err_, err_closed_);
    if (prestarted_) {
      // A worker still prewarming then waits for its device-open turn before the pool's spares
      // (worker/engine/device_turn.hpp's OpenTurn): this job waits for it.
      send(json::object{{"type", protocol::msg::kTaken}});
      await_prestarted_hello();
    } else {
      arm_timer();
    }
    process_->async_wait(asio::bind_executor(
        strand_, [self = shared_from_this()](boost::system::error_code, int) { self->on_exit(); }));
  }

  void device_quiet() override {
    asio::post(strand_, [self = shared_from_this()] {
      if (self->end_ || self->exited_)
        return;
      if (!self->granted_) { // overtook its grant on the way here: the grant says quiet instead
        self->quiet_before_grant_ = true;
        return;
      }
      self->trace("device_quiet sent");
      self->send(json::object{{"type", protocol::msg::kDeviceQuiet}});
      if (std::exchange(self->awaiting_quiet_, false))
        self->arm_timer(); // the job's time starts now
    });
  }

  void cancel() override {
    asio::post(strand_, [self = shared_from_this()] {
      self->force(End::cancelled, "job cancelled");
      self->terminate_job();
    });
  }

private:
  // --- reading ---------------------------------------------------------------------------

  void read_socket() {
    socket_.async_read_some(asio::buffer(socket_buf_),
                            [self = shared_from_this()](boost::system::error_code ec, size_t n) {
                              if (n > 0)
                                self->on_bytes(std::string_view(self->socket_buf_.data(), n));
                              if (ec || self->socket_closed_) {
                                self->socket_closed_ = true;
                                self->maybe_finish();
                                return;
                              }
                              self->read_socket();
                            });
  }

  void read_pipe(asio::readable_pipe& pipe, std::array<char, 16384>& buf, CappedOutput& sink,
                 bool& closed) {
    pipe.async_read_some(asio::buffer(buf), [self = shared_from_this(), &pipe, &buf, &sink,
                                             &closed](boost::system::error_code ec, size_t n) {
      sink.append(buf.data(), n);
      if (ec) {
        closed = true;
        self->maybe_finish();
        return;
      }
      self->read_pipe(pipe, buf, sink, closed);
    });
  }

  void on_bytes(std::string_view bytes) {
    if (end_)
      return; // already condemned; ignore whatever else it says
    decoder_.feed(bytes);
    try {
      while (auto message = decoder_.next()) {
        handle(*message);
        if (end_)
          return;
      }
    } catch (const std::exception& e) {
      force(End::protocol_error,
            std::string("worker sent an invalid message on the protocol channel: ") + e.what());
      kill_group();
    }
  }

  void handle(const json::object& frame) {
    const protocol::WorkerMessage message = protocol::parse_worker_message(frame);
    std::visit([this](const auto& m) { on_message(m); }, message);
  }

  void move_to(protocol::JobStage stage) {
    if (!protocol::can_follow(stage_, stage))
      throw protocol::ProtocolError(std::string("worker went back from ") +
                                    protocol::stage_name(stage_) + " to " +
                                    protocol::stage_name(stage));
    stage_ = stage;
  }

  // Where a job's time goes, for `KEVAL_LOG_LEVEL=debug`.
  void trace(const std::string& what) {
    spdlog::debug("job {}: worker sent {} at {:.3f} s", launch_.job_id, what,
                  seconds_since_start());
  }
  double seconds_since_start() const {
    return std::chrono::duration<double>(Clock::now() - started_).count();
  }

  void on_message(const protocol::Hello& hello) {
    trace("hello");
    if (hello_seen_)
      throw protocol::ProtocolError("a second hello");
    hello_seen_ = true;
    hello_ = hello;
    if (prestarted_) {
      spdlog::debug("job {}: prestarted worker {} (prewarmed {})", launch_.job_id, hello.pid,
                    json::serialize(hello.prewarmed));
      arm_timer(); // the job's own time starts now, not while the worker was prewarming
    }
    send_job();
  }

  void on_message(const protocol::PhaseMessage& phase) {
    trace(std::string("phase ") + protocol::phase_name(phase.phase));
    switch (phase.phase) {
    case protocol::Phase::compiled:
      move_to(protocol::JobStage::waiting_for_device);
      break;
    case protocol::Phase::validated:
      move_to(protocol::JobStage::profiling);
      break;
    case protocol::Phase::profiled:
      move_to(protocol::JobStage::finishing);
      break;
    }
    if (handlers_.on_phase)
      handlers_.on_phase(protocol::phase_name(phase.phase), phase.result);
  }

  void on_message(const protocol::Progress& progress) {
    if (handlers_.on_progress)
      handlers_.on_progress(protocol::to_frame(progress));
  }

  void on_message(const protocol::NeedDevice& need) {
    trace("need_device");
    json::array types;
    for (const auto& t : need.device_types)
      types.emplace_back(t);
    on_need_device(types, need.opened_cuda);
  }

  void on_message(const protocol::Done& done) {
    trace("done");
    done_ = true;
    done_at_ = Clock::now();
    done_report_ = done;
    move_to(protocol::JobStage::exiting);
  }

  void on_message(const protocol::DeviceHandover&) {
    trace("device_handover");
    if (handlers_.on_device_handover)
      handlers_.on_device_handover();
  }

  void on_message(const protocol::Fatal& fatal) {
    force(End::fatal, "keval-worker failed: " + fatal.message);
    kill_group();
  }

  // --- writing ---------------------------------------------------------------------------

  void send_job() {
    move_to(protocol::JobStage::compiling);
    protocol::JobFrame job;
    job.job_id = launch_.job_id;
    job.mode = launch_.mode;
    job.request = launch_.request;
    for (const auto& [type, path] : launch_.plugins)
      job.plugins[type] = path.string();
    job.work_dir = launch_.work_dir.string();
    job.cuda_arch = launch_.cuda_arch;
    job.seed = launch_.seed;
    job.timeout_ms = launch_.timeout.count();
    job.device_verifier = launch_.device_verifier;
    ready_wait_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - started_).count();
    job_sent_unix_ms_ = unix_ms();
    send(protocol::to_frame(job), protocol::kMaxJobFrameBytes);
  }

  void send(json::object message, size_t max_bytes = protocol::kDefaultMaxFrameBytes) {
    writes_.push_back(protocol::encode_frame(std::move(message), max_bytes));
    if (writes_.size() == 1)
      write_next();
  }

  void write_next() {
    asio::async_write(socket_, asio::buffer(writes_.front()),
                      [self = shared_from_this()](boost::system::error_code ec, size_t) {
                        self->writes_.pop_front();
                        if (ec)
                          return; // the read side and the exit handler report the death
                        if (!self->writes_.empty())
                          self->write_next();
                      });
  }

  // --- devices -----------------------------------------------------------------------------

  void on_need_device(const json::array& types, std::optional<int> opened_cuda) {
    move_to(protocol::JobStage::waiting_for_device);
    pause_timer(); // waiting in a queue for a GPU is not the kernel's time
    if (!handlers_.on_need_device) {
      grant(json::object{{"error", "this host grants no devices"}});
      return;
    }
    auto weak = weak_from_this();
    handlers_.on_need_device(types, opened_cuda, [weak, strand = strand_](json::object decision) {
      asio::post(strand, [weak, decision = std::move(decision)]() mutable {
        if (auto self = weak.lock())
          self->grant(std::move(decision));
      });
    });
  }

  void grant(json::object decision) {
    if (end_)
      return;
    granted_ = true;
    if (quiet_before_grant_)
      decision.erase("quiet");
    const json::value* quiet = decision.if_contains("quiet");
    awaiting_quiet_ = quiet != nullptr && quiet->is_bool() && !quiet->as_bool();
    decision["type"] = protocol::msg::kGrant;
    send(std::move(decision));
    stage_ = protocol::JobStage::validating; // the host's own step: always forward from waiting
    if (awaiting_quiet_)
      await_quiet();
    else
      arm_timer();
  }

  // --- time ------------------------------------------------------------------------------

  void arm_timer() {
    armed_at_ = Clock::now();
    timer_.expires_after(budget_left_);
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec)
        return; // cancelled or re-armed
      self->force(End::timed_out, "job exceeded its timeout of " +
                                      std::to_string(self->launch_.timeout.count() / 1000.0) +
                                      " s while " + protocol::stage_name(self->stage_) +
                                      "; worker killed");
      self->terminate_job();
    });
  }

  // A prestarted worker may still be running its plugins' prewarm when a job takes it; that is
  // not the job's time, but it must not take forever either.
  void await_prestarted_hello() {
    end_after(kPrestartedReadyLimit, "the prestarted worker was not ready after " +
                                         std::to_string(kPrestartedReadyLimit.count()) +
                                         " s (its plugins' prewarm did not finish); worker killed");
  }

  // Granted a GPU whose previous job is still ending: the worker times nothing until device_quiet,
  // and the job's timeout waits too (device_quiet arms it).
  void await_quiet() {
    end_after(kQuietWaitLimit, "the GPU's previous job had not ended " +
                                   std::to_string(kQuietWaitLimit.count()) +
                                   " s after it handed the GPU over; worker killed");
  }

  // For a wait that is not the job's time but must not last forever: ends the job (timed_out,
  // `message`) unless the timer is re-armed or cancelled within `limit`.
  void end_after(std::chrono::seconds limit, std::string message) {
    timer_.expires_after(limit);
    timer_.async_wait([self = shared_from_this(),
                       message = std::move(message)](boost::system::error_code ec) mutable {
      if (ec)
        return;
      self->force(End::timed_out, std::move(message));
      self->terminate_job();
    });
  }

  void pause_timer() {
    budget_left_ -= std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - armed_at_);
    if (budget_left_ < std::chrono::milliseconds(1))
      budget_left_ = std::chrono::milliseconds(1);
    timer_.cancel();
  }

  // --- ending ----------------------------------------------------------------------------

  void force(End end, std::string message) {
    if (end_)
      return; // the first cause wins
    end_ = end;
    message_ = std::move(message);
  }

  void kill_group() {
    if (pgid_ > 0)
      ::kill(-pgid_, SIGKILL);
  }

  // Ends a job that must stop now (timeout, cancel). SIGTERM goes to the worker alone: it is
  // trusted, and it kills every process of the job (its runners, and whatever user code started
  // there, setsid and double forks included: they were reparented to it) before it exits. Should
  // it not be gone after kTerminateGrace, its process group is killed.
  void terminate_job() {
    if (pgid_ <= 0 || exited_)
      return;
    ::kill(pgid_, SIGTERM);
    terminate_timer_.expires_after(kTerminateGrace);
    terminate_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec)
        self->kill_group();
    });
  }

  void on_exit() {
    exited_ = true;
    spdlog::debug("job {}: worker exited at {:.3f} s", launch_.job_id, seconds_since_start());
    timer_.cancel();
    terminate_timer_.cancel();
    const int status = process_->native_exit_code();
    if (WIFEXITED(status))
      exit_code_ = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
      signal_ = WTERMSIG(status);
    // Whatever the job left running in its group goes with it.
    kill_group();
    drain_timer_.expires_after(kDrainGrace);
    drain_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec)
        return;
      self->out_pipe_.close();
      self->err_pipe_.close();
      self->socket_.close();
      self->out_closed_ = self->err_closed_ = self->socket_closed_ = true;
      self->maybe_finish();
    });
    maybe_finish();
  }

  void maybe_finish() {
    if (finished_ || !exited_ || !socket_closed_ || !out_closed_ || !err_closed_)
      return;
    finished_ = true;
    spdlog::debug("job {}: session finished at {:.3f} s", launch_.job_id, seconds_since_start());
    drain_timer_.cancel();
    timer_.cancel();
    // What a worker killed mid-cleanup left (its own SIGTERM path removes the rest first).
    remove_runner_places(worker_sandbox_);

    SessionOutcome outcome;
    outcome.stage = stage_;
    outcome.exit_code = exit_code_;
    outcome.signal = signal_;
    outcome.stdout_text = out_.text();
    outcome.stderr_text = err_.text();
    outcome.stdout_bytes = out_.total_bytes();
    outcome.stderr_bytes = err_.total_bytes();
    outcome.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - started_).count();
    outcome.timeline = done_report_.timeline;
    outcome.timeline_origin_unix_ms = done_report_.origin_unix_ms;
    outcome.warm_up = done_report_.warm_up;
    outcome.job_sent_unix_ms = job_sent_unix_ms_;
    outcome.ready_wait_ms = ready_wait_ms_;
    outcome.prewarm_seconds = hello_.prewarm_seconds;
    outcome.device_turn_wait_seconds = hello_.device_turn_wait_seconds;
    outcome.device_turn_wait_taken_seconds = hello_.device_turn_wait_taken_seconds;
    outcome.device_open_seconds = hello_.device_open_seconds;
    outcome.device_memory = done_report_.device_memory;
    outcome.prestart_device_memory = hello_.device_memory;
    if (done_)
      outcome.after_done_ms =
          std::chrono::duration<double, std::milli>(Clock::now() - done_at_).count();
    if (end_) {
      outcome.end = *end_;
      outcome.message = message_;
    } else if (done_ && exit_code_ == 0) {
      outcome.end = End::completed;
    } else {
      outcome.end = End::died;
      outcome.message = death_message();
    }
    if (handlers_.on_complete)
      handlers_.on_complete(std::move(outcome));
  }

  std::string death_message() const {
    const std::string when = std::string(" while ") + protocol::stage_name(stage_);
    if (signal_) {
      std::string m = "worker was killed by " + describe_signal(*signal_) + when;
      if (*signal_ == SIGKILL)
        m += " (not by keval: the out-of-memory killer is the usual cause)";
      return m;
    }
    if (exit_code_)
      return "worker exited with code " + std::to_string(*exit_code_) + when +
             (done_ ? "" : " before finishing the job");
    return "worker ended" + when;
  }

  asio::strand<asio::any_io_executor> strand_;
  JobLaunch launch_;
  protocol::SandboxPolicy worker_sandbox_; // the worker's, with its worker_tag
  SessionHandlers handlers_;
  local_socket socket_;
  asio::readable_pipe out_pipe_, err_pipe_;
  std::optional<bp::basic_process<asio::strand<asio::any_io_executor>>> process_;
  asio::steady_timer timer_, drain_timer_, terminate_timer_;
  protocol::FrameDecoder decoder_;
  CappedOutput out_, err_;
  std::array<char, 65536> socket_buf_{};
  std::array<char, 16384> out_buf_{}, err_buf_{};
  std::deque<std::string> writes_;

  std::chrono::milliseconds budget_left_;
  Clock::time_point armed_at_, started_, done_at_;
  double job_sent_unix_ms_ = 0; // SessionOutcome::job_sent_unix_ms
  double ready_wait_ms_ = -1;   // SessionOutcome::ready_wait_ms
  protocol::Hello hello_;       // the worker's, once hello_seen_ (its prewarm's account)
  int pgid_ = -1;
  protocol::JobStage stage_ = protocol::JobStage::starting;
  bool hello_seen_ = false;
  bool granted_ = false;            // the grant was sent
  bool quiet_before_grant_ = false; // device_quiet came first (see device_quiet)
  bool awaiting_quiet_ = false;     // granted a GPU not yet quiet; the job's timer waits for it
  bool prestarted_ = false;
  protocol::Done done_report_; // the worker's `done`, once done_
  bool done_ = false, exited_ = false, socket_closed_ = false, out_closed_ = false,
       err_closed_ = false, finished_ = false;
  std::optional<End> end_;
  std::string message_;
  std::optional<int> exit_code_, signal_;
};

} // namespace

std::shared_ptr<WorkerSession> WorkerSession::start(asio::any_io_executor executor,
                                                    JobLaunch launch, SessionHandlers handlers,
                                                    std::unique_ptr<PrestartedWorker> prestarted) {
  std::unique_ptr<detail::SpawnedWorker> worker;
  if (prestarted)
    worker = std::move(prestarted->parts_);
  auto strand = worker ? worker->strand : asio::make_strand(executor);
  auto session =
      std::make_shared<Session>(std::move(strand), std::move(launch), std::move(handlers));
  session->begin(std::move(worker));
  return session;
}

PrestartedWorker::PrestartedWorker(std::unique_ptr<detail::SpawnedWorker> parts,
                                   std::optional<int> open_ahead_device)
    : parts_(std::move(parts)), open_ahead_device_(open_ahead_device) {}

PrestartedWorker::~PrestartedWorker() {
  if (parts_ && parts_->process) {
    ::kill(-parts_->process->id(), SIGKILL);
    boost::system::error_code ignored;
    parts_->process->wait(ignored); // reap it now: nobody else will
    remove_runner_places(parts_->sandbox);
  }
}

std::unique_ptr<PrestartedWorker>
PrestartedWorker::spawn(asio::any_io_executor executor, const std::filesystem::path& worker_exe,
                        const protocol::SandboxPolicy& sandbox,
                        const std::vector<std::filesystem::path>& prewarm,
                        std::optional<int> open_ahead_device) {
  return std::unique_ptr<PrestartedWorker>(
      new PrestartedWorker(detail::spawn_worker(asio::make_strand(executor), worker_exe, sandbox,
                                                prewarm, open_ahead_device),
                           open_ahead_device));
}

bool PrestartedWorker::alive(std::string* why) {
  if (!parts_ || !parts_->process)
    return false;
  boost::system::error_code ec;
  const bool running = parts_->process->running(ec);
  if (running || ec)
    return running && !ec;
  const int status = parts_->process->native_exit_code();
  if (why != nullptr)
    *why = WIFSIGNALED(status) ? "killed by " + describe_signal(WTERMSIG(status))
                               : "exited with code " + std::to_string(WEXITSTATUS(status));
  remove_runner_places(parts_->sandbox);
  parts_.reset();
  return false;
}

bool PrestartedWorker::ready() const {
  if (!parts_ || !parts_->process)
    return false;
  boost::system::error_code ec;
  return parts_->socket.available(ec) > 0 && !ec;
}

int PrestartedWorker::pid() const {
  return parts_ && parts_->process ? parts_->process->id() : -1;
}

SessionOutcome run_session(JobLaunch launch, SessionHandlers handlers) {
  asio::io_context ctx;
  SessionOutcome result;
  auto user_complete = std::move(handlers.on_complete);
  handlers.on_complete = [&](SessionOutcome outcome) {
    if (user_complete)
      user_complete(outcome);
    result = std::move(outcome);
  };
  auto session = WorkerSession::start(ctx.get_executor(), std::move(launch), std::move(handlers));
  ctx.run();
  return result;
}

} // namespace keval::supervisor
