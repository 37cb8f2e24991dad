// The job contract: what crosses the host-worker protocol and what each phase reports, as types.
// The worker builds these, the host reads them (supervisor, response builder, stores); JSON
// exists only at the edges, through the conversions below. Messages come from the trusted worker
// (never from user code, which runs in runners), but they are still checked as they are read:
// a message that does not convert is a protocol error.
//
// Message order (see messages.hpp for the type names):
//   worker hello -> host job -> worker phase(compiled) -> worker need_device -> host grant ->
//   worker progress* -> phase(validated) -> phase(profiled) -> done   (fatal at any point)
#pragma once

#include "protocol/messages.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <boost/json/value_from.hpp>
#include <boost/json/value_to.hpp>

namespace keval::protocol {

// ---------------------------------------------------------------------------------------------
// Stages: where a job is, as the host sees it. Each message moves it forward, never back.

enum class JobStage {
  queued,             // accepted, no worker yet (the daemon's queue)
  starting,           // the worker is starting (or prewarming)
  compiling,          // the job was sent; both sides compile
  compiled,           // the compile phase arrived
  waiting_for_device, // the worker asked for a device
  validating,         // granted; correctness trials
  profiling,          // validated; timing
  finishing,          // profiled; the worker ends every process of the job
  exiting,            // done received; waiting for the worker to exit
  done,               // the job's record is final
};

const char* stage_name(JobStage stage);
std::optional<JobStage> parse_stage(std::string_view name);
// True when a job may move from `from` to `to` (forward only; a stage may repeat).
bool can_follow(JobStage from, JobStage to);

// ---------------------------------------------------------------------------------------------
// Phase reports

enum class Phase { compiled, validated, profiled };
const char* phase_name(Phase phase);
std::optional<Phase> parse_phase(std::string_view name);

struct ErrorInfo {
  std::string type;    // "compile_error", "runtime_error", "mismatch", "no_device", ...
  std::string message; // one line
  std::string details; // full log or traceback; may be empty
};

// One side's compilation, in its runner.
struct SideCompile {
  std::string kernel_type;
  bool ok = false;
  double time_ms = 0;
  boost::json::value info;                  // the plugin's compile details (null when none)
  std::optional<ErrorInfo> error;           // when !ok
  boost::json::object isolation;            // the layers the runner applied to itself
  std::optional<ErrorInfo> companion_error; // the reference's source failed in the candidate's
};

struct CompileReport {
  bool ok = false;
  std::optional<SideCompile> ref; // compare only
  std::optional<SideCompile> custom;
};

struct ValidationReport {
  bool ok = false;
  std::string mode;           // "correctness" (compare) or "executable" (evaluate)
  boost::json::object device; // what the engine describes
  boost::json::object tolerance;
  boost::json::array trials; // per trial: passed, comparisons (tensor::to_json), problem
  std::optional<ErrorInfo> error;
  std::string failed_side; // "ref" or "custom" when a side failed; empty otherwise
  // The job's seed (the secret its inputs came from), reported once the job has it, for a
  // rerun with the request's `seed`.
  std::optional<uint64_t> seed;
  // What the checks found that the verdict cannot say (precision, degenerate_check,
  // output_aliases_input), each {"name", "reason", "details"}.
  boost::json::array flags;
};

// One side's timing: tensor::RuntimeStats plus how it was taken.
struct SideTiming {
  double mean = 0, std = 0, min = 0, max = 0, median = 0, percentile_95 = 0, percentile_99 = 0;
  int64_t count = 0;
  std::string method; // "cuda_graph", "cuda_event", "cpu_wall_clock"
  int64_t warmup_runs = 0;
};

struct ProfileReport {
  bool ok = false;
  std::string method;
  boost::json::object device;
  std::optional<SideTiming> ref;
  std::optional<SideTiming> custom;
  std::optional<double> speedup; // ref median / custom median
  // ref median / the candidate's median wall time per sample, measured by the trusted worker
  // outside the candidate's process (sampling.wall_ms): a speedup the candidate cannot raise.
  std::optional<double> speedup_floor;
  std::optional<ErrorInfo> error;
  std::string failed_side;
  // What a verdict cannot say, reported beside it (excessive_speedup, constant_output), each
  // {"name", "reason", "details"}.
  boost::json::array flags;
  // How the timed samples were fed and checked: {"fresh_inputs", "checked_samples", ...}.
  boost::json::object checks;
  // Why sampling stopped: {"stopped_by": "count" | "noise", "samples", "noise_percent"{side}},
  // and the SM clock while it ran: {"throttled_samples", "sm_clock_mhz"{min, median, max_rated}}.
  boost::json::object sampling;
  // What each side's timed samples did on the device, from a trace of its process (CUPTI):
  // {side: {traced, reason? | kernel_time{...}, work[...], outside{samples, total_ms}},
  //  kernel_speedup?}.
  boost::json::object device_work;
  // Each side's hardware counters, when the request asked (worker/metrics/device_metrics.hpp):
  // {side: {available, reason? | chip, passes, kernels[...], ...}}.
  boost::json::object device_metrics;
};

// What the host keeps of a job's phases as they arrive.
struct JobPhases {
  std::optional<CompileReport> compiled;
  std::optional<ValidationReport> validated;
  std::optional<ProfileReport> profiled;
};

// ---------------------------------------------------------------------------------------------
// Messages

// A GPU's memory as its driver counted it at one moment, every process's allocations together
// (cuMemGetInfo): what the host sizes its pools of prestarted workers by, whose idle processes
// hold device memory a job may need (supervisor/gpu_memory.hpp). `gpu` names the device as
// DeviceTurn::gpu_of does (its PCI bus id), the same in every process.
struct DeviceMemoryReading {
  std::string gpu;
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0; // > 0, and at least free_bytes
};
// Whether its numbers add up (a named GPU, total > 0, free <= total): the protocol refuses any
// other, so a worker sends none and the host keeps none.
bool plausible(const DeviceMemoryReading& reading);
// {gpu, free_bytes, total_bytes}, as hello and done carry it and a response reports it.
boost::json::object to_json(const DeviceMemoryReading& reading);

// worker -> host, first: who it is and what it prepared before its job.
struct Hello {
  std::string worker_version;
  int64_t pid = 0;
  boost::json::object isolation; // the layers the trusted worker applied to itself
  boost::json::array prewarmed;  // kernel types whose prewarm ran (prestarted workers)
  boost::json::array prewarm_errors;
  std::optional<double> prewarm_seconds;
  // Of prewarm_seconds, the wait for the machine's device-open turn and the opens themselves
  // (this process's context and its runners'), where it opened the device ahead; of the wait,
  // how long a job had already taken the worker (its `taken` had come).
  std::optional<double> device_turn_wait_seconds, device_open_seconds,
      device_turn_wait_taken_seconds;
  // The GPU it opened ahead, read once its own context and its runners' were open.
  std::optional<DeviceMemoryReading> device_memory;
};

// host -> worker: the job.
struct JobFrame {
  std::string job_id;
  std::string mode;                           // "evaluate" | "compare"
  boost::json::object request;                // as the client sent it; the worker parses it
  std::map<std::string, std::string> plugins; // kernel_type -> plugin library
  std::string work_dir;
  int64_t cuda_arch = 0;
  uint64_t seed = 0;
  int64_t timeout_ms = 0; // the job's wall-clock budget (0: unknown); bounds its CPU time
  // A CUDA grant will name the GPU's device verifier: open no context of the worker's own ahead.
  bool device_verifier = false;
};

struct PhaseMessage {
  Phase phase = Phase::compiled;
  boost::json::object result; // a CompileReport, ValidationReport or ProfileReport, per `phase`
};
struct NeedDevice {
  std::vector<std::string> device_types; // "cuda", "cpu", in order of preference
  // The CUDA device (its ordinal) whose contexts the job's processes opened ahead, if any: on a
  // machine with several GPUs, a grant of another one costs the job its opens with the GPU held.
  std::optional<int> opened_cuda;
};
struct Progress {
  std::string phase; // "validating", "profiling"
  int64_t done = 0, total = 0;
};
// `timeline`: where the job's time went inside the worker, each step's milliseconds since the
// job arrived ("runners_started", "compiled", "granted", "bound", "validated", "profiled",
// "stopping", "ended", ...). The trusted worker's own clock; no user code reports it.
// `warm_up`: a prestarted worker's warm-up of its GPU before the job came (SDK 1.4 warm_device,
// worker/engine/device_turn.hpp's timing turn), or why it did not run; empty for other workers.
// `origin_unix_ms`: the moment `timeline` counts from (the worker's receipt of the job), in ms
// since the Unix epoch on the machine's real-time clock, which the host shares: the host's own
// send of the job comes earlier by however long the worker took to read it (a warm-up it was
// finishing, a busy machine), so only this origin lines one job's steps up against another's.
// 0: not sent.
// `device_memory`: the job's GPU as the job ended (its runners stopped, not yet gone: their
// memory still counts as used), where it had one.
struct Done {
  boost::json::object timeline;
  boost::json::object warm_up;
  double origin_unix_ms = 0;
  std::optional<DeviceMemoryReading> device_memory;
};
struct Fatal {
  std::string message;
};
// The job is past any use of its device that another job could disturb: every process of its
// user code is stopped and being killed, and the device has half its memory free. The host may
// grant the device to the next job, which validates beside this one's end and times nothing
// until this worker is gone (device_quiet).
struct DeviceHandover {};

// host -> worker: the device a job may use, or why there is none.
struct Grant {
  std::string error;          // non-empty: no device for this job
  std::string device_type;    // "cuda" or "cpu"
  int64_t index = 0;          // the CUDA ordinal
  boost::json::object device; // as the host described it (type, index, and what else it knows)
  // False: the device's last job is still ending (it handed the device over); nothing may be
  // timed on it before the host's device_quiet.
  bool quiet = true;
  // The host takes a device_handover for this grant (a daemon's GPU pool; a single job's host
  // has nobody to hand the device to).
  bool takes_handover = false;
  // The GPU's device verifier (worker/verifier/device_verifier.hpp): its abstract socket's name
  // and the token it wants; empty when the job opens a context of its own.
  std::string verifier_socket, verifier_token;
};
Grant parse_grant(const boost::json::object& frame);
// host -> worker, after a grant with quiet false: the device's last job is gone. Throws
// ProtocolError for any other frame.
void parse_device_quiet(const boost::json::object& frame);

// What a worker may send.
using WorkerMessage =
    std::variant<Hello, PhaseMessage, NeedDevice, Progress, Done, Fatal, DeviceHandover>;
// Reads one message from the worker; throws ProtocolError naming what is wrong.
WorkerMessage parse_worker_message(const boost::json::object& frame);
// The frame for a message (its "type" set).
boost::json::object to_frame(const WorkerMessage& message);
boost::json::object to_frame(const JobFrame& job);
JobFrame parse_job_frame(const boost::json::object& frame);

// Boost.JSON conversions (value_from / value_to). value_to throws std::exception subclasses on a
// missing or mistyped field.
void tag_invoke(boost::json::value_from_tag, boost::json::value& v, const ErrorInfo& e);
ErrorInfo tag_invoke(boost::json::value_to_tag<ErrorInfo>, const boost::json::value& v);
void tag_invoke(boost::json::value_from_tag, boost::json::value& v, const SideCompile& s);
SideCompile tag_invoke(boost::json::value_to_tag<SideCompile>, const boost::json::value& v);
void tag_invoke(boost::json::value_from_tag, boost::json::value& v, const CompileReport& r);
CompileReport tag_invoke(boost::json::value_to_tag<CompileReport>, const boost::json::value& v);
void tag_invoke(boost::json::value_from_tag, boost::json::value& v, const ValidationReport& r);
ValidationReport tag_invoke(boost::json::value_to_tag<ValidationReport>,
                            const boost::json::value& v);
void tag_invoke(boost::json::value_from_tag, boost::json::value& v, const SideTiming& t);
SideTiming tag_invoke(boost::json::value_to_tag<SideTiming>, const boost::json::value& v);
void tag_invoke(boost::json::value_from_tag, boost::json::value& v, const ProfileReport& r);
ProfileReport tag_invoke(boost::json::value_to_tag<ProfileReport>, const boost::json::value& v);

// The phases of a record's "phases" object ({"compiled": {...}, ...}); throws like value_to.
JobPhases phases_from_json(const boost::json::object& phases);
boost::json::object phases_to_json(const JobPhases& phases);

} // namespace keval::protocol
