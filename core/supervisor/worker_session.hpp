// One keval-worker process running one job, supervised from the host's Asio event loop: the
// protocol socket, the worker's stdout/stderr (captured, capped), its exit, and the job timeout.
// Everything happens on the io_context's thread(s) through one strand, so handlers never race.
#pragma once

#include "protocol/job_contract.hpp"
#include "protocol/sandbox_policy.hpp"
#include "supervisor/process.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

namespace keval::supervisor {

struct JobLaunch {
  std::filesystem::path worker_exe;
  protocol::SandboxPolicy sandbox; // what the worker's runners apply to themselves
  std::string job_id;
  std::string mode;            // "evaluate" or "compare"
  boost::json::object request; // as the client sent it; the worker parses it again
  std::map<std::string, std::filesystem::path> plugins; // kernel_type -> library
  std::filesystem::path work_dir;
  int cuda_arch = 0;
  uint64_t seed = 0;
  // Wall-clock budget, not counting time spent waiting for a device grant.
  std::chrono::milliseconds timeout{120000};
  size_t output_cap = 64 * 1024; // per stream
  // The host's GPUs have device verifiers: the job's trusted worker opens no context ahead of its
  // grant, which names the verifier to use (worker/verifier/device_verifier.hpp).
  bool device_verifier = false;
};

// How the session ended.
struct SessionOutcome {
  enum class End {
    completed,      // the worker sent `done` and exited 0
    timed_out,      // keval killed it at the timeout
    died,           // the worker exited or was killed before `done`
    protocol_error, // it sent garbage on the protocol channel (killed)
    fatal,          // the worker reported its own failure (`fatal`)
    cancelled,      // cancel() was called
    spawn_failed,   // it never started
  };
  End end = End::completed;
  std::string message; // human description for every end but completed
  protocol::JobStage stage = protocol::JobStage::starting; // what the worker was doing then
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string stdout_text, stderr_text;
  size_t stdout_bytes = 0, stderr_bytes = 0;
  double wall_ms = 0;
  // The worker's own account of where the job's time went (protocol::Done::timeline); empty
  // when it sent no `done`.
  boost::json::object timeline;
  // From the worker's `done` to the session's end (the worker exited, its pipes closed), on the
  // host's clock: what a job costs after its verdict, its device still held. 0 without `done`.
  double after_done_ms = 0;
  // When the job was sent to the worker, in ms since the Unix epoch on the host's clock. 0 when
  // it was never sent.
  double job_sent_unix_ms = 0;
  // The origin of `timeline` (protocol::Done::origin_unix_ms): the worker's receipt of the job,
  // on the same clock, so that jobs of one host can be lined up against each other. 0 without
  // `done`.
  double timeline_origin_unix_ms = 0;
  // From the session's start to the job frame sent (-1: never sent): a fresh worker's start-up,
  // or what a prestarted worker had left of its prewarm and device open when the job took it.
  double ready_wait_ms = -1;
  // A prestarted worker's own account of its prewarm, device open included, and of that the
  // wait for its device-open turn and the opens (its hello).
  std::optional<double> prewarm_seconds, device_turn_wait_seconds, device_open_seconds,
      device_turn_wait_taken_seconds;
  // Its warm-up of the GPU before the job came (protocol::Done::warm_up); empty without one.
  boost::json::object warm_up;
  // The job's GPU memory as it ended (protocol::Done::device_memory), and a prestarted worker's
  // once it had opened the device (its hello's): the host's pools grow by them
  // (supervisor/gpu_memory.hpp).
  std::optional<protocol::DeviceMemoryReading> device_memory, prestart_device_memory;
};

struct SessionHandlers {
  // A phase result arrived ("compiled", "validated", "profiled"). Persist it now.
  std::function<void(const std::string& phase, const boost::json::object& result)> on_phase;
  std::function<void(const boost::json::object& progress)> on_progress;
  // The worker asks for a device; call `grant` (now or later) with {"device": {...}} or
  // {"error": "..."}. `opened_cuda`: the CUDA device its processes opened ahead, if any.
  std::function<void(const boost::json::array& device_types, std::optional<int> opened_cuda,
                     std::function<void(boost::json::object)> grant)>
      on_need_device;
  // The worker's job is done with its device and every process of its user code is stopped
  // (device_handover): the device may go to the next job before this worker is gone.
  std::function<void()> on_device_handover;
  // Called exactly once, last.
  std::function<void(SessionOutcome)> on_complete;
};

namespace detail {
struct SpawnedWorker;
}

// A keval-worker started before its job (`--prewarm`: its plugins' SDK 1.1 prewarm hooks run
// while it waits), held until a session adopts it. It still serves exactly one job; what it saves
// is the start-up (for the Python types, the interpreter and `import torch`). Destroying an
// unadopted one kills it.
class PrestartedWorker {
public:
  // Spawns `worker_exe --protocol-fd 3 [--prewarm PLUGIN]... [--open-ahead-device N]` on
  // `executor`. Throws when it cannot be started.
  static std::unique_ptr<PrestartedWorker>
  spawn(boost::asio::any_io_executor executor, const std::filesystem::path& worker_exe,
        const protocol::SandboxPolicy& sandbox, const std::vector<std::filesystem::path>& prewarm,
        std::optional<int> open_ahead_device = std::nullopt);
  ~PrestartedWorker();
  PrestartedWorker(const PrestartedWorker&) = delete;
  PrestartedWorker& operator=(const PrestartedWorker&) = delete;

  // False once it has exited (it is reaped then); `why` says how it ended.
  bool alive(std::string* why = nullptr);
  // Whether it has said hello (its prewarm and device open are done: a job sent now starts at
  // once). Reads nothing: the hello stays for the session that adopts the worker.
  bool ready() const;
  int pid() const;
  // The GPU it was told to open ahead, if any.
  std::optional<int> open_ahead_device() const { return open_ahead_device_; }

private:
  PrestartedWorker(std::unique_ptr<detail::SpawnedWorker> parts,
                   std::optional<int> open_ahead_device);
  std::unique_ptr<detail::SpawnedWorker> parts_;
  std::optional<int> open_ahead_device_;
  friend class WorkerSession;
};

class WorkerSession {
public:
  // Spawns the worker (or adopts `prestarted`, which must have been spawned on `executor`'s
  // io_context) and starts supervising it. Failures to spawn are reported through on_complete
  // (End::spawn_failed), never thrown.
  static std::shared_ptr<WorkerSession>
  start(boost::asio::any_io_executor executor, JobLaunch launch, SessionHandlers handlers,
        std::unique_ptr<PrestartedWorker> prestarted = nullptr);
  virtual ~WorkerSession() = default;
  // Kills the worker's process group; on_complete follows with End::cancelled.
  virtual void cancel() = 0;
  // Tells the worker that the device it was granted while another job was handing it over
  // (a grant with quiet false) is now quiet: it may time its kernels.
  virtual void device_quiet() = 0;
};

// Runs one job on a private io_context and returns when it has ended (the CLI's path).
SessionOutcome run_session(JobLaunch launch, SessionHandlers handlers);

} // namespace keval::supervisor
