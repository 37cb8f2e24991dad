#include "worker/pipeline/pipeline.hpp"

#include "common/log.hpp"
#include "protocol/job_contract.hpp"
#include "request/parse.hpp"
#include "tensor/generate.hpp"
#include "tensor/stats.hpp"
#include "worker/engine/detail/shared_host_memory.hpp"
#include "worker/engine/detail/tensor_bytes.hpp"
#include "worker/engine/engine.hpp"
#include "worker/isolation/isolation.hpp"
#include "worker/isolation/sandbox.hpp"
#include "worker/pipeline/arguments.hpp"
#include "worker/pipeline/plugin_loader.hpp"
#include "worker/runner/detail/wire.hpp"
#include "worker/runner/runner_client.hpp"
#include "worker/runner/runner_protocol.hpp"

#ifdef KEVAL_HAVE_CUDA
#include "worker/cuda/cuda_engine.hpp"
#include "worker/cuda/engine_opener.hpp"
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
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
    step("runners started");
    // Only a job that needs CUDA touches the driver: cuInit takes a good part of a second and is
    // serialised in the driver across processes, so a CPU job on a GPU machine that initialised it
    // anyway would cost every other job its turn (the soak's CPU jobs ran at 3 jobs/s there).
    if (needs_cuda()) {
#ifdef KEVAL_HAVE_CUDA
      cuda_probe_ = std::async(std::launch::async, probe_cuda);
      opener_.start(); // this process's device, opened while the probe runs and the sides compile
#endif
      probe_cuda_once();
      step("CUDA probed");
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
    // The runners open their contexts and bind while this process opens its own: side by side.
    const std::vector<int64_t> binding = send_binds();
    engine_ = open_engine();
    step("engine open");
    if (!engine_ || !finish_binds(binding))
      return;
    step("bound");
    if (validate()) {
      step("validated");
      profile();
      step("profiled");
    }
  }

  // Where a job's time goes inside the worker, for KEVAL_LOG_LEVEL=debug.
  void step(const char* what) {
    spdlog::debug("job {}: {} at {:.1f} ms", job_.job_id, what, ms_since(started_));
  }

  // Every process the job started ends before the host hears `done`: the runners, and whatever
  // their user code left behind (setsid, double forks), which was reparented to us.
  //
  // A process with a device context takes tens of milliseconds to die (the driver tears the
  // context down), so the runners are all killed first, this process releases its own context
  // while they die, and only then are they reaped.
  void stop_runners() {
    step("stopping");
    for (auto& side : sides_)
      if (side->runner)
        side->runner->kill();
    engine_.reset();
    for (auto& side : sides_)
      if (side->runner)
        side->runner->stop();
    isolation::kill_descendants();
    step("every process of the job ended");
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
    // A runner writes only its own directory (its sandbox), so that is the plugin's work_dir.
    const int64_t cpu_seconds =
        job_.timeout_ms > 0
            ? (job_.timeout_ms / 1000 + 1) *
                  std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()))
            : 0;
    for (auto& side : sides_) {
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
    channel_.send(protocol::to_frame(need));

    const protocol::Grant grant = protocol::parse_grant(channel_.receive());
    if (!grant.error.empty()) {
      fail_validation(error_json("no_device", grant.error));
      return false;
    }
    granted_ = grant.device;
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
#endif
    if (type == "cpu")
      return make_cpu_engine();
#ifdef KEVAL_HAVE_CUDA
    if (type == "cuda") {
      try {
        return make_cuda_engine(index);
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

  // Each runner opens its own context on the granted device and binds its kernel there.
  std::vector<int64_t> send_binds() {
    std::vector<int64_t> pending;
    for (auto& side : sides_) {
      json::object bind;
      bind["type"] = runner_msg::kBind;
      bind["device"] = granted_;
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
    report.device = engine_->describe();
    report.tolerance = {{"atol", request_.tolerance.atol}, {"rtol", request_.tolerance.rtol}};
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
    send_phase(protocol::Phase::validated, json::value_from(report));
    return true;
  }

  json::object run_validation_trial(uint64_t trial) {
    InputSet inputs = make_inputs(trial);
    json::object t;
    t["trial"] = trial;
    Side* reference = ref();
    std::optional<Launched> expected;
    if (reference != nullptr)
      expected = launch_checked(*reference, inputs, kUnlimited);
    Launched actual = launch_checked(custom(), inputs, output_budget(expected));
    if (!expected) {
      t["passed"] = true;
      t["outputs"] = actual.outputs.size();
      return t;
    }
    json::array comparisons;
    bool passed = true;
    std::string problem;
    if (expected->outputs.size() != actual.outputs.size()) {
      passed = false;
      problem = "reference produced " + std::to_string(expected->outputs.size()) +
                " outputs, custom kernel produced " + std::to_string(actual.outputs.size());
    }
    const size_t n = std::min(expected->outputs.size(), actual.outputs.size());
    for (size_t i = 0; i < n; ++i) {
      auto cmp = engine_->compare(*expected->outputs[i], *actual.outputs[i], request_.tolerance);
      json::object c = tensor::to_json(cmp);
      c["output"] = i;
      c["summary"] = tensor::summary(cmp);
      if (!cmp.match && problem.empty())
        problem = "output " + std::to_string(i) + ": " + tensor::summary(cmp);
      passed = passed && cmp.match;
      comparisons.push_back(std::move(c));
    }
    t["passed"] = passed;
    if (!passed)
      t["problem"] = problem;
    t["comparisons"] = std::move(comparisons);
    return t;
  }

  // Launches one side on clones of the trial's inputs in its runner, waits, takes private copies
  // of its outputs (out of its reach before they are compared), and checks that its read-only
  // inputs are untouched. Throws KernelFailure.
  // `budget` bounds the bytes of the tensors the side may return (see output_budget).
  Launched launch_checked(Side& side, const InputSet& inputs, uint64_t budget) {
    RemoteBinding binding = bind_remote(side, inputs);
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
    if (auto modified = binding.binder->first_modified_input(*engine_))
      throw KernelFailure{side.name, error_json("input_modified", side.name +
                                                                      " kernel modified its input "
                                                                      "argument '" +
                                                                      *modified + "'")};
    return launched;
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

  // Private copies of the tensors a runner described under `key` and sent with its reply.
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
      for (const auto& handle : handles)
        if (__builtin_add_overflow(total, detail::checked_shared_bytes(handle), &total))
          total = UINT64_MAX;
      if (total > budget)
        throw unusable(std::to_string(total) + " bytes, more than the " + std::to_string(budget) +
                       " its outputs may take" +
                       (budget == kWithoutReference ? "" : " (twice the reference's)"));
      for (auto& handle : handles)
        copies.push_back(engine_->copy_shared(std::move(handle)));
    } catch (const KernelFailure&) {
      throw;
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
    ask["seed"] = tensor::trial_seed(job_.seed, trial);
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
      once["seed"] = tensor::trial_seed(job_.seed, trial);
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

  void profile() {
    const int64_t samples = request_.num_trials;
    InputSet inputs;
    try {
      inputs = make_inputs(0);
    } catch (const KernelFailure& failure) {
      send_profile_failure(failure);
      return;
    }
    struct Timed {
      Side* side;
      RemoteBinding binding;
      std::string method;
      std::vector<double> samples;
      int64_t warmup = 0;
    };
    std::vector<Timed> timed;
    try {
      for (auto& side : sides_) {
        Timed t{side.get(), bind_remote(*side, inputs), {}, {}, 0};
        json::object timer;
        timer["type"] = runner_msg::kTimer;
        timer["binding"] = t.binding.id;
        json::object reply = call(*side, std::move(timer), "preparing its timing");
        expect_ok(*side, reply, "preparing its timing");
        t.method = detail::string_field(reply, "method");
        timed.push_back(std::move(t));
      }
      for (auto& t : timed)
        t.warmup = warm_up(t.binding);
      for (int64_t i = 0; i < samples; ++i) {
        if (i % std::max<int64_t>(1, samples / 10) == 0)
          progress("profiling", i, samples);
        // Alternate which side goes first so neither always runs right after the other.
        for (size_t k = 0; k < timed.size(); ++k) {
          auto& t = timed[(static_cast<size_t>(i) + k) % timed.size()];
          t.samples.push_back(sample(t.binding));
        }
      }
    } catch (const KernelFailure& failure) {
      send_profile_failure(failure);
      return;
    } catch (const detail::WireError& e) {
      send_profile_failure(KernelFailure{"custom", error_json(kProcessFailed, e.what())});
      return;
    }
    progress("profiling", samples, samples);

    protocol::ProfileReport report;
    report.ok = true;
    report.method = timed.front().method;
    report.device = engine_->describe();
    for (auto& t : timed) {
      const tensor::RuntimeStats stats = tensor::compute_stats(t.samples);
      protocol::SideTiming timing{
          stats.mean,          stats.std,           stats.min,   stats.max, stats.median,
          stats.percentile_95, stats.percentile_99, stats.count, t.method,  t.warmup};
      (t.side->name == "ref" ? report.ref : report.custom) = timing;
    }
    if (report.ref && report.custom && report.custom->median > 0)
      report.speedup = report.ref->median / report.custom->median;
    send_phase(protocol::Phase::profiled, json::value_from(report));
  }

  // One timed run, taken in the side's runner. Outputs are poisoned before it (so no run can
  // reuse an earlier result), outside the timed region. The time comes from a process that runs
  // user code, so it is bounded here: finite, not negative, and no longer than the wall time the
  // trusted worker itself measured around the request.
  double sample(RemoteBinding& binding) {
    Side& side = *binding.side;
    binding.binder->poison_outputs(*engine_);
    engine_->synchronize();
    json::object ask;
    ask["type"] = runner_msg::kSample;
    ask["binding"] = binding.id;
    const auto start = Clock::now();
    json::object reply = call(side, std::move(ask), "being timed");
    const double wall_ms = ms_since(start);
    expect_ok(side, reply, "being timed");
    const double ms = detail::number_field(reply, "ms");
    if (!std::isfinite(ms) || ms < 0 || ms > wall_ms)
      throw KernelFailure{side.name,
                          error_json("implausible_timing",
                                     side.name + " kernel's process reported a sample of " +
                                         std::to_string(ms) + " ms around which keval measured " +
                                         std::to_string(wall_ms) + " ms")};
    return ms;
  }

  // Runs the kernel until consecutive timings settle (relative change of the running median of
  // the last 5 samples under 5 %), at least 3 and at most 100 runs or 2 s.
  int64_t warm_up(RemoteBinding& binding) {
    std::vector<double> recent;
    const auto start = Clock::now();
    double previous_median = -1;
    int64_t runs = 0;
    while (runs < 100 && ms_since(start) < 2000) {
      recent.push_back(sample(binding));
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
    channel_.send(protocol::to_frame(protocol::Done{}));
  }

  protocol::BlockingChannel& channel_;
  const JobSpec& job_;
  const EvalRequest& request_;
  RunnerSource& runners_;
  std::vector<std::unique_ptr<Side>> sides_; // ref first (if any), custom last
  // Declared after the sides, so destroyed before them: tensors go before the engine.
  std::unique_ptr<Engine> engine_;
  json::object granted_;
  int64_t next_binding_ = 1;
  int64_t companion_seq_ = 0;
  Clock::time_point started_ = Clock::now();
#ifdef KEVAL_HAVE_CUDA
  std::future<CudaAvailability> cuda_probe_;
  EngineOpener opener_;
#endif
  bool custom_layout_known_ = false;
  int cuda_arch_ = job_.cuda_arch; // 0 until known
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
  return job;
}

void run_pipeline(protocol::BlockingChannel& channel, const JobSpec& job, RunnerSource& runners) {
  Pipeline(channel, job, runners).run();
}

} // namespace keval::worker
