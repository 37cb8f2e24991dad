#include "worker/pipeline/pipeline.hpp"

#include "worker/program/program_pipeline.hpp"

#include "checks/kernel_names.hpp"
#include "checks/static_scan.hpp"
#include "common/log.hpp"
#include "common/process_tree.hpp"
#include "common/unix_clock.hpp"
#include "protocol/job_contract.hpp"
#include "request/parse.hpp"
#include "tensor/dtype.hpp"
#include "tensor/generate.hpp"
#include "tensor/stats.hpp"
#include "worker/engine/detail/shared_host_memory.hpp"
#include "worker/engine/detail/tensor_bytes.hpp"
#include "worker/engine/device_memory.hpp"
#include "worker/engine/device_turn.hpp"
#include "worker/engine/engine.hpp"
#include "worker/isolation/cpu_priority.hpp"
#include "worker/isolation/isolation.hpp"
#include "worker/isolation/pause.hpp"
#include "worker/isolation/sandbox.hpp"
#include "worker/metrics/device_metrics.hpp"
#include "worker/pipeline/arguments.hpp"
#include "worker/pipeline/detail/runner_buffers.hpp"
#include "worker/pipeline/extension_builds.hpp"
#include "worker/pipeline/plugin_loader.hpp"
#include "worker/runner/detail/wire.hpp"
#include "worker/runner/runner_client.hpp"
#include "worker/runner/runner_protocol.hpp"
#include "worker/verifier/device_verifier.hpp"

#ifdef KEVAL_HAVE_CUDA
#include "worker/cuda/cuda_engine.hpp"
#include "worker/cuda/engine_opener.hpp"
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <thread>
#include <type_traits>

#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value_to.hpp>

namespace keval::worker {

namespace json = boost::json;
using request::EvalRequest;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

protocol::ErrorInfo error_json(const std::string& type, const std::string& message,
                               const std::string& details = {}) {
  return {type, message, details};
}

// The error type of a side whose process died, closed its channel, or answered out of turn.
constexpr const char* kProcessFailed = "process_failed";
// The validation error of TensorData that did not decode (JobSpec::input_data_error; its details
// are the JSON path at fault); with no failed side, result/response.cpp makes it a bad request.
constexpr const char* kInvalidInputData = "invalid_input_data";

// Bounds on the bytes a runner's reply may make the trusted worker copy (see copy_from_runner):
// the reference is the client's own; the candidate gets twice the reference's outputs, at least
// kMinOutputBudget, and kWithoutReference where there is no reference (evaluate, or inputs).
constexpr uint64_t kUnlimited = UINT64_MAX;
constexpr uint64_t kMinOutputBudget = 1ull << 20;
constexpr uint64_t kWithoutReference = 16ull << 30;
// A sample whose outputs are not wanted (warm-up): none are copied.
constexpr uint64_t kUnchecked = 0;
// How long the other side's processes may take to stop before a sample (isolation/pause.hpp):
// an idle process stops in microseconds; one inside a long system call stops when it returns.
constexpr double kPauseWaitMs = 500;

// A flag (request/model.hpp, kFlagNames): what a check found that the verdict cannot say.
json::object flag(const char* name, const std::string& reason, json::object details = {}) {
  return json::object{{"name", name}, {"reason", reason}, {"details", std::move(details)}};
}

// "12.3x": a ratio for a message.
std::string format_ratio(double ratio) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3gx", ratio);
  return text;
}

// A kernel failure while validating or profiling: the kernel's fault, reported as a result.
struct KernelFailure {
  std::string side;
  protocol::ErrorInfo error;
};

// One side of the job: the custom kernel, or the reference of a compare. Its plugin and user
// code live in its runner process; here is only what the trusted worker knows of it.
struct Side {
  std::string name; // "custom" or "ref"
  const request::KernelCode* code = nullptr;
  std::unique_ptr<RunnerClient> runner;
  std::filesystem::path plugin_path;
  uint32_t capabilities = 0; // the plugin's manifest, as the runner read it before any user code
  json::object isolation;    // the layers the runner applied to itself, from its hello
  bool compiled = false;

  bool has(uint32_t capability) const { return (capabilities & capability) != 0; }
  bool returns_outputs() const { return has(KEVAL_CAP_RETURNS_OUTPUTS); }
};

// A side's launch arguments: the trusted worker's shared tensors, handed to the side's runner
// under a binding number. Unbound (the runner drops its mappings) when this goes.
struct RemoteBinding {
  Side* side = nullptr;
  std::unique_ptr<ArgumentBinder> binder;
  int64_t id = 0;

  RemoteBinding() = default;
  RemoteBinding(RemoteBinding&& other) noexcept
      : side(other.side), binder(std::move(other.binder)), id(std::exchange(other.id, 0)) {}
  RemoteBinding& operator=(RemoteBinding&&) = delete;
  ~RemoteBinding() {
    if (side != nullptr && id != 0) {
      json::object unbind;
      unbind["type"] = runner_msg::kUnbind;
      unbind["binding"] = id;
      side->runner->post(std::move(unbind));
    }
  }
};

// What the correctness trials show beyond pass or fail, gathered trial by trial and turned into
// flags (request/model.hpp, kFlagNames) once all have passed.
class TrialEvidence {
public:
  // Output k of the reference was degenerate in this trial as `kind` ("" when it was not).
  void degenerate(size_t k, const std::string& kind) {
    Output& o = at(k);
    if (kind.empty())
      o.informative = true;
    else if (o.degenerate_kind.empty())
      o.degenerate_kind = kind;
  }

  // Output k of the candidate held exactly the bytes of an input ("input 2"), and the
  // reference's did (or not) in the same trial.
  void aliasing(size_t k, const std::string& custom, const std::string& reference) {
    Output& o = at(k);
    if (custom.empty()) {
      o.not_aliased = true;
      return;
    }
    o.aliased_input = custom;
    if (reference != custom)
      o.reference_differs = true;
  }

  void imprecise(uint64_t trial, size_t output, const tensor::Comparison& loose,
                 const tensor::Comparison& tight) {
    if (precision_.empty())
      precision_ = {{"trial", trial},
                    {"output", output},
                    {"dtype", request::dtype_name(*loose.dtype)},
                    {"max_abs_diff", loose.max_abs_diff},
                    {"max_rel_diff", loose.max_rel_diff},
                    {"request_tolerance",
                     json::object{{"atol", loose.tolerance.atol}, {"rtol", loose.tolerance.rtol}}},
                    {"strict_tolerance",
                     json::object{{"atol", tight.tolerance.atol}, {"rtol", tight.tolerance.rtol}}},
                    {"mismatches_at_strict", tight.mismatches},
                    {"at_strict", tensor::summary(tight)}};
  }

  json::array flags(bool compared) const {
    json::array out;
    if (!precision_.empty())
      out.push_back(flag("precision",
                         "the outputs pass the request's tolerance but not their dtype's strict "
                         "default (" +
                             json::value_to<std::string>(precision_.at("at_strict")) + ")",
                         precision_));
    for (size_t k = 0; k < outputs_.size(); ++k) {
      const Output& o = outputs_[k];
      if (compared && !o.informative && !o.degenerate_kind.empty())
        out.push_back(flag("degenerate_check",
                           "in every trial the reference's output " + std::to_string(k) +
                               " was such that " + degenerate_text(o.degenerate_kind) +
                               " passes the check: it cannot tell a wrong kernel from a right one",
                           json::object{{"output", k}, {"kind", o.degenerate_kind}}));
      // Returning an input is only suspect where the reference does not do the same.
      if (!o.not_aliased && !o.aliased_input.empty() && (!compared || o.reference_differs))
        out.push_back(flag("output_aliases_input",
                           "in every trial the candidate's output " + std::to_string(k) +
                               " was bit for bit its " + o.aliased_input +
                               (compared ? ", which the reference's was not" : ""),
                           json::object{{"output", k}, {"input", o.aliased_input}}));
    }
    return out;
  }

private:
  struct Output {
    bool informative = false; // some trial's reference output could tell right from wrong
    std::string degenerate_kind;
    bool not_aliased = false; // some trial's candidate output was not an input
    std::string aliased_input;
    bool reference_differs = false;
  };

  static std::string degenerate_text(const std::string& kind) {
    if (kind == "zero")
      return "an output of zeros";
    if (kind == "constant")
      return "one value repeated";
    return "returning " + kind + " unchanged";
  }

  Output& at(size_t k) {
    if (outputs_.size() <= k)
      outputs_.resize(k + 1);
    return outputs_[k];
  }

  std::vector<Output> outputs_;
  json::object precision_;
};

class Pipeline {
public:
  Pipeline(protocol::BlockingChannel& channel, const JobSpec& job, RunnerSource& runners)
      : channel_(channel), job_(job), request_(job.request), runners_(runners) {}

  void run() {
    try {
      run_steps();
    } catch (...) {
      stop_runners();
      throw;
    }
    stop_runners();
    finish();
  }

private:
  void run_steps() {
    start_runners();
    step("runners_started");
    // A whole program (docs/cuda_program.md): its own pipeline, with the runner just loaded.
    if (custom().has(KEVAL_CAP_PROGRAM)) {
      if (request_.ref)
        throw std::runtime_error("a program kernel type cannot be compared (the host checks it)");
      run_program_job(channel_, job_, *custom().runner, custom().plugin_path.string(),
                      custom().isolation, runners_);
      return;
    }
    // Only a job that needs CUDA touches the driver: cuInit takes a good part of a second and is
    // serialised in the driver across processes, so a CPU job on a GPU machine that initialised it
    // anyway would cost every other job its turn (the soak's CPU jobs ran at 3 jobs/s there).
    if (needs_cuda() && job_.device_verifier && job_.cuda_arch > 0) {
      // The daemon found the GPUs and runs a device verifier on each, which lends this process
      // its context: the device is usable and its arch is the job's. This process never
      // initialises the driver (a cuInit is 10 ms of the driver's serialised time a job).
      cuda_usable_ = true;
      step("cuda_probed");
    } else if (needs_cuda()) {
#ifdef KEVAL_HAVE_CUDA
      cuda_probe_ = std::async(std::launch::async, probe_cuda);
      // This process's device, opened while the probe runs and the sides compile, unless a
      // prestarted worker opened it already: a second engine would be made beside the job, and
      // its context torn down after `done`, with the job's device still held.
      if (!runners_.opens_cuda_engine_ahead())
        opener_.start(EngineUse::trusted);
#endif
      probe_cuda_once();
      step("cuda_probed");
    }
    if (!compile_all())
      return;
    step("compiled");
    if (job_.input_data_error) {
      // Before a device is held. No side's: the result says the request is at fault.
      fail_validation(error_json(kInvalidInputData, job_.input_data_error->message,
                                 job_.input_data_error->path));
      return;
    }
    if (!acquire_device())
      return;
    step("granted");
    bring_runners_forward();
    // The runners open their contexts and bind while this process opens its own: side by side.
    const std::vector<int64_t> binding = send_binds();
    engine_ = open_engine();
    step("engine_open");
    wish_to_time();
    if (!engine_ || !finish_binds(binding))
      return;
    step("bound");
    if (validate()) {
      step("validated");
      wait_until_quiet();
      profile();
      step("profiled");
    }
  }

  // Where a job's time goes inside the worker: the `timeline` of `done` (the host's /stats
  // breakdown, the response's metadata.worker.timeline_ms) and, for KEVAL_LOG_LEVEL=debug, the
  // log.
  void step(const char* key) {
    const double ms = ms_since(started_);
    timeline_[key] = ms;
    spdlog::debug("job {}: {} at {:.1f} ms", job_.job_id, key, ms);
  }

  // Every process the job started ends before the host hears `done`: the runners, and whatever
  // their user code left behind (setsid, double forks), which was reparented to us.
  //
  // A process with a device context takes tens of milliseconds to die (the driver tears the
  // context down), so the runners are all killed first, this process releases its own context
  // while they die, and only then are they reaped.
  void stop_runners() {
    step("stopping");
    held_.reset(); // before their pids can be anyone else's
    timing_turn_.reset();
    timing_wish_.reset();
    hand_over_device();
    for (auto& side : sides_)
      if (side->runner)
        side->runner->kill();
    trial_bindings_.clear();
    buffers_.clear();
    step("buffers_released");
    engine_.reset();
    step("engine_closed");
    // Each runner's end, in the timeline as `<side>_reaped`: which of the job's contexts the
    // driver took longest to tear down.
    for (auto& side : sides_)
      if (side->runner) {
        side->runner->stop();
        step((side->name + "_reaped").c_str());
      }
    isolation::kill_descendants();
    step("ended");
  }
  // The driver takes a couple of hundred milliseconds to tear down the contexts of a job's
  // processes (more for a torch runner's), all of it with the GPU held. Once no process of the
  // job's user code can run another instruction, the GPU may go to the next job, which validates
  // meanwhile and times nothing until this worker is gone (the host's device_quiet): every
  // process this worker has (the runners, their descendants, the orphans it adopted) is stopped,
  // then killed. The next job may also need memory that these processes still hold until they
  // are gone, so the GPU is handed over only with at least half of it free. Anything in doubt
  // (a process that did not stop, a device that cannot say, the host out of reach) keeps the GPU
  // held until the end, as without a handover.
  //
  // The reading goes to the host in `done` either way (device_memory_): its pools of prestarted
  // workers grow only while the GPU has memory to spare.
  void hand_over_device() {
    if (!engine_)
      return;
    if (!takes_handover_) {
      device_memory_ = read_device_memory(*engine_);
      return;
    }
    std::vector<pid_t> roots;
    for (const auto& side : sides_)
      if (side->runner)
        roots.push_back(side->runner->pid());
    isolation::PausedProcesses stopped = isolation::PausedProcesses::pause(
        roots, [](pid_t) { return true; }, kPauseWaitMs);
    const bool all_stopped = stopped.failure().empty();
    device_memory_ = read_device_memory(*engine_); // nullopt for a CPU engine: never handed over
    stopped.kill();
    if (!all_stopped || !device_memory_ ||
        device_memory_->free_bytes < device_memory_->total_bytes / 2)
      return;
    try {
      channel_.send(protocol::to_frame(protocol::DeviceHandover{}));
    } catch (const std::exception&) {
      return; // the host is gone: nothing to hand over to
    }
    step("handed_over");
  }

  // The job holds its device from now on: its runners leave the background that queued jobs'
  // runners compile in (worker/isolation/cpu_priority.hpp). What was done is reported with the
  // timing (sampling.cpu_priority).
  void bring_runners_forward() {
    int nice = 0;
    std::string failed;
    for (const auto& side : sides_)
      if (side->runner) {
        nice = std::max(nice, side->runner->place().background_nice);
        const std::string side_failed = side->runner->set_background(false);
        failed += (failed.empty() || side_failed.empty() ? "" : "; ") + side_failed;
      }
    if (nice == 0)
      cpu_priority_ = isolation::background_unavailable();
    else if (failed.empty())
      cpu_priority_ = "the runners waited at nice " + std::to_string(nice) +
                      " until the job was granted its device; at 0 since";
    else
      cpu_priority_ = "the runners could not all be brought back from nice " +
                      std::to_string(nice) + ": " + failed;
  }

  // A grant made while the GPU's last job was still ending (quiet false) is followed by the
  // host's device_quiet once that job is gone; nothing is timed before it.
  // The GPU's timing wish (engine/device_turn.hpp), held from the grant until the GPU is handed
  // over or the job ends: no prestarted worker starts warming this GPU up (SDK 1.4 warm_device)
  // while a job holds it, and one warming it up now ends with the runner it is at, most likely
  // while this job binds and validates, before it needs the timing turn.
  void wish_to_time() {
    timed_gpu_ = engine_ ? DeviceTurn::gpu_of(*engine_) : std::string();
    if (!timed_gpu_.empty())
      timing_wish_.emplace(DeviceTurn::timing_wish_file(timed_gpu_), kTimingWishPatience);
  }

  void wait_until_quiet() {
    if (!device_quiet_) {
      protocol::parse_device_quiet(channel_.receive());
      device_quiet_ = true;
      step("quiet");
    }
    if (!timed_gpu_.empty())
      take_timing_turn(timed_gpu_);
  }

  // The GPU's timing turn (engine/device_turn.hpp), held from here until the GPU is handed over
  // or the job ends: no runner warms this GPU up while this job is timed on it, and one warming
  // it up now finishes first. Past kTimingPatience the job times without the turn: a holder
  // that long is stuck, and says so in the log.
  void take_timing_turn(const std::string& gpu) {
    timing_turn_.emplace(DeviceTurn::timing_lock_file(gpu), DeviceTurn::kTimingPatience,
                         DeviceTurn::Hold::shared);
    if (!timing_turn_->held())
      spdlog::warn("job {}: timed without the GPU's timing turn: {}", job_.job_id,
                   timing_turn_->why_not());
    step("timing_turn");
  }

  // ---------------------------------------------------------------------------------------
  // Plugins and compilation (before any device is held)

  // One runner per side, each told which plugin to load. The manifest it answers with was read
  // before any user code ran in it, so the capabilities can be believed.
  void start_runners() {
    for (const auto* code : {request_.ref ? &*request_.ref : nullptr, &request_.kernel}) {
      if (code == nullptr)
        continue;
      auto it = job_.plugins.find(code->kernel_type);
      if (it == job_.plugins.end())
        throw std::runtime_error("job names no plugin for kernel_type '" + code->kernel_type + "'");
      auto side = std::make_unique<Side>();
      side->name = code == &request_.kernel ? "custom" : "ref";
      side->code = code;
      side->plugin_path = it->second;
      side->runner = runners_.take(side->name);
      sides_.push_back(std::move(side));
    }
    std::vector<int64_t> pending;
    for (auto& side : sides_) {
      side->isolation = runners_.hello_of(*side->runner);
      refuse_without_strict_sandbox(*side);
      json::object load;
      load["type"] = runner_msg::kLoad;
      load["plugin"] = side->plugin_path.string();
      pending.push_back(side->runner->send(std::move(load), "loading its plugin"));
    }
    for (size_t i = 0; i < sides_.size(); ++i) {
      Side& side = *sides_[i];
      json::object reply = side.runner->reply(runner_msg::kLoad, pending[i], "loading its plugin");
      if (!RunnerClient::ok(reply))
        throw std::runtime_error("cannot load plugin " + side.plugin_path.string() + ": " +
                                 RunnerClient::error_of(reply).message);
      side.capabilities = static_cast<uint32_t>(
          reply.at("manifest").as_object().at("capabilities").to_number<uint64_t>());
    }
  }

  Side& custom() {
    return *sides_.back();
  }
  const Side& custom() const {
    return *sides_.back();
  }

  // --sandbox strict: a runner that lacks a layer runs nothing. Not the kernel's fault: the job
  // fails as keval's (the machine cannot give what was asked for).
  static void refuse_without_strict_sandbox(const Side& side) {
    const json::value* mode = side.isolation.if_contains("mode");
    if (mode == nullptr || !mode->is_string() || mode->as_string() != "strict")
      return;
    const std::vector<std::string> missing = isolation::missing_layers(side.isolation);
    if (missing.empty())
      return;
    std::string text;
    for (const auto& line : missing)
      text += (text.empty() ? "" : "; ") + line;
    throw std::runtime_error("--sandbox strict: the " + side.name +
                             " kernel's process lacks sandbox layers (" + text + ")");
  }

  // ---------------------------------------------------------------------------------------
  // CUDA availability: known before compiling, so the target architecture is right and a
  // missing GPU is reported without holding anything.

  bool needs_cuda() const {
    for (const auto& side : sides_)
      if (side->has(KEVAL_CAP_DEVICE_CUDA))
        return true;
    return false;
  }

  void probe_cuda_once() {
#ifdef KEVAL_HAVE_CUDA
    const CudaAvailability probe = cuda_probe_.valid() ? cuda_probe_.get() : probe_cuda();
    cuda_usable_ = probe.usable;
    cuda_reason_ = probe.reason;
    if (probe.usable && cuda_arch_ == 0)
      cuda_arch_ = probe.arch_of_first;
#else
    cuda_usable_ = false;
    cuda_reason_ = "this keval-worker was built without the CUDA toolkit";
#endif
  }
  Side* ref() {
    return sides_.size() > 1 ? sides_.front().get() : nullptr;
  }

  // Both sides compile at once, each in its own runner.
  bool compile_all() {
    std::vector<int64_t> pending;
    std::vector<Clock::time_point> started;
    serve_extension_builds();
    // A runner writes only its own directory (its sandbox), so that is the plugin's work_dir.
    const int64_t cpu_seconds =
        job_.timeout_ms > 0
            ? (job_.timeout_ms / 1000 + 1) *
                  std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()))
            : 0;
    std::map<size_t, json::object> deferred; // side -> its compile, sent after its companion
    for (size_t i = 0; i < sides_.size(); ++i) {
      const std::unique_ptr<Side>& side = sides_[i];
      const std::filesystem::path dir = side->runner->directory();
      json::object c;
      if (cpu_seconds > 0)
        c["cpu_seconds"] = cpu_seconds;
      c["type"] = runner_msg::kCompile;
      c["source_code"] = side->code->source_code;
      c["metadata"] = json::serialize(side->code->metadata);
      if (!side->code->io_json.is_null())
        c["io"] = json::serialize(side->code->io_json);
      c["work_dir"] = dir.string();
      c["cuda_arch"] = cuda_arch_;
      c["side"] = side->name;
      started.push_back(Clock::now());
      try {
        if (needs_companion(*side)) {
          json::object companion = c;
          companion["type"] = runner_msg::kCompanion;
          companion["plugin"] = ref()->plugin_path.string();
          companion["source_code"] = ref()->code->source_code;
          companion["metadata"] = json::serialize(ref()->code->metadata);
          companion.erase("io");
          if (!ref()->code->io_json.is_null())
            companion["io"] = json::serialize(ref()->code->io_json);
          companion["side"] = "ref";
          companion["work_dir"] = (dir / "companion").string();
          companion_seq_ = side->runner->send(std::move(companion), "compiling");
          // Sent once the companion is answered: a companion whose load_inline asks this
          // process for a build reads the next frame of its channel as the answer, and a compile
          // queued behind it was taken for one.
          deferred[i] = std::move(c);
          pending.push_back(0);
          continue;
        }
        pending.push_back(side->runner->send(std::move(c), "compiling"));
      } catch (const RunnerFailure&) {
        pending.push_back(0); // reported when its reply is read
      }
    }
    protocol::CompileReport report;
    report.ok = true;
    for (size_t i = 0; i < sides_.size(); ++i) {
      Side& side = *sides_[i];
      protocol::SideCompile entry;
      entry.kernel_type = side.code->kernel_type;
      entry.isolation = side.isolation;
      try {
        if (needs_companion(side) && companion_seq_ != 0) {
          json::object companion =
              side.runner->reply(runner_msg::kCompanion, companion_seq_, "compiling");
          if (!RunnerClient::ok(companion)) {
            const RunnerError e = error_of(side, companion);
            entry.companion_error = error_json(e.type, e.message);
          }
        }
        if (auto compile = deferred.find(i); compile != deferred.end())
          pending[i] = side.runner->send(std::move(compile->second), "compiling");
        json::object reply = side.runner->reply(runner_msg::kCompile, pending[i], "compiling");
        entry.time_ms = ms_since(started[i]);
        if (RunnerClient::ok(reply)) {
          side.compiled = true;
          entry.ok = true;
          if (const auto* info = reply.if_contains("info"))
            entry.info = *info;
        } else {
          const RunnerError e = error_of(side, reply);
          entry.error = error_json(e.type, e.message, e.details);
        }
      } catch (const RunnerFailure& failure) {
        entry.time_ms = ms_since(started[i]);
        entry.error = error_json(kProcessFailed, failure.what());
      }
      report.ok = report.ok && side.compiled;
      (side.name == "ref" ? report.ref : report.custom) = std::move(entry);
    }
    send_phase(protocol::Phase::compiled, json::value_from(report));
    return report.ok;
  }

  // A runner that may not write the shared build cache (the candidate's: policy_for_side) asks
  // this process for its torch_cuda extensions, which are built and kept where no runner can
  // write (extension_builds.hpp), when the job has that type at all.
  void serve_extension_builds() {
    const auto plugin = job_.plugins.find("torch_cuda");
    if (plugin == job_.plugins.end())
      return;
    const std::string& private_dir = custom().runner->place().private_dir;
    extension_builds_ = std::make_unique<ExtensionBuilds>(
        runners_, plugin->second, cuda_arch_,
        private_dir.empty() ? std::filesystem::path()
                            : std::filesystem::path(private_dir) / "cache" / "torch_cuda",
        private_dir.empty() ? "no state directory to keep it in" : "");
    ExtensionBuilds* builds = extension_builds_.get();
    for (auto& side : sides_)
      if (side->name != "ref")
        side->runner->serve_requests(
            [builds](const json::object& request) { return builds->answer(request); },
            kMaxBuildRequests);
  }

  // The candidate's runner also compiles the reference's source (never running its kernel) when
  // both are Python types: KernelBench keeps get_inputs and get_init_inputs in the reference
  // only, and the candidate's ModelNew is built from them. Only the reference's source crosses,
  // never the other way: the reference's process runs no candidate code.
  bool needs_companion(const Side& side) const {
    const Side* reference = sides_.size() > 1 ? sides_.front().get() : nullptr;
    return reference != nullptr && &side != reference && side.has(KEVAL_CAP_NEEDS_PYTHON) &&
           reference->has(KEVAL_CAP_NEEDS_PYTHON);
  }

  // ---------------------------------------------------------------------------------------
  // Device grant

  // Asks the host for a device; false (reported) when none can be had.
  bool acquire_device() {
    uint32_t common = KEVAL_CAP_DEVICE_CPU | KEVAL_CAP_DEVICE_CUDA;
    for (auto& side : sides_)
      common &= side->capabilities;
    json::array wanted;
    if ((common & KEVAL_CAP_DEVICE_CUDA) && cuda_usable_)
      wanted.emplace_back("cuda");
    if (common & KEVAL_CAP_DEVICE_CPU)
      wanted.emplace_back("cpu");
    if (wanted.empty()) {
      if (common & KEVAL_CAP_DEVICE_CUDA)
        fail_validation(error_json(
            "no_device", "kernel type '" + custom().code->kernel_type +
                             "' needs a CUDA device and none is usable: " + cuda_reason_));
      else
        fail_validation(error_json("unsupported",
                                   "the reference and custom kernel types share no device type"));
      return false;
    }
    protocol::NeedDevice need;
    for (const auto& type : wanted)
      need.device_types.emplace_back(type.as_string());
    if ((common & KEVAL_CAP_DEVICE_CUDA) && cuda_usable_)
      need.opened_cuda = runners_.prepared_cuda_device();
    channel_.send(protocol::to_frame(need));

    const auto asked = Clock::now();
    const protocol::Grant grant = protocol::parse_grant(channel_.receive());
    // The host's clock for the job's timeout stops while it waits for a device.
    device_wait_ms_ = ms_since(asked);
    if (!grant.error.empty()) {
      fail_validation(error_json("no_device", grant.error));
      return false;
    }
    granted_ = grant.device;
    device_quiet_ = grant.quiet;
    takes_handover_ = grant.takes_handover;
    if (!grant.verifier_socket.empty())
      verifier_ = verifier::VerifierAddress{grant.verifier_socket, grant.verifier_token};
    return true;
  }

  // This process's engine on the granted device: the one prepared before the job when it is for
  // that device (a prestarted worker), else a new one.
  std::unique_ptr<Engine> open_engine() {
    const std::string type = json::value_to<std::string>(granted_.at("type"));
    const int index = granted_.contains("index")
                          ? static_cast<int>(granted_.at("index").to_number<int64_t>())
                          : 0;
    if (auto prepared = runners_.prepared_engine(type, index))
      return prepared;
#ifdef KEVAL_HAVE_CUDA
    if (type == "cuda")
      if (auto opened = opener_.take(index))
        return opened;
    if (type == "cuda" && job_.device_verifier) {
      // The GPU's device verifier lends its context; where it cannot, this process makes its own
      // (slower, the same checks), and the result says why.
      if (verifier_) {
        try {
          auto remote = verifier::connect_remote_engine(*verifier_, kVerifierPatience);
          verifier_note_ = json::object{{"used", true}};
          return remote;
        } catch (const verifier::VerifierUnavailable& e) {
          verifier_note_ = json::object{{"used", false}, {"reason", e.what()}};
        }
      } else {
        verifier_note_ = json::object{{"used", false},
                                      {"reason", "the grant named no device verifier: the GPU's is "
                                                 "not serving (GET /health device_verifiers)"}};
      }
    }
#endif
    if (type == "cpu")
      return make_cpu_engine();
#ifdef KEVAL_HAVE_CUDA
    if (type == "cuda") {
      try {
        return make_cuda_engine(index, EngineUse::trusted);
      } catch (const std::exception& e) {
        fail_validation(error_json("no_device", "cannot use CUDA device " + std::to_string(index) +
                                                    ": " + e.what()));
        return nullptr;
      }
    }
#endif
    fail_validation(error_json("no_device", "device type '" + type +
                                                "' was granted but this worker has no engine "
                                                "for it"));
    return nullptr;
  }

  // The engine's account of its device, with whether the GPU's device verifier served it.
  json::object device_described() const {
    json::object device = engine_->describe();
    if (!verifier_note_.empty())
      device["device_verifier"] = verifier_note_;
    return device;
  }

  // Each runner opens its own context on the granted device and binds its kernel there.
  std::vector<int64_t> send_binds() {
    std::vector<int64_t> pending;
    for (auto& side : sides_) {
      json::object bind;
      bind["type"] = runner_msg::kBind;
      bind["device"] = granted_;
      bind["nvtx_range"] = nvtx_range(*side);
      try {
        pending.push_back(side->runner->send(std::move(bind), "binding to the device"));
      } catch (const RunnerFailure&) {
        pending.push_back(0); // reported when its reply is read
      }
    }
    return pending;
  }

  bool finish_binds(const std::vector<int64_t>& pending) {
    try {
      for (size_t i = 0; i < sides_.size(); ++i) {
        Side& side = *sides_[i];
        json::object reply =
            side.runner->reply(runner_msg::kBind, pending[i], "binding to the device");
        if (!RunnerClient::ok(reply)) {
          const RunnerError e = error_of(side, reply);
          fail_validation(error_json(e.type, side.name + " " + e.message, e.details));
          return false;
        }
      }
    } catch (const RunnerFailure& failure) {
      fail_validation(error_json(kProcessFailed, failure.what()));
      return false;
    }
    return true;
  }

  // ---------------------------------------------------------------------------------------
  // Validation

  bool validate() {
    const bool correctness = ref() != nullptr;
    const int64_t trials = request_.num_correctness_trials;
    protocol::ValidationReport report;
    report.mode = correctness ? "correctness" : "executable";
    report.device = device_described();
    report.tolerance = {{"atol", request_.tolerance.atol}, {"rtol", request_.tolerance.rtol}};
    report.seed = job_.seed;
    report.flags = static_flags();
    for (int64_t trial = 0; trial < trials; ++trial) {
      progress("validating", trial, trials);
      try {
        json::object t = run_validation_trial(static_cast<uint64_t>(trial));
        const bool passed = t["passed"].as_bool();
        const std::string problem =
            passed ? std::string() : json::value_to<std::string>(t["problem"]);
        report.trials.push_back(std::move(t));
        if (!passed) {
          report.error = error_json("mismatch", "trial " + std::to_string(trial) + ": " + problem);
          send_phase(protocol::Phase::validated, json::value_from(report));
          return false;
        }
      } catch (const KernelFailure& failure) {
        report.failed_side = failure.side;
        report.error = failure.error;
        send_phase(protocol::Phase::validated, json::value_from(report));
        return false;
      }
    }
    progress("validating", trials, trials);
    report.ok = true;
    for (auto& f : evidence_.flags(ref() != nullptr))
      report.flags.push_back(std::move(f));
    send_phase(protocol::Phase::validated, json::value_from(report));
    return true;
  }

  json::object run_validation_trial(uint64_t trial) {
    // Where the trial's wall time went (a side's: binding its arguments, its launch, the copies
    // of its outputs): a first launch's set-up shows in trial 0.
    json::object spent;
    auto lap = Clock::now();
    const auto account = [&](const char* part) {
      spent[part] = ms_since(lap);
      lap = Clock::now();
    };
    InputSet inputs = make_inputs(trial);
    account("inputs");
    json::object t;
    t["trial"] = trial;
    Side* reference = ref();
    std::optional<Launched> expected;
    if (reference != nullptr) {
      expected = launch_checked(*reference, inputs, kUnlimited);
      account("ref");
    }
    custom_output_budget_ = output_budget(expected);
    Launched actual = launch_checked(custom(), inputs, custom_output_budget_);
    account("custom");
    const std::vector<const Tensor*> given = input_tensors(inputs);
    for (size_t k = 0; k < actual.copies.size(); ++k)
      evidence_.aliasing(k, aliased_input(*actual.copies[k], given),
                         expected && k < expected->copies.size()
                             ? aliased_input(*expected->copies[k], given)
                             : std::string());
    if (!expected) {
      t["passed"] = true;
      t["outputs"] = actual.outputs.size();
      account("checks");
      t["time_ms"] = std::move(spent);
      return t;
    }
    for (size_t k = 0; k < expected->copies.size(); ++k)
      evidence_.degenerate(k, degenerate_kind(*expected->copies[k], given));
    json::array comparisons;
    const std::string problem =
        compare_outputs(*expected, actual, [&](size_t i, const tensor::Comparison& cmp) {
          json::object c = tensor::to_json(cmp);
          c["output"] = i;
          c["summary"] = tensor::summary(cmp);
          if (cmp.match)
            check_precision(trial, i, *expected->outputs[i], *actual.outputs[i], cmp);
          comparisons.push_back(std::move(c));
        });
    t["passed"] = problem.empty();
    if (!problem.empty())
      t["problem"] = problem;
    t["comparisons"] = std::move(comparisons);
    account("checks");
    t["time_ms"] = std::move(spent);
    return t;
  }

  // The candidate's outputs against the reference's, output by output (`each` sees every
  // comparison): the first problem, a count that differs or an output that does not match, or
  // "" when all match.
  std::string
  compare_outputs(const Launched& expected, const Launched& actual,
                  const std::function<void(size_t, const tensor::Comparison&)>& each = nullptr) {
    std::string problem;
    if (expected.outputs.size() != actual.outputs.size())
      problem = "reference produced " + std::to_string(expected.outputs.size()) +
                " outputs, custom kernel produced " + std::to_string(actual.outputs.size());
    const size_t n = std::min(expected.outputs.size(), actual.outputs.size());
    for (size_t i = 0; i < n; ++i) {
      const tensor::Comparison cmp =
          engine_->compare(*expected.outputs[i], *actual.outputs[i], request_.tolerance);
      if (!cmp.match && problem.empty())
        problem = "output " + std::to_string(i) + ": " + tensor::summary(cmp);
      if (each)
        each(i, cmp);
    }
    return problem;
  }

  // The candidate's source scanned for patterns that game timing or checks (checks/
  // static_scan.hpp): one "static" flag listing them, or none. Source only: nothing runs.
  json::array static_flags() const {
    size_t omitted = 0;
    // The language is the plugin's word (its manifest, read before user code ran), not a list of
    // type names: a third party's Python type is scanned as Python too.
    const auto language = custom().has(KEVAL_CAP_NEEDS_PYTHON) ? checks::SourceLanguage::python
                                                               : checks::SourceLanguage::cxx;
    const auto findings = checks::scan_source(custom_code().source_code, language, &omitted);
    json::array out;
    if (findings.empty())
      return out;
    json::array listed;
    std::vector<std::string> patterns;
    for (const auto& f : findings) {
      listed.push_back(json::object{
          {"pattern", f.pattern}, {"line", f.line}, {"excerpt", f.excerpt}, {"reason", f.reason}});
      if (std::find(patterns.begin(), patterns.end(), f.pattern) == patterns.end())
        patterns.push_back(f.pattern);
    }
    std::string names;
    for (const auto& p : patterns)
      names += (names.empty() ? "" : ", ") + p;
    out.push_back(flag("static",
                       "the candidate's source holds " + std::to_string(findings.size() + omitted) +
                           " pattern(s) kernels use to game timing or checks (" + names +
                           "): warnings for a reviewer, see details",
                       json::object{{"findings", std::move(listed)}, {"omitted", omitted}}));
    return out;
  }

  const request::KernelCode& custom_code() const {
    return request_.kernel;
  }

  // The trial's input tensors (what a degenerate or aliased output is compared with).
  std::vector<const Tensor*> input_tensors(const InputSet& inputs) const {
    std::vector<const Tensor*> out;
    for (const auto& t : inputs.defaults())
      out.push_back(t.get());
    for (const auto* contract : contracts())
      if (contract != nullptr)
        for (size_t k = 0; k < contract->args.size(); ++k)
          if (const Tensor* t = inputs.contract_input(contract, k))
            out.push_back(t);
    return out;
  }

  // "input 2" when `output` holds exactly the bytes of one of `inputs` (same dtype and shape).
  std::string aliased_input(const Tensor& output, const std::vector<const Tensor*>& inputs) {
    for (size_t k = 0; k < inputs.size(); ++k)
      if (inputs[k]->dtype() == output.dtype() && inputs[k]->shape() == output.shape() &&
          engine_->same_bytes(inputs[k]->dl(), output.dl()))
        return "input " + std::to_string(k);
    return {};
  }

  // How a reference output fails to tell a right kernel from a wrong one on this trial: "zero"
  // (all zeros pass the check), "constant" (one value repeated passes), "input k" (returning
  // that input unchanged passes); empty when it can tell.
  std::string degenerate_kind(const Tensor& expected, const std::vector<const Tensor*>& inputs) {
    if (!tensor::is_floating(expected.dtype()) && expected.dtype() != request::DType::i32 &&
        expected.dtype() != request::DType::i64)
      return {}; // small integer and bool outputs are constant or sparse by nature
    std::unique_ptr<Tensor> probe = engine_->allocate(expected.dtype(), expected.shape());
    request::TensorInit init;
    init.kind = request::InitKind::zeros;
    engine_->fill(*probe, init, 0);
    const tensor::Comparison zero =
        engine_->compare(expected.dl(), probe->dl(), request_.tolerance);
    if (!zero.compared || zero.numel == 0)
      return {};
    if (zero.match)
      return "zero";
    // The element of largest magnitude, repeated: does that pass everywhere?
    if (zero.max_abs_diff_at && std::isfinite(zero.max_abs_diff_at->expected)) {
      init.kind = request::InitKind::full;
      init.fill_value = zero.max_abs_diff_at->expected;
      engine_->fill(*probe, init, 0);
      if (engine_->compare(expected.dl(), probe->dl(), request_.tolerance).match)
        return "constant";
    }
    for (size_t k = 0; k < inputs.size(); ++k)
      if (inputs[k]->dtype() == expected.dtype() && inputs[k]->shape() == expected.shape() &&
          engine_->compare(expected.dl(), inputs[k]->dl(), request_.tolerance).match)
        return "input " + std::to_string(k);
    return {};
  }

  // An output that passes the request's tolerance is checked again at its dtype's strict
  // default (KernelBench's: 1e-4 for fp32 and fp64, 1e-2 for fp16 and bf16): a kernel that
  // computes in a narrower type passes a loose tolerance and is flagged here.
  void check_precision(uint64_t trial, size_t output, const keval_dl_tensor& expected,
                       const keval_dl_tensor& actual, const tensor::Comparison& loose) {
    if (!loose.dtype || !tensor::is_floating(*loose.dtype))
      return;
    const bool half = *loose.dtype == request::DType::f16 || *loose.dtype == request::DType::bf16;
    const request::Tolerance strict{half ? 1e-2 : 1e-4, half ? 1e-2 : 1e-4};
    if (request_.tolerance.atol <= strict.atol && request_.tolerance.rtol <= strict.rtol)
      return;
    const tensor::Comparison tight = engine_->compare(expected, actual, strict);
    if (!tight.match)
      evidence_.imprecise(trial, output, loose, tight);
  }

  // Launches one side on clones of the trial's inputs in its runner, waits, takes private copies
  // of its outputs (out of its reach before they are compared), and checks that its read-only
  // inputs are untouched. Throws KernelFailure.
  // `budget` bounds the bytes of the tensors the side may return (see output_budget).
  Launched launch_checked(Side& side, const InputSet& inputs, uint64_t budget) {
    RemoteBinding& binding = trial_binding(side, inputs);
    binding.binder->poison_outputs(*engine_);
    engine_->synchronize(); // the runner's context sees only finished work of ours
    std::vector<std::unique_ptr<Tensor>> returned = launch_remote(binding, budget);
    Launched launched;
    if (side.returns_outputs()) {
      launched.copies = std::move(returned);
    } else {
      for (const keval_dl_tensor* view : binding.binder->output_views())
        launched.copies.push_back(engine_->clone(*view));
    }
    for (const auto& copy : launched.copies)
      launched.outputs.push_back(&copy->dl());
    check_inputs_untouched(binding, "");
    return launched;
  }

  // Throws the side's KernelFailure when it changed one of its read-only inputs (`when` ends the
  // message: "", " in timed sample 3 of 100").
  void check_inputs_untouched(RemoteBinding& binding, const std::string& when) {
    if (auto modified = binding.binder->first_modified_input(*engine_))
      throw KernelFailure{binding.side->name,
                          error_json("input_modified", binding.side->name +
                                                           " kernel modified its input argument '" +
                                                           *modified + "'" + when)};
  }

  // The side's arguments for a validation trial: its previous trial's buffers, the new inputs
  // written into them (ArgumentBinder::refresh, as between timed samples), or new buffers for its
  // first trial and where an input's dtype or shape changed. Binding anew every trial made an
  // exported allocation here and an imported mapping in the runner for each tensor, and tore both
  // down: a dozen driver calls that each wait for the device-wide lock, which processes creating
  // contexts on the GPU (a warm pool refilling) hold for milliseconds at a time. In the mixed
  // batch on the H200 that made a trial take 0.2 to 1.2 s where it takes 2 ms.
  RemoteBinding& trial_binding(Side& side, const InputSet& inputs) {
    if (auto kept = trial_bindings_.find(&side); kept != trial_bindings_.end()) {
      try {
        kept->second.binder->refresh(*engine_, inputs);
        return kept->second;
      } catch (const std::invalid_argument&) {
        trial_bindings_.erase(kept); // the runner drops its mappings; bound anew below
      }
    }
    return trial_bindings_.emplace(&side, bind_remote(side, inputs)).first->second;
  }

  // The side's arguments for profiling: validation's, with the first timed inputs written into
  // them (the same calls saved once more), else new ones.
  RemoteBinding bind_for_timing(Side& side, const InputSet& inputs) {
    RemoteBinding binding = std::move(trial_binding(side, inputs));
    trial_bindings_.erase(&side);
    return binding;
  }

  // Shared clones of the inputs (and fresh outputs) for `side`, handed to its runner.
  RemoteBinding bind_remote(Side& side, const InputSet& inputs) {
    RemoteBinding binding;
    binding.binder = std::make_unique<ArgumentBinder>(
        *engine_, side_contract(side), side.code->io.has_value(), inputs, Sharing::shared);
    std::vector<int> fds;
    json::object args;
    args["type"] = runner_msg::kArgs;
    args["binding"] = next_binding_;
    args["args"] = binding.binder->describe(fds);
    if (fds.size() > protocol::kMaxFdsPerFrame)
      throw std::runtime_error("a kernel with more than " +
                               std::to_string(protocol::kMaxFdsPerFrame) +
                               " tensor arguments is not supported");
    expect_ok(side, call(side, std::move(args), "receiving its arguments", fds),
              "receiving its arguments");
    binding.side = &side;
    binding.id = next_binding_++;
    return binding;
  }

  // Runs the bound launch once in the runner and returns private copies of what it returned.
  std::vector<std::unique_ptr<Tensor>> launch_remote(RemoteBinding& binding, uint64_t budget) {
    Side& side = *binding.side;
    json::object launch;
    launch["type"] = runner_msg::kLaunch;
    launch["binding"] = binding.id;
    json::object reply = call(side, std::move(launch), "launching");
    expect_ok(side, reply, "launching");
    std::vector<std::unique_ptr<Tensor>> copies;
    if (!side.returns_outputs())
      return copies;
    copies = copy_from_runner(side, reply, "outputs", "returning its outputs", budget);
    return copies;
  }

  // Private copies of the tensors a runner described under `key` and sent with its reply. With
  // `budget` kUnchecked (outputs not wanted) none are copied, but they are still mapped: the
  // runner's next reply of the kind may reuse their buffers (RunnerBuffers).
  std::vector<std::unique_ptr<Tensor>> copy_from_runner(Side& side, const json::object& reply,
                                                        const char* key, const char* doing,
                                                        uint64_t budget) {
    const auto unusable = [&](const std::string& why) {
      return KernelFailure{side.name, error_json(kProcessFailed, side.name +
                                                                     " kernel's process sent "
                                                                     "unusable tensors while " +
                                                                     doing + ": " + why)};
    };
    std::vector<std::unique_ptr<Tensor>> copies;
    try {
      std::vector<SharedTensorHandle> handles =
          detail::read_shared(detail::array_field(reply, key), side.runner->channel());
      // Sized before anything is copied: a process that runs user code must not make this one
      // allocate what it likes (an out-of-memory death here would read as keval's failure).
      uint64_t total = 0;
      for (const auto& handle : handles) {
        const uint64_t bytes = handle.reuses_previous
                                   ? detail::tensor_bytes(handle.dtype, handle.shape, "a tensor")
                                   : detail::checked_shared_bytes(handle);
        if (__builtin_add_overflow(total, bytes, &total))
          total = UINT64_MAX;
      }
      if (budget != kUnchecked && total > budget)
        throw unusable(std::to_string(total) + " bytes, more than the " + std::to_string(budget) +
                       " its outputs may take" +
                       (budget == kWithoutReference ? "" : " (twice the reference's)"));
      const auto& mapped = buffers_[&side].map(*engine_, key, std::move(handles));
      if (budget != kUnchecked)
        for (const auto& tensor : mapped)
          copies.push_back(engine_->clone(tensor->dl(), Sharing::private_memory));
    } catch (const KernelFailure&) {
      throw;
    } catch (const verifier::VerifierUnavailable&) {
      throw; // keval's own failure, never the side's: the job ends as an infrastructure error
    } catch (const std::exception& e) {
      // invalid_argument (a descriptor that does not hold what it claims), ProtocolError (fewer
      // descriptors than announced), a device error copying it: all the side's doing.
      throw unusable(e.what());
    }
    return copies;
  }

  // What the candidate may return: twice the bytes the reference returned (a dtype twice as wide
  // still reaches the comparison, which says what differs), else kWithoutReference.
  static uint64_t output_budget(const std::optional<Launched>& expected) {
    if (!expected)
      return kWithoutReference;
    uint64_t total = 0;
    for (const auto& copy : expected->copies)
      total += detail::tensor_bytes(copy->dtype(), copy->shape());
    return std::max<uint64_t>(2 * total, kMinOutputBudget);
  }

  // The error a runner reported. Once user code has run in the candidate's runner, what it says
  // is the candidate's to forge: an error it labels as keval's or the machine's (internal_error,
  // no_device) would turn its own failure into an infrastructure failure, which reward loops
  // usually retry or drop instead of scoring. So from the candidate such a label is the kernel's
  // failure, and the message says what it claimed. (The reference is the client's own.)
  //
  // Compilation is the exception: a broken environment (no interpreter, no toolchain) shows up
  // there first and genuinely is the machine's, so an honest kernel must not be failed for it.
  // A candidate forging it at compile time gains an infrastructure verdict, never a pass; closing
  // that needs the environment checked in `load`, before user code (an SDK hook; see README).
  RunnerError error_of(const Side& side, const json::object& reply) const {
    RunnerError e = RunnerClient::error_of(reply);
    if (side.name == "custom" && side.compiled &&
        (e.type == "internal_error" || e.type == "no_device")) {
      e.message = "the kernel's process reported " + e.type + ": " + e.message;
      e.type = "runtime_error";
    }
    return e;
  }

  // A reply with ok=false is the side's failure: its kernel raised, or broke its device.
  void expect_ok(const Side& side, const json::object& reply, const std::string& doing) {
    if (RunnerClient::ok(reply))
      return;
    const RunnerError e = error_of(side, reply);
    std::string message = e.message;
    if (e.type == "device_error")
      message = side.name + " " + message;
    else if (doing == "launching")
      message = side.name + " " + message;
    else
      message = side.name + " kernel failed while " + doing + ": " + message;
    throw KernelFailure{side.name, error_json(e.type, message, e.details)};
  }

  // One command to a side's runner. A runner that dies, closes its channel or answers out of turn
  // has failed its side.
  json::object call(Side& side, json::object command, const std::string& doing,
                    const std::vector<int>& fds = {}) {
    // A stopped process cannot answer: a side held stopped goes on before it is asked anything.
    if (held_ && held_->timed != &side)
      release_pause();
    try {
      return side.runner->call(std::move(command), doing, fds);
    } catch (const RunnerFailure& failure) {
      throw KernelFailure{side.name, error_json(kProcessFailed, failure.what())};
    }
  }

  // The IOContract that shapes a side's arguments: its own, else the other side's.
  const request::IOContract* side_contract(const Side& side) const {
    if (side.code->io)
      return &*side.code->io;
    for (const auto& other : sides_)
      if (other->code->io)
        return &*other->code->io;
    return nullptr;
  }

  // The trial's inputs: from the IOContract when any side has one, else the kernel's defaults.
  InputSet make_inputs(uint64_t trial) {
    for (auto& side : sides_)
      if (side->code->io)
        return InputSet::from_contracts(*engine_, contracts(), trial, job_.seed);
    Side& provider = ref() != nullptr ? *ref() : custom();
    if (!provider.has(KEVAL_CAP_DEFAULT_INPUTS))
      throw KernelFailure{
          provider.name, error_json("no_inputs", "the request has no IOContract and kernel type '" +
                                                     provider.code->kernel_type +
                                                     "' cannot produce default inputs")};
    json::object ask;
    ask["type"] = runner_msg::kDefaultInputs;
    ask["seed"] = tensor::input_seed(job_.seed, "default-inputs", trial);
    json::object reply = call(provider, std::move(ask), "producing default inputs");
    if (!RunnerClient::ok(reply)) {
      const RunnerError e = error_of(provider, reply);
      throw KernelFailure{provider.name, error_json(e.type, e.message, e.details)};
    }
    InputSet inputs = InputSet::from_tensors(
        copy_from_runner(provider, reply, "tensors", "producing default inputs",
                         &provider == ref() ? kUnlimited : kWithoutReference));
    // Default inputs can hold values besides tensors (get_inputs() returning sizes): the plugin
    // learns where they go when it produces the inputs, so the candidate's runner produces them
    // once too (from the reference's get_inputs, see needs_companion) and they are dropped.
    if (&provider != &custom() && custom().has(KEVAL_CAP_DEFAULT_INPUTS) && !custom_layout_known_) {
      json::object once;
      once["type"] = runner_msg::kDefaultInputs;
      // Any seed: these inputs are dropped. Not one derived from the job's, which the
      // candidate must never learn (tensor::input_seed). Nothing is shared or kept for them.
      once["seed"] = 0;
      once["share"] = false;
      json::object custom_reply = call(custom(), std::move(once), "producing default inputs");
      if (!RunnerClient::ok(custom_reply)) {
        const RunnerError e = error_of(custom(), custom_reply);
        throw KernelFailure{"custom", error_json(e.type, e.message, e.details)};
      }
      custom_layout_known_ = true;
    }
    return inputs;
  }

  std::vector<const request::IOContract*> contracts() const {
    std::vector<const request::IOContract*> out;
    for (const auto& side : sides_)
      out.push_back(side->code->io ? &*side->code->io : nullptr);
    return out;
  }

  // ---------------------------------------------------------------------------------------
  // Profiling

  // Timed runs draw their inputs from trials of their own, apart from the correctness trials
  // (0 .. num_correctness_trials - 1) and from each other.
  static constexpr uint64_t kWarmupTrials = 1ull << 40;
  static constexpr uint64_t kSampleTrials = 1ull << 41;

  // Relative standard error of the mean, in percent (how far the mean may be from the truth),
  // kept up to date sample by sample (Welford), so a noise target costs O(1) per sample.
  class Noise {
  public:
    void add(double x) {
      ++n_;
      const double delta = x - mean_;
      mean_ += delta / static_cast<double>(n_);
      m2_ += delta * (x - mean_);
    }
    double percent() const {
      if (n_ < 2 || mean_ <= 0)
        return 100.0;
      const double variance = m2_ / static_cast<double>(n_ - 1);
      return 100.0 * std::sqrt(variance / static_cast<double>(n_)) / mean_;
    }

  private:
    int64_t n_ = 0;
    double mean_ = 0, m2_ = 0;
  };

  struct Timed {
    Side* side = nullptr;
    RemoteBinding binding;
    std::string method{};
    std::vector<double> samples{};
    Noise noise{}; // of `samples`
    int64_t warmup = 0;
    bool matched_other_side = false; // timed without capture because the other side could not be
    // The device trace of its samples (worker/engine/device_work.hpp), or why there is none.
    std::string untraced{};
    std::vector<double> kernel_samples{}; // each sample's busy time on the device
    DeviceWorkInventory work{};
    int64_t samples_with_outside_work = 0;
    double outside_ms = 0;
    // The traced samples whose device work its runner has not sent yet (it reads its trace once
    // for several): each one's index in `samples`, none for a warm-up run.
    std::vector<std::optional<size_t>> unread{};
    std::vector<double> walls{}; // each sample's SampleRun::wall_ms
    // The reference's samples only: the candidate's processes stopped around them
    // (pause_other_sides), the most at once, and how many times (hold_pause_for).
    size_t paused_most = 0;
    int64_t stops = 0;
    std::optional<std::optional<uid_t>> runner_uid{}; // its runner's uid, once read
  };

  // One timed run: its time (the outside work its trace showed added), what it did on the
  // device, and private copies of its outputs (taken after the timed region).
  struct SampleRun {
    double ms = 0;
    // Measured here, outside the side's process: from the request to the copy of its outputs.
    // The run's work happened inside it (its inputs were new, its outputs are checked), so no
    // process of user code can make it shorter than that work; the channel's round trip and the
    // copies make it longer than `ms`.
    double wall_ms = 0;
    // What this and the side's earlier unread samples did on the device, where its runner sent
    // it with this reply (Timed::unread; empty: not yet).
    std::vector<SampleActivity> activities;
    Launched launched;
  };

  // Every timed sample runs on inputs neither side has seen (a fresh trial, generated by the
  // trusted worker and written into the bound buffers outside the timed region, so a captured
  // graph reads them too), both sides on the same ones, and the candidate's outputs of every
  // sample are checked against the reference's for that sample. A kernel that caches results
  // (by call count, pointer, content or a device-side counter) or replays a token graph fails
  // the sample it cheats in, named in the error.
  void profile() {
    const int64_t samples = request_.num_trials;
    std::vector<Timed> timed;
    // The pristine inputs the bindings hold now, and those of the sample before (evaluate mode
    // compares outputs across samples).
    std::unique_ptr<InputSet> current, previous;
    // Compare: the next sample's inputs, made right after the reference's run of this one (see
    // hold_pause_for: the provider is not stopped then).
    std::unique_ptr<InputSet> next;
    std::vector<std::unique_ptr<Tensor>> previous_outputs;
    int64_t unchanged_outputs = 0, changed_inputs = 0;
    bool stopped_by_noise = false;
    ClockWatch clock;
    const auto setting_up = Clock::now();
    try {
      current = std::make_unique<InputSet>(make_inputs(kWarmupTrials));
      spent_.setup_inputs = ms_since(setting_up);
      for (auto& side : sides_) {
        Timed t{.side = side.get(), .binding = bind_for_timing(*side, *current)};
        const auto preparing = Clock::now();
        const json::object reply = prepare_timer(t, true);
        const double wall_ms = ms_since(preparing);
        spent_.setup_timers[side->name] += wall_ms;
        add_runner_account(reply, wall_ms, Timer::kSetupParts, spent_.setup_in_runner[side->name]);
        timed.push_back(std::move(t));
      }
      same_method(timed);
      spent_.setup = ms_since(setting_up);
      uint64_t warmup_trial = kWarmupTrials + 1;
      const auto warming = Clock::now();
      for (auto& t : timed)
        t.warmup = warm_up(t, warmup_trial);
      spent_.warm_up = ms_since(warming);
      Timed* ref_timed = nullptr;
      Timed* custom_timed = nullptr;
      for (auto& t : timed)
        (t.side->name == "ref" ? ref_timed : custom_timed) = &t;
      for (int64_t i = 0; i < samples; ++i) {
        if (i % std::max<int64_t>(1, samples / 10) == 0)
          progress("profiling", i, samples);
        // The inputs of two samples back are no use any more: freed before the next are made,
        // so a problem whose inputs take a tenth of the GPU (KernelBench level 1's
        // matrix-vector product: 8 GiB) holds two sets at once, not three. A compare keeps no
        // previous set (only evaluate compares across samples): its two are this sample's and
        // the next's.
        previous.reset();
        auto making = Clock::now();
        auto fresh = next ? std::move(next)
                          : std::make_unique<InputSet>(make_inputs(kSampleTrials + uint64_t(i)));
        for (auto& t : timed)
          refresh(t, *fresh);
        spent_.inputs += ms_since(making);
        if (ref_timed == nullptr)
          previous = std::move(current);
        current = std::move(fresh);
        // Alternate which side goes first so neither always runs right after the other.
        std::optional<SampleRun> ref_run, custom_run;
        for (size_t k = 0; k < timed.size(); ++k) {
          auto& t = timed[(static_cast<size_t>(i) + k) % timed.size()];
          const uint64_t budget = &t == ref_timed ? kUnlimited : custom_output_budget_;
          SampleRun run = sample(t, budget);
          t.samples.push_back(run.ms);
          t.walls.push_back(run.wall_ms);
          t.noise.add(run.ms);
          if (t.untraced.empty()) {
            t.unread.emplace_back(t.samples.size() - 1);
            add_activities(t, std::move(run.activities));
          }
          (&t == ref_timed ? ref_run : custom_run) = std::move(run);
          if (&t == ref_timed && i + 1 < samples) {
            making = Clock::now();
            next = std::make_unique<InputSet>(make_inputs(kSampleTrials + uint64_t(i) + 1));
            spent_.inputs += ms_since(making);
          }
        }
        clock.read(*engine_);
        const auto checking = Clock::now();
        if (ref_run)
          check_sample(i, samples, *ref_run, *custom_run);
        check_inputs_untouched(custom_timed->binding, " in timed sample " + std::to_string(i + 1) +
                                                          " of " + std::to_string(samples));
        if (!ref_run) {
          // Evaluate: no reference to check against, but outputs that stay bit-identical while
          // the inputs change say the kernel did not compute them from these inputs.
          if (!previous_outputs.empty() && previous && inputs_differ(*previous, *current)) {
            ++changed_inputs;
            if (same_outputs(previous_outputs, custom_run->launched))
              ++unchanged_outputs;
          }
          previous_outputs = std::move(custom_run->launched.copies);
        }
        spent_.checks += ms_since(checking);
        if (settled(timed, i + 1)) {
          // Decided on every sample's time: the work a trace saw outside its window counts first.
          read_unread(timed);
          if (settled(timed, i + 1)) {
            stopped_by_noise = true;
            break;
          }
        }
      }
      read_unread(timed);
    } catch (const KernelFailure& failure) {
      release_pause();
      send_profile_failure(failure);
      return;
    } catch (const detail::WireError& e) {
      release_pause();
      send_profile_failure(KernelFailure{"custom", error_json(kProcessFailed, e.what())});
      return;
    }
    release_pause();
    progress("profiling", samples, samples);

    protocol::ProfileReport report;
    report.sampling["stopped_by"] = stopped_by_noise ? "noise" : "count";
    report.sampling["samples"] = timed.front().samples.size();
    if (request_.max_noise_percent) {
      report.sampling["max_noise_percent"] = *request_.max_noise_percent;
      report.sampling["min_samples"] = request_.min_samples;
    }
    json::object noise;
    for (const auto& t : timed)
      noise[t.side->name] = t.noise.percent();
    report.sampling["noise_percent"] = std::move(noise);
    clock.report(report.sampling);
    report.sampling["cpu_priority"] = cpu_priority_;
    const auto reporting = Clock::now();
    report_device_work(timed, report);
    collect_hardware_times(timed, report);
    collect_device_metrics(timed, report);
    // Where the phase's wall time went, beside the samples themselves: what a job costs the GPU
    // beyond the kernels' own time (issue 17's breakdown).
    report.sampling["time_ms"] =
        json::object{{"setup", spent_.setup},          {"warm_up", spent_.warm_up},
                     {"inputs", spent_.inputs},        {"runs", spent_.runs},
                     {"runs_pausing", spent_.pausing}, {"runs_calls", spent_.calls},
                     {"outputs", spent_.outputs},      {"checks", spent_.checks},
                     {"after", ms_since(reporting)}};
    // Of `setup`: the first inputs, and each side's timer (the runner's tracer started, its
    // launch captured where it can be: what a job pays once before its first sample).
    json::object setup_parts{{"inputs", spent_.setup_inputs}};
    for (const auto& [side, ms] : spent_.setup_timers)
      setup_parts["timer_" + side] = ms;
    for (const auto& [side, parts] : spent_.setup_in_runner) {
      json::object in_runner;
      for (const auto& [part, ms] : parts)
        in_runner[part] = ms;
      setup_parts["timer_" + side + "_in_runner"] = std::move(in_runner);
    }
    report.sampling["time_ms"].as_object()["setup_parts"] = std::move(setup_parts);
    if (!spent_.in_runner.empty()) {
      json::object split;
      for (const auto& [part, ms] : spent_.in_runner)
        split[part] = ms;
      report.sampling["time_ms"].as_object()["runs_calls_in_runner"] = std::move(split);
    }
    report.ok = true;
    report.method = timed.front().method;
    report.device = device_described();
    for (auto& t : timed) {
      const tensor::RuntimeStats stats = tensor::compute_stats(t.samples);
      protocol::SideTiming timing{
          stats.mean,          stats.std,           stats.min,   stats.max, stats.median,
          stats.percentile_95, stats.percentile_99, stats.count, t.method,  t.warmup};
      (t.side->name == "ref" ? report.ref : report.custom) = timing;
    }
    if (report.ref && report.custom && report.custom->median > 0)
      report.speedup = report.ref->median / report.custom->median;
    report_walls(timed, report);
    for (const auto& t : timed)
      if (t.matched_other_side)
        report.sampling["method_note"] =
            t.side->name + " could have been replayed from a CUDA graph; it was timed with " +
            t.method + " like the other side, whose launch could not be captured";
    report.checks["fresh_inputs"] = true;
    const auto taken = static_cast<int64_t>(timed.front().samples.size());
    report.checks["checked_samples"] = ref() != nullptr ? taken : 0;
    if (ref() == nullptr) {
      // Consecutive samples whose inputs differed, and of those, how many kept the outputs.
      report.checks["sample_pairs_with_changed_inputs"] = changed_inputs;
      report.checks["sample_pairs_with_unchanged_outputs"] = unchanged_outputs;
      if (changed_inputs > 0 && unchanged_outputs == changed_inputs)
        report.flags.push_back(
            flag("constant_output",
                 "the kernel's outputs were bit-identical from one timed sample to the next "
                 "although its "
                 "inputs changed every time: they were not computed from its inputs",
                 json::object{{"samples", changed_inputs}}));
    }
    if (report.speedup && *report.speedup > request_.excessive_speedup_threshold)
      report.flags.push_back(
          flag("excessive_speedup",
               "speedup " + format_ratio(*report.speedup) + " is above the threshold of " +
                   format_ratio(request_.excessive_speedup_threshold) +
                   ": worth a look before it is believed",
               json::object{{"speedup", *report.speedup},
                            {"threshold", request_.excessive_speedup_threshold}}));
    send_phase(protocol::Phase::profiled, json::value_from(report));
  }

  // The times a runner reports are measured in a process that runs user code, which could patch
  // that process's own memory to report less. Beside them: each side's wall time per sample as
  // the trusted worker measured it (SampleRun::wall_ms), and the speedup it bounds from below,
  // the reference's median over the candidate's median wall time, which no candidate can raise.
  void report_walls(const std::vector<Timed>& timed, protocol::ProfileReport& report) {
    json::object walls;
    double custom_wall = 0;
    for (const auto& t : timed) {
      const tensor::RuntimeStats stats = tensor::compute_stats(t.walls);
      walls[t.side->name] = json::object{
          {"median", stats.median}, {"min", stats.min}, {"percentile_95", stats.percentile_95}};
      if (t.side->name != "ref")
        custom_wall = stats.median;
    }
    report.sampling["wall_ms"] = std::move(walls);
    json::object paused;
    for (const auto& t : timed)
      if (t.side->name == "ref") // keyed by the side being timed, as it has always been
        paused[t.side->name] = json::object{{"processes_most", t.paused_most}, {"stops", t.stops}};
    if (!paused.empty())
      report.sampling["other_side_paused"] = std::move(paused);
    // Never above the speedup: a sample whose trace added work past the reply (its time then
    // exceeds the wall) already lowered that.
    if (report.ref && report.speedup && custom_wall > 0)
      report.speedup_floor = std::min(*report.speedup, report.ref->median / custom_wall);
  }

  // The NVTX range a side's launches run in, as the V2 server names them, so that an external
  // `ncu --nvtx --nvtx-include "{job_id}_custom/"` still finds a side's kernels.
  std::string nvtx_range(const Side& side) const {
    return job_.job_id + (side.name == "ref" ? "_original" : "_custom");
  }

  // After every timed sample, never while one is taken: each side that asked for device metrics
  // runs its launch again under the counter profiler, in its own runner, on the last sample's
  // inputs (worker/metrics/). What its process sends back is data for the report, never for the
  // verdict, and a side whose counters cannot be read gets the reason instead; the job is
  // otherwise unaffected.
  void collect_device_metrics(std::vector<Timed>& timed, protocol::ProfileReport& report) {
    constexpr int64_t kMaxKernels = 64;
    for (auto& t : timed) {
      const auto wanted = request_.device_metrics_for(*t.side->code);
      if (!wanted)
        continue;
      const std::string key = t.side->name == "ref" ? "ref" : "custom";
      // The profiler replays each kernel once per pass, about twenty passes for every section,
      // with its memory saved and restored around them. A job that could not finish them inside
      // its timeout keeps its timing and says so.
      const double median_ms = tensor::compute_stats(t.samples).median;
      const double left_ms = request_.timeout_s * 1000 - (ms_since(started_) - device_wait_ms_);
      // (Plus the profiler's setup, and up to 5 s waiting for counters another process holds.)
      if (median_ms * 40 + 10000 > left_ms) {
        report.device_metrics[key] = metrics::unavailable_report(
            "not collected: about 40 replays of the launch (" + format_ratio(median_ms) +
            " ms each) would not fit in the " + format_ratio(left_ms / 1000) +
            " s left of the job's timeout");
        continue;
      }
      json::array names;
      for (const auto& m : metrics::metrics_for(*wanted))
        names.emplace_back(m);
      json::object ask;
      ask["type"] = runner_msg::kMetrics;
      ask["binding"] = t.binding.id;
      ask["metrics"] = std::move(names);
      ask["max_kernels"] = kMaxKernels;
      ask["expected_ms"] = median_ms;
      const auto unreadable = [](const std::exception& e) {
        return metrics::unavailable_report(
            std::string("the kernel's process sent counters keval cannot read: ") + e.what());
      };
      json::object side_report;
      try {
        json::object reply = t.side->runner->call(std::move(ask), "collecting device metrics");
        if (!RunnerClient::ok(reply)) {
          const RunnerError e = error_of(*t.side, reply);
          side_report = metrics::unavailable_report(
              "the kernel failed while its counters were collected: " + e.message);
        } else if (const json::value* why = reply.if_contains("unavailable")) {
          side_report = metrics::unavailable_report(
              why->is_string() ? std::string(why->get_string()).substr(0, 1000)
                               : std::string("the kernel's process gave no reason"));
        } else {
          side_report = metrics::build_report(
              *wanted, device_counters_from_json(detail::object_field(reply, "counters")),
              nvtx_range(*t.side));
        }
      } catch (const RunnerFailure& e) {
        side_report = metrics::unavailable_report(
            std::string("the kernel's process failed while its counters were collected: ") +
            e.what());
      } catch (const std::invalid_argument& e) {
        side_report = unreadable(e);
      } catch (const detail::WireError& e) {
        side_report = unreadable(e);
      }
      report.device_metrics[key] = std::move(side_report);
    }
  }

  // `hardware_time` (request/model.hpp): after the timed samples, each side's runner runs its
  // launch again, `runs` times, each after an L2 flush and with the other side's processes
  // stopped as for a sample, and reads each kernel's gpu__time_duration from the hardware's
  // counters: ncu's Duration, taken as ncu takes it (engine.hpp's time_kernels). What the runner
  // sends is bounded and reported beside the kernel time, never used for the verdict: it comes
  // from the process that runs the side's code. Where it cannot be read the side says why.
  void collect_hardware_times(std::vector<Timed>& timed, protocol::ProfileReport& report) {
    const int64_t runs = request_.hardware_time_runs;
    if (runs <= 0)
      return;
    constexpr int64_t kMaxKernels = 64;
    std::optional<double> ref_ms, custom_ms;
    for (auto& t : timed) {
      json::object measured = [&]() -> json::object {
        const double median_ms = tensor::compute_stats(t.samples).median;
        const double left_ms = request_.timeout_s * 1000 - (ms_since(started_) - device_wait_ms_);
        // Each run is a flush, the launch and the profiler's set-up around it; plus up to 5 s
        // waiting for counters another process holds.
        if ((median_ms + 5) * static_cast<double>(runs) * 2 + 6000 > left_ms)
          return metrics::unavailable_report(
              "not measured: " + std::to_string(runs) + " runs of the launch (" +
              format_ratio(median_ms) + " ms each) would not fit in the " +
              format_ratio(left_ms / 1000) + " s left of the job's timeout");
        json::object ask;
        ask["type"] = runner_msg::kHardwareTime;
        ask["binding"] = t.binding.id;
        ask["runs"] = runs;
        ask["max_kernels"] = kMaxKernels;
        try {
          isolation::PausedProcesses others = pause_other_sides(t);
          json::object reply = t.side->runner->call(std::move(ask), "timed by the hardware");
          others = {};
          if (!RunnerClient::ok(reply))
            return metrics::unavailable_report("the kernel failed while it was timed by the "
                                               "hardware: " +
                                               error_of(*t.side, reply).message);
          if (const json::value* why = reply.if_contains("unavailable"))
            return metrics::unavailable_report(
                why->is_string() ? std::string(why->get_string()).substr(0, 1000)
                                 : std::string("the kernel's process gave no reason"));
          return hardware_time_report(detail::array_field(reply, "runs"), runs, kMaxKernels,
                                      t.side->name == "ref" ? ref_ms : custom_ms);
        } catch (const KernelFailure& e) {
          return metrics::unavailable_report(
              "not measured: the other side's processes could not be stopped (" + e.error.message +
              ")");
        } catch (const RunnerFailure& e) {
          return metrics::unavailable_report(
              std::string("the kernel's process failed while it was timed by the hardware: ") +
              e.what());
        } catch (const detail::WireError& e) {
          return metrics::unavailable_report(
              std::string("the kernel's process sent hardware times keval cannot read: ") +
              e.what());
        }
      }();
      json::value& side = report.device_work[t.side->name];
      if (!side.is_object())
        side = json::object{};
      side.as_object()["hardware_time"] = std::move(measured);
    }
    if (ref_ms && custom_ms && *custom_ms > 0)
      report.device_work["hardware_speedup"] = *ref_ms / *custom_ms;
  }

  // A side's hardware_time from its runner's runs (each an array of its kernels' nanoseconds):
  // every run's total, in ms, summarised as the kernel time is. `median_ms` gets the median.
  static json::object hardware_time_report(const json::array& runs, int64_t asked,
                                           int64_t max_kernels, std::optional<double>& median_ms) {
    if (runs.empty() || static_cast<int64_t>(runs.size()) > asked)
      throw detail::WireError("'runs' holds " + std::to_string(runs.size()) + " runs, " +
                              std::to_string(asked) + " were asked for");
    std::vector<double> totals;
    int64_t fewest = std::numeric_limits<int64_t>::max(), most = 0;
    for (const json::value& run : runs) {
      const json::array* kernels = run.if_array();
      if (kernels == nullptr || static_cast<int64_t>(kernels->size()) > max_kernels)
        throw detail::WireError("a run is not an array of at most " + std::to_string(max_kernels) +
                                " kernel times");
      double total_ns = 0;
      for (const json::value& k : *kernels) {
        const double ns = k.is_number() ? k.to_number<double>() : -1;
        // An hour a kernel is past any job's timeout: what is above it is not a time.
        if (!std::isfinite(ns) || ns < 0 || ns > 3.6e12)
          throw detail::WireError("a kernel time is not a number of nanoseconds");
        total_ns += ns;
      }
      totals.push_back(total_ns / 1e6);
      fewest = std::min<int64_t>(fewest, static_cast<int64_t>(kernels->size()));
      most = std::max<int64_t>(most, static_cast<int64_t>(kernels->size()));
    }
    const tensor::RuntimeStats stats = tensor::compute_stats(totals);
    median_ms = stats.median;
    json::object report{{"available", true},
                        {"median", stats.median},
                        {"min", stats.min},
                        {"max", stats.max},
                        {"count", stats.count},
                        {"kernels", most},
                        {"method", "cupti_range_profiler"},
                        {"metric", "gpu__time_duration.sum"}};
    if (fewest != most)
      report["kernels_fewest"] = fewest;
    return report;
  }

  // Both sides timed by one method (seed 003's point): when one side's launch could not be
  // captured into a graph, the other's timer is made again without capture, so neither side is
  // spared the launch overhead the other pays. Each side's `method` says what was used.
  void same_method(std::vector<Timed>& timed) {
    bool all_graphs = true;
    for (const auto& t : timed)
      all_graphs = all_graphs && t.method == "cuda_graph";
    if (all_graphs)
      return;
    for (auto& t : timed) {
      if (t.method != "cuda_graph")
        continue;
      prepare_timer(t, false);
      t.matched_other_side = true;
    }
  }

  // Has the side's runner make (or make again) the timer of its binding; `capture` false asks
  // for events even where a graph could be captured.
  // The runner's reply (its `host_ms` account is a diagnostic of the caller's).
  json::object prepare_timer(Timed& t, bool capture) {
    json::object timer;
    timer["type"] = runner_msg::kTimer;
    timer["binding"] = t.binding.id;
    if (!capture)
      timer["capture"] = false;
    if (!request_.device_trace)
      timer["trace"] = false;
    json::object reply = call(*t.side, std::move(timer), "preparing its timing");
    expect_ok(*t.side, reply, "preparing its timing");
    t.method = detail::string_field(reply, "method");
    // Why its process traces nothing: a sentence of its own, kept short.
    const json::value* untraced = reply.if_contains("untraced");
    t.untraced = untraced != nullptr && untraced->is_string()
                     ? std::string(untraced->get_string()).substr(0, 500)
                     : "";
    return reply;
  }

  // Whether the request's noise target is met by every side after `taken` samples.
  bool settled(const std::vector<Timed>& timed, int64_t taken) const {
    if (!request_.max_noise_percent || taken < request_.min_samples)
      return false;
    for (const auto& t : timed)
      if (t.noise.percent() > *request_.max_noise_percent)
        return false;
    return true;
  }

  // Writes a new trial's inputs into a side's bound buffers (and poisons its outputs). Inputs
  // whose shape or dtype changed between trials are the provider's fault.
  void refresh(Timed& t, const InputSet& inputs) {
    try {
      t.binding.binder->refresh(*engine_, inputs);
    } catch (const std::invalid_argument& e) {
      Side& provider = ref() != nullptr ? *ref() : custom();
      throw KernelFailure{provider.name, error_json("inconsistent_inputs", e.what())};
    }
  }

  // The candidate's outputs of timed sample `i` against the reference's for the same inputs.
  void check_sample(int64_t i, int64_t samples, const SampleRun& expected,
                    const SampleRun& actual) {
    const std::string problem = compare_outputs(expected.launched, actual.launched);
    if (!problem.empty())
      throw KernelFailure{"custom",
                          error_json("mismatch", "timed sample " + std::to_string(i + 1) + " of " +
                                                     std::to_string(samples) + ": " + problem)};
  }

  // Whether any generated input differs between two trials (inputs given as data never do).
  bool inputs_differ(const InputSet& a, const InputSet& b) {
    const std::vector<const Tensor*> x = input_tensors(a), y = input_tensors(b);
    for (size_t k = 0; k < x.size() && k < y.size(); ++k)
      if (x[k]->dtype() != y[k]->dtype() || x[k]->shape() != y[k]->shape() ||
          !engine_->same_bytes(x[k]->dl(), y[k]->dl()))
        return true;
    return false;
  }

  bool same_outputs(const std::vector<std::unique_ptr<Tensor>>& before, const Launched& now) {
    if (before.empty() || before.size() != now.copies.size())
      return false;
    for (size_t k = 0; k < before.size(); ++k) {
      const Tensor& x = *before[k];
      const Tensor& y = *now.copies[k];
      if (x.dtype() != y.dtype() || x.shape() != y.shape() || !engine_->same_bytes(x.dl(), y.dl()))
        return false;
    }
    return true;
  }

  // One timed run, taken in the side's runner, and its outputs. Outputs are poisoned before it
  // (so no run can reuse an earlier result), outside the timed region. The time comes from a
  // process that runs user code, so it is bounded here: finite, not negative, and no longer than
  // the wall time the trusted worker itself measured around the request. A traced side's device
  // work outside the timed window (worker/engine/device_work.hpp) is added to the sample: the
  // events did not see it, and it was the kernel's work all the same. `budget` bounds the
  // bytes of the outputs it may return (kUnchecked: they are not wanted).
  SampleRun sample(Timed& t, uint64_t budget) {
    RemoteBinding& binding = t.binding;
    Side& side = *binding.side;
    const auto preparing = Clock::now();
    binding.binder->poison_outputs(*engine_);
    engine_->synchronize();
    json::object ask;
    ask["type"] = runner_msg::kSample;
    ask["binding"] = binding.id;
    hold_pause_for(t);
    const auto start = Clock::now();
    json::object reply = call(side, std::move(ask), "being timed");
    const double wall_ms = ms_since(start);
    spent_.calls += wall_ms;
    spent_.runs += ms_since(preparing);
    expect_ok(side, reply, "being timed");
    add_runner_account(reply, wall_ms, runner_msg::sample_account::kAll, spent_.in_runner);
    SampleRun run;
    run.ms = detail::number_field(reply, "ms");
    if (!std::isfinite(run.ms) || run.ms < 0 || run.ms > wall_ms)
      throw KernelFailure{
          side.name, error_json("implausible_timing",
                                side.name + " kernel's process reported a sample of " +
                                    std::to_string(run.ms) + " ms around which keval measured " +
                                    std::to_string(wall_ms) + " ms")};
    if (t.untraced.empty())
      run.activities = read_activities(side, reply, t.unread.size() + 1);
    const auto copying = Clock::now();
    if (side.returns_outputs()) {
      if (reply.contains("outputs")) // kUnchecked: mapped, not copied
        run.launched.copies =
            copy_from_runner(side, reply, "outputs", "returning its timed outputs", budget);
    } else if (budget != kUnchecked) {
      for (const keval_dl_tensor* view : binding.binder->output_views())
        run.launched.copies.push_back(engine_->clone(*view));
    }
    for (const auto& copy : run.launched.copies)
      run.launched.outputs.push_back(&copy->dl());
    spent_.outputs += ms_since(copying);
    run.wall_ms = ms_since(start);
    return run;
  }

  // Where a sample call's time went inside the runner (runner_msg::sample_account), summed into
  // sampling.time_ms.runs_calls_in_runner. A process of user code says it, so it is a diagnostic
  // that decides nothing, and is taken only for those names and as far as the call's own wall time
  // allows. The same for a timer call (Timer::kSetupParts, into setup_parts).
  template <size_t N>
  static void add_runner_account(const json::object& reply, double wall_ms,
                                 const char* const (&parts)[N],
                                 std::map<std::string, double>& into) {
    const json::value* account = reply.if_contains("host_ms");
    if (account == nullptr || !account->is_object())
      return;
    for (const char* part : parts)
      if (const json::value* v = account->as_object().if_contains(part); v && v->is_number()) {
        const double ms = v->to_number<double>();
        if (std::isfinite(ms) && ms >= 0 && ms <= wall_ms)
          into[part] += ms;
      }
  }

  // Keeps every side but `t`'s stopped (pause_other_sides) from now until another side is timed
  // or asked anything (call) or the sampling ends (release_pause). Samples alternate ABBA, so a
  // stop lasts over two runs of one side instead of being made and undone around each: on the
  // H100 a torch runner's dozens of threads take about 1 ms to stop. The other side has nothing
  // to do in between (the trusted worker writes the next inputs, copies and checks outputs), and
  // a stopped process can start nothing meanwhile.
  void hold_pause_for(Timed& t) {
    if (held_ && held_->timed == t.side)
      return;
    release_pause();
    const auto pausing = Clock::now();
    isolation::PausedProcesses others = pause_other_sides(t);
    held_.emplace(HeldPause{t.side, std::move(others)});
    spent_.pausing += ms_since(pausing);
  }

  // Lets the held processes go on (SIGCONT), if any are held.
  void release_pause() {
    if (!held_)
      return;
    const auto resuming = Clock::now();
    held_.reset();
    spent_.pausing += ms_since(resuming);
  }

  // Stops the candidate's processes while the reference is timed (isolation/pause.hpp): its
  // runner tree, and the orphans this subreaper adopted that are not the reference's own (by uid,
  // where each runner has its own; every orphan where they share ours). Work a stopped process
  // queued on the GPU before it stopped still runs; it can queue no more. A candidate whose
  // processes cannot all be stopped fails: the reference's time could not be protected from it.
  //
  // Nothing is stopped while the candidate is timed: the reference is the grader's code, not the
  // adversary's, and its runner sits blocked on its channel between calls. Stopping it cost as
  // much as stopping the candidate (a torch runner has dozens of threads: about 1 ms a stop on
  // an idle H100, several under a batch's compiles) and protected nothing.
  isolation::PausedProcesses pause_other_sides(Timed& t) {
    if (t.side->name != "ref")
      return {};
    std::vector<pid_t> roots, runners;
    for (const auto& side : sides_) {
      if (side->runner == nullptr)
        continue;
      runners.push_back(side->runner->pid());
      if (side.get() != t.side)
        roots.push_back(side->runner->pid());
    }
    if (roots.empty())
      return {};
    // The timed runner's uid never changes: read once per side, not per sample.
    if (!t.runner_uid)
      t.runner_uid = uid_of(t.side->runner->pid());
    const std::optional<uid_t> timed_uid = *t.runner_uid;
    const bool own_uids = timed_uid && *timed_uid != ::getuid();
    const auto pause_orphan = [&](pid_t child) {
      if (std::find(runners.begin(), runners.end(), child) != runners.end())
        return false;
      return !own_uids || uid_of(child) != timed_uid;
    };
    auto paused = isolation::PausedProcesses::pause(roots, pause_orphan, kPauseWaitMs);
    t.paused_most = std::max(t.paused_most, paused.size());
    ++t.stops;
    if (!paused.failure().empty())
      throw KernelFailure{"custom",
                          error_json("not_paused", "custom kernel's processes could not be stopped "
                                                   "while the reference was timed: " +
                                                       paused.failure())};
    return paused;
  }

  // The traced samples' summaries of their device work, as the side's runner sent them: none
  // yet, or exactly `unread` (its unread samples and this one). A runner whose trace lost a
  // sample (its markers missing: something in the process turned tracing off or fed it) fails
  // the side: its time cannot be vouched for.
  std::vector<SampleActivity> read_activities(const Side& side, const json::object& reply,
                                              size_t unread) {
    const auto lost = [&](const std::string& why) {
      return KernelFailure{side.name,
                           error_json("device_trace_lost", side.name +
                                                               " kernel's device trace did not "
                                                               "cover a timed sample: " +
                                                               why)};
    };
    if (const json::value* why = reply.if_contains("activity_lost"))
      throw lost(why->is_string() ? std::string(why->get_string()).substr(0, 500)
                                  : "its process said so");
    const json::value* activities = reply.if_contains("activities");
    if (activities == nullptr)
      return {};
    const auto malformed = [&](const std::string& what) {
      return KernelFailure{side.name, error_json(kProcessFailed, side.name +
                                                                     " kernel's process sent a "
                                                                     "malformed trace: " +
                                                                     what)};
    };
    if (!activities->is_array() || activities->as_array().size() != unread)
      throw malformed("'activities' must list the " + std::to_string(unread) +
                      " samples not yet sent");
    std::vector<SampleActivity> out;
    try {
      for (const json::value& a : activities->as_array()) {
        if (!a.is_object())
          throw std::invalid_argument("activities[" + std::to_string(out.size()) +
                                      "] must be an object");
        out.push_back(sample_activity_from_json(a.as_object()));
      }
    } catch (const std::invalid_argument& e) {
      throw malformed(e.what());
    }
    return out;
  }

  // Each unread sample's device work, from `activities` (none: not yet): its busy time and
  // inventory, and the work outside its window added to its time. An empty list leaves them
  // unread.
  static void add_activities(Timed& t, std::vector<SampleActivity> activities) {
    if (activities.empty())
      return;
    bool moved = false;
    for (size_t k = 0; k < activities.size(); ++k) {
      const std::optional<size_t> index = t.unread[k];
      if (!index) // a warm-up run's
        continue;
      const SampleActivity& a = activities[k];
      t.kernel_samples.push_back(a.busy_ms);
      t.work.add(a);
      if (a.outside_ms > 0) {
        ++t.samples_with_outside_work;
        t.outside_ms += a.outside_ms;
        t.samples[*index] += a.outside_ms;
        moved = true;
      }
    }
    t.unread.clear();
    if (moved) { // the noise of the times as they are now
      t.noise = Noise{};
      for (double ms : t.samples)
        t.noise.add(ms);
    }
  }

  // Asks each traced side's runner for the device work of its samples not yet sent.
  void read_unread(std::vector<Timed>& timed) {
    for (auto& t : timed) {
      if (!t.untraced.empty() || t.unread.empty())
        continue;
      json::object ask;
      ask["type"] = runner_msg::kActivity;
      ask["binding"] = t.binding.id;
      const json::object reply = call(*t.side, std::move(ask), "reading its device trace");
      expect_ok(*t.side, reply, "reading its device trace");
      std::vector<SampleActivity> activities = read_activities(*t.side, reply, t.unread.size());
      if (activities.empty())
        throw KernelFailure{t.side->name,
                            error_json(kProcessFailed, t.side->name +
                                                           " kernel's process sent no trace of "
                                                           "its samples although its timer "
                                                           "traces")};
      add_activities(t, std::move(activities));
    }
  }

  // The SM clock after every timed sample (measured by the trusted worker on the device: out of
  // the kernel's reach), and how many samples ran while it was below 75 % of the rated maximum.
  class ClockWatch {
  public:
    void read(Engine& engine) {
      const std::optional<Engine::SmClock> clock = engine.read_sm_clock();
      if (!clock)
        return;
      readings_.push_back(clock->mhz);
      max_mhz_ = clock->max_mhz;
      if (clock->max_mhz > 0 && clock->mhz < kThrottledBelow * clock->max_mhz)
        ++throttled_;
    }
    void report(json::object& sampling) const {
      if (readings_.empty()) {
        sampling["sm_clock"] = "not measured: no CUDA device";
        return;
      }
      std::vector<double> sorted = readings_;
      std::sort(sorted.begin(), sorted.end());
      sampling["throttled_samples"] = throttled_;
      sampling["sm_clock_mhz"] = json::object{
          {"min", sorted.front()}, {"median", sorted[sorted.size() / 2]}, {"max_rated", max_mhz_}};
    }

  private:
    static constexpr double kThrottledBelow = 0.75;
    std::vector<double> readings_;
    double max_mhz_ = 0;
    int64_t throttled_ = 0;
  };

  // Each side's device work over its timed samples (report.device_work), and the flags it
  // raises: work_after_completion, library_only.
  void report_device_work(const std::vector<Timed>& timed, protocol::ProfileReport& report) {
    std::optional<double> ref_kernel, custom_kernel;
    for (const auto& t : timed) {
      json::object side;
      side["traced"] = t.untraced.empty();
      if (!t.untraced.empty()) {
        side["reason"] = t.untraced;
        report.device_work[t.side->name] = std::move(side);
        continue;
      }
      const tensor::RuntimeStats stats = tensor::compute_stats(t.kernel_samples);
      side["kernel_time"] =
          json::object{{"mean", stats.mean},    {"median", stats.median}, {"min", stats.min},
                       {"max", stats.max},      {"std", stats.std},       {"count", stats.count},
                       {"method", "cupti_busy"}};
      side["work"] = t.work.to_json();
      side["outside"] =
          json::object{{"samples", t.samples_with_outside_work}, {"total_ms", t.outside_ms}};
      (t.side->name == "ref" ? ref_kernel : custom_kernel) = stats.median;
      report.device_work[t.side->name] = std::move(side);
      if (t.side->name != "custom")
        continue;
      if (t.samples_with_outside_work > 0)
        report.flags.push_back(flag(
            "work_after_completion",
            std::to_string(t.samples_with_outside_work) + " of " +
                std::to_string(t.samples.size()) +
                " timed samples had the kernel's device work running outside the timed window "
                "(on a stream or thread the timing events did not cover); it was added to "
                "those samples' times",
            json::object{{"samples", t.samples_with_outside_work}, {"total_ms", t.outside_ms}}));
      library_only(t, report);
    }
    if (ref_kernel && custom_kernel && *custom_kernel > 0)
      report.device_work["kernel_speedup"] = *ref_kernel / *custom_kernel;
  }

  // The candidate's timed kernels against those its source defines: none of its own among them
  // means its work ran in libraries (aten, cuBLAS, ...). Not for the torch kernel type, whose
  // candidates are library code by design.
  void library_only(const Timed& t, protocol::ProfileReport& report) {
    if (custom_code().kernel_type == "torch" || t.work.empty())
      return;
    const std::vector<std::string> own = checks::defined_kernel_names(custom_code().source_code);
    if (t.work.has_kernel_named(own))
      return;
    json::array defined, timed_kernels;
    for (const auto& name : own)
      if (defined.size() < 16)
        defined.emplace_back(name);
    for (const auto& w : t.work.to_json())
      if (w.as_object().at("kind") == "kernel" && timed_kernels.size() < 8)
        timed_kernels.push_back(w.as_object().at("name"));
    if (timed_kernels.empty())
      return; // copies or memsets only: nothing says whose kernels they would have been
    report.flags.push_back(
        flag("library_only",
             own.empty() ? "the candidate's source defines no kernel of its own; every kernel "
                           "it ran while timed came from a library"
                         : "none of the kernels the candidate ran while timed is one its source "
                           "defines; they came from libraries",
             json::object{{"timed_kernels", std::move(timed_kernels)},
                          {"defined_kernels", std::move(defined)}}));
  }

  // Runs the kernel, on a fresh trial's inputs each time, until consecutive timings settle
  // (relative change of the running median of the last 5 samples under 5 %), at least 3 and at
  // most 100 runs or 2 s. Outputs are not checked here: nothing of the warm-up is reported.
  int64_t warm_up(Timed& t, uint64_t& trial) {
    std::vector<double> recent;
    const auto start = Clock::now();
    double previous_median = -1;
    int64_t runs = 0;
    while (runs < 100 && ms_since(start) < 2000) {
      const auto making = Clock::now();
      const InputSet inputs = make_inputs(trial++);
      refresh(t, inputs);
      spent_.inputs += ms_since(making);
      SampleRun run = sample(t, kUnchecked);
      recent.push_back(run.ms);
      if (t.untraced.empty()) {
        t.unread.emplace_back(std::nullopt);
        add_activities(t, std::move(run.activities));
      }
      ++runs;
      if (recent.size() >= 5) {
        std::vector<double> last(recent.end() - 5, recent.end());
        std::nth_element(last.begin(), last.begin() + 2, last.end());
        const double median = last[2];
        if (runs >= 3 && previous_median > 0 &&
            std::abs(median - previous_median) <= 0.05 * previous_median)
          break;
        previous_median = median;
      }
    }
    return runs;
  }

  void send_profile_failure(const KernelFailure& failure) {
    protocol::ProfileReport report;
    report.failed_side = failure.side;
    report.error = failure.error;
    send_phase(protocol::Phase::profiled, json::value_from(report));
  }

  // ---------------------------------------------------------------------------------------
  // Messages

  void fail_validation(protocol::ErrorInfo error) {
    protocol::ValidationReport report;
    report.error = std::move(error);
    send_phase(protocol::Phase::validated, json::value_from(report));
  }

  void send_phase(protocol::Phase phase, json::value report) {
    std::fflush(stdout); // user output printed so far belongs before this phase in the logs
    channel_.send(protocol::to_frame(protocol::PhaseMessage{phase, std::move(report.as_object())}));
  }

  void progress(const char* phase, int64_t done, int64_t total) {
    channel_.send(protocol::to_frame(protocol::Progress{phase, done, total}));
  }

  void finish() {
    std::fflush(stdout);
    channel_.send(protocol::to_frame(
        protocol::Done{timeline_, runners_.device_warm_up(), started_unix_ms_, device_memory_}));
  }

  protocol::BlockingChannel& channel_;
  const JobSpec& job_;
  const EvalRequest& request_;
  RunnerSource& runners_;
  std::vector<std::unique_ptr<Side>> sides_; // ref first (if any), custom last
  // Declared after the sides, so destroyed before them: tensors go before the engine.
  std::unique_ptr<Engine> engine_;
  // Each runner's shared buffers, mapped (copy_from_runner). Destroyed before the engine (and
  // released in stop_runners before it is reset).
  std::map<const Side*, detail::RunnerBuffers> buffers_;
  // Each side's arguments in validation (trial_binding), handed on to profiling (bind_for_timing).
  // Destroyed before the engine, like buffers_.
  std::map<const Side*, RemoteBinding> trial_bindings_;
  json::object granted_;
  bool device_quiet_ = true; // the grant's quiet, until the host's device_quiet (wait_until_quiet)
  std::string timed_gpu_;    // wish_to_time: the CUDA GPU's PCI bus id, or empty
  std::optional<TimingWish> timing_wish_; // wish_to_time, until stop_runners
  std::optional<DeviceTurn> timing_turn_; // take_timing_turn, until stop_runners
  // A warm-up's look at the wish takes its file for a moment: a few tries cover it.
  static constexpr std::chrono::milliseconds kTimingWishPatience{50};
  bool takes_handover_ = false; // the grant's: the host takes a device_handover
  // The grant's device verifier, if it named one; whether this job's engine is the verifier's
  // (metadata.device.device_verifier), for jobs of a daemon that runs verifiers.
  std::optional<verifier::VerifierAddress> verifier_;
  json::object verifier_note_;
  static constexpr std::chrono::milliseconds kVerifierPatience{2000};
  // The GPU's memory as the job ended (hand_over_device), for `done`.
  std::optional<protocol::DeviceMemoryReading> device_memory_;
  int64_t next_binding_ = 1;
  int64_t companion_seq_ = 0;
  Clock::time_point started_ = Clock::now();
  double started_unix_ms_ = unix_ms(); // started_ on the real-time clock (Done::origin_unix_ms)
  double device_wait_ms_ = 0; // waiting for the grant, which the job's timeout does not count
  json::object timeline_;     // step -> ms since started_ (step())
  // The profiling phase's wall time outside the sample runs' own (sampling.time_ms). The parts
  // from `inputs` on count the warm-up's runs and the timed samples alike.
  struct {
    double setup = 0;                           // the first inputs, each side's arguments and timer
    double setup_inputs = 0;                    // of setup: the first inputs
    std::map<std::string, double> setup_timers; // of setup: each side's timer, by side
    // of setup_timers: the runner's account of its timer (Timer::kSetupParts), by side
    std::map<std::string, std::map<std::string, double>> setup_in_runner;
    double warm_up = 0; // the warm-up runs (SideTiming::warmup_runs), their inputs included
    double inputs = 0;  // making each sample's fresh inputs and writing them into the bindings
    double runs = 0;    // poisoning outputs and the runners' sample calls, round trip
    double pausing = 0; // of runs (or of inputs, where a held stop ends to ask the reference
                        // for them): stopping the other side's processes, letting them go on
    double calls = 0;   // of runs: from the sample request to its reply (the run, traced)
    std::map<std::string, double> in_runner; // of calls: the runners' own account of them
    double outputs = 0;                      // reading back and copying each sample's outputs
    double checks = 0;                       // comparing outputs and checking inputs untouched
  } spent_;
  // The other sides' processes, stopped while `timed` is sampled (hold_pause_for).
  struct HeldPause {
    const Side* timed = nullptr;
    isolation::PausedProcesses others;
  };
  std::optional<HeldPause> held_;
#ifdef KEVAL_HAVE_CUDA
  std::future<CudaAvailability> cuda_probe_;
  EngineOpener opener_;
#endif
  TrialEvidence evidence_;
  std::string cpu_priority_; // bring_runners_forward's account
  bool custom_layout_known_ = false;
  // What the candidate's outputs may take (output_budget), from the reference's in validation.
  uint64_t custom_output_budget_ = kWithoutReference;
  int cuda_arch_ = job_.cuda_arch; // 0 until known
  std::unique_ptr<ExtensionBuilds> extension_builds_;
  bool cuda_usable_ = false;
  std::string cuda_reason_;
};

} // namespace

JobSpec parse_job(const json::object& frame) {
  const protocol::JobFrame parsed = protocol::parse_job_frame(frame);
  JobSpec job;
  job.job_id = parsed.job_id;
  const json::value request(parsed.request);
  const auto mode =
      parsed.mode == "compare" ? EvalRequest::Mode::compare : EvalRequest::Mode::evaluate;
  try {
    job.request = request::parse_request(request, mode, {}, request::TensorDataDecoding::decode);
  } catch (const request::RequestError& e) {
    // The host checked all it could without inflating (request/parse.hpp); data that does not
    // inflate to its tensor's size is the request's fault, reported as the job's result.
    job.request = request::parse_request(request, mode);
    job.input_data_error = InputDataError{e.path(), e.what()};
  }
  for (const auto& [type, path] : parsed.plugins)
    job.plugins[type] = path;
  job.work_dir = parsed.work_dir;
  job.cuda_arch = static_cast<int>(parsed.cuda_arch);
  job.seed = parsed.seed;
  job.timeout_ms = parsed.timeout_ms;
  job.device_verifier = parsed.device_verifier;
  return job;
}

void run_pipeline(protocol::BlockingChannel& channel, const JobSpec& job, RunnerSource& runners) {
  Pipeline(channel, job, runners).run();
}

} // namespace keval::worker
