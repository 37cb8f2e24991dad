#include "worker/pipeline/pipeline.hpp"

#include "protocol/messages.hpp"
#include "request/parse.hpp"
#include "tensor/generate.hpp"
#include "tensor/stats.hpp"
#include "worker/engine/engine.hpp"
#include "worker/pipeline/arguments.hpp"
#include "worker/pipeline/plugin_loader.hpp"

#ifdef KEVAL_HAVE_CUDA
#include "worker/cuda/cuda_engine.hpp"
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
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

json::object error_json(const std::string& type, const std::string& message,
                        const std::string& details = {}) {
  json::object e;
  e["type"] = type;
  e["message"] = message;
  if (!details.empty())
    e["details"] = details;
  return e;
}

// A kernel failure while validating or profiling: the kernel's fault, reported as a result.
struct KernelFailure {
  std::string side;
  json::object error;
};

// One side of the job: the custom kernel, or the reference of a compare.
struct Side {
  std::string name; // "custom" or "ref"
  const request::KernelCode* code = nullptr;
  LoadedPlugin* plugin = nullptr;
  keval_kernel* kernel = nullptr;
  json::value info;

  ~Side() {
    if (kernel != nullptr)
      plugin->api().kernel_destroy(kernel);
  }
  bool returns_outputs() const { return plugin->has(KEVAL_CAP_RETURNS_OUTPUTS); }
};

class Pipeline {
public:
  Pipeline(protocol::BlockingChannel& channel, const JobSpec& job)
      : channel_(channel), job_(job), request_(job.request) {}

  void run() {
    load_plugins();
    if (needs_cuda())
      probe_cuda_once();
    if (!compile_all()) {
      finish();
      return;
    }
    engine_ = acquire_device();
    if (!engine_) {
      finish();
      return;
    }
    if (bind_all() && validate())
      profile();
    finish();
  }

private:
  // ---------------------------------------------------------------------------------------
  // Plugins and compilation (before any device is held)

  void load_plugins() {
    for (const auto* code : {request_.ref ? &*request_.ref : nullptr, &request_.kernel}) {
      if (code == nullptr)
        continue;
      auto it = job_.plugins.find(code->kernel_type);
      if (it == job_.plugins.end())
        throw std::runtime_error("job names no plugin for kernel_type '" + code->kernel_type + "'");
      auto& slot = plugins_[code->kernel_type];
      if (!slot)
        slot = std::make_unique<LoadedPlugin>(it->second);
      auto side = std::make_unique<Side>();
      side->name = code == &request_.kernel ? "custom" : "ref";
      side->code = code;
      side->plugin = slot.get();
      sides_.push_back(std::move(side));
    }
  }

  Side& custom() { return *sides_.back(); }

  // ---------------------------------------------------------------------------------------
  // CUDA availability: known before compiling, so the target architecture is right and a
  // missing GPU is reported without holding anything.

  bool needs_cuda() const {
    for (const auto& side : sides_)
      if (side->plugin->has(KEVAL_CAP_DEVICE_CUDA))
        return true;
    return false;
  }

  void probe_cuda_once() {
#ifdef KEVAL_HAVE_CUDA
    const CudaAvailability probe = probe_cuda();
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

  bool compile_all() {
    json::object result;
    bool all_ok = true;
    for (auto& side : sides_) {
      json::object entry = compile(*side);
      all_ok = all_ok && entry["ok"].as_bool();
      result[side->name] = std::move(entry);
    }
    result["ok"] = all_ok;
    send_phase(protocol::msg::kPhaseCompiled, std::move(result));
    return all_ok;
  }

  json::object compile(Side& side) {
    const auto start = Clock::now();
    const std::string metadata = json::serialize(side.code->metadata);
    const std::string io =
        side.code->io_json.is_null() ? std::string() : json::serialize(side.code->io_json);
    const auto dir = job_.work_dir / side.name;
    std::filesystem::create_directories(dir);
    const std::string dir_text = dir.string();

    keval_compile_args args{};
    args.struct_size = sizeof args;
    args.source_code = side.code->source_code.c_str();
    args.metadata_json = metadata.c_str();
    args.io_contract_json = io.empty() ? nullptr : io.c_str();
    args.work_dir = dir_text.c_str();
    args.cuda_arch = cuda_arch_;
    args.side = side.name.c_str();
    keval_compile_result out{};
    out.struct_size = sizeof out;
    PluginError error(side.plugin->api(), side.plugin->api().compile(&args, &out));

    json::object entry;
    entry["kernel_type"] = side.code->kernel_type;
    entry["time_ms"] = ms_since(start);
    if (error) {
      entry["ok"] = false;
      entry["error"] = error_json(error_code_name(error.code()), error.message(), error.details());
      return entry;
    }
    if (out.kernel == nullptr) {
      entry["ok"] = false;
      entry["error"] = error_json("internal_error", "plugin reported success but no kernel");
      return entry;
    }
    side.kernel = out.kernel;
    entry["ok"] = true;
    if (out.info_json != nullptr) {
      json::error_code ec;
      auto info = json::parse(out.info_json, ec);
      entry["info"] = ec ? json::value(out.info_json) : std::move(info);
    }
    return entry;
  }

  // ---------------------------------------------------------------------------------------
  // Device grant

  std::unique_ptr<Engine> acquire_device() {
    uint32_t common = KEVAL_CAP_DEVICE_CPU | KEVAL_CAP_DEVICE_CUDA;
    for (auto& side : sides_)
      common &= side->plugin->manifest().capabilities;
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
      return nullptr;
    }
    json::object need;
    need["type"] = protocol::msg::kNeedDevice;
    need["device_types"] = wanted;
    channel_.send(std::move(need));

    json::object grant = channel_.receive();
    if (grant.at("type").as_string() != protocol::msg::kGrant)
      throw std::runtime_error("expected a grant, got " + json::serialize(grant));
    if (const auto* error = grant.if_contains("error")) {
      fail_validation(error_json("no_device", json::value_to<std::string>(*error)));
      return nullptr;
    }
    const auto& device = grant.at("device").as_object();
    const std::string type = json::value_to<std::string>(device.at("type"));
    if (type == "cpu")
      return make_cpu_engine();
#ifdef KEVAL_HAVE_CUDA
    if (type == "cuda") {
      const int index = static_cast<int>(device.at("index").to_number<int64_t>());
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

  bool bind_all() {
    keval_device_args args{};
    args.struct_size = sizeof args;
    args.device = engine_->device();
    args.stream = engine_->stream();
    for (auto& side : sides_) {
      PluginError error(side->plugin->api(), side->plugin->api().bind_device(side->kernel, &args));
      if (error) {
        fail_validation(
            error_json(error_code_name(error.code()),
                       side->name + " kernel failed to bind to the device: " + error.message(),
                       error.details()));
        return false;
      }
    }
    return true;
  }

  // ---------------------------------------------------------------------------------------
  // Validation

  bool validate() {
    const bool correctness = ref() != nullptr;
    const int64_t trials = request_.num_correctness_trials;
    json::array trial_results;
    json::object result;
    result["mode"] = correctness ? "correctness" : "executable";
    result["device"] = engine_->describe();
    result["tolerance"] = {{"atol", request_.tolerance.atol}, {"rtol", request_.tolerance.rtol}};
    for (int64_t trial = 0; trial < trials; ++trial) {
      progress("validating", trial, trials);
      try {
        json::object t = run_validation_trial(static_cast<uint64_t>(trial));
        const bool passed = t["passed"].as_bool();
        const std::string problem =
            passed ? std::string() : json::value_to<std::string>(t["problem"]);
        trial_results.push_back(std::move(t));
        if (!passed) {
          result["ok"] = false;
          result["trials"] = std::move(trial_results);
          result["error"] =
              error_json("mismatch", "trial " + std::to_string(trial) + ": " + problem);
          send_phase(protocol::msg::kPhaseValidated, std::move(result));
          return false;
        }
      } catch (const KernelFailure& failure) {
        result["ok"] = false;
        result["failed_side"] = failure.side;
        result["trials"] = std::move(trial_results);
        result["error"] = failure.error;
        send_phase(protocol::msg::kPhaseValidated, std::move(result));
        return false;
      }
    }
    progress("validating", trials, trials);
    result["ok"] = true;
    result["trials"] = std::move(trial_results);
    send_phase(protocol::msg::kPhaseValidated, std::move(result));
    return true;
  }

  json::object run_validation_trial(uint64_t trial) {
    InputSet inputs = make_inputs(trial);
    json::object t;
    t["trial"] = trial;
    Side* reference = ref();
    std::optional<Launched> expected;
    if (reference != nullptr)
      expected = launch_checked(*reference, inputs);
    Launched actual = launch_checked(custom(), inputs);
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
      auto cmp = on_device(custom(), [&] {
        return engine_->compare(*expected->outputs[i], *actual.outputs[i], request_.tolerance);
      });
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

  // Launches one side on clones of the trial's inputs, waits, and checks that its read-only
  // inputs are untouched. Throws KernelFailure.
  Launched launch_checked(Side& side, const InputSet& inputs) {
    auto binder = std::make_unique<ArgumentBinder>(*engine_, side_contract(side),
                                                   side.code->io.has_value(), inputs);
    on_device(side, [&] { binder->poison_outputs(*engine_); });
    Launched launched = launch(side, *binder);
    launched.binder = std::move(binder); // the output views point into it
    synchronize(side);
    if (auto modified =
            on_device(side, [&] { return launched.binder->first_modified_input(*engine_); }))
      throw KernelFailure{side.name, error_json("input_modified", side.name +
                                                                      " kernel modified its input "
                                                                      "argument '" +
                                                                      *modified + "'")};
    return launched;
  }

  // Enqueues one launch; does not wait (timing wraps exactly this call).
  Launched launch(Side& side, ArgumentBinder& binder) {
    Launched launched;
    std::vector<keval_dl_managed_tensor*> returned(side.returns_outputs() ? kMaxOutputs : 0);
    size_t num_returned = 0;
    keval_launch_args args{};
    args.struct_size = sizeof args;
    args.args = binder.args().data();
    args.num_args = binder.args().size();
    args.stream = engine_->stream();
    if (side.returns_outputs()) {
      args.outputs = returned.data();
      args.max_outputs = returned.size();
      args.num_outputs = &num_returned;
    }
    PluginError error(side.plugin->api(), side.plugin->api().launch(side.kernel, &args));
    for (size_t i = 0; i < num_returned; ++i)
      launched.owned.emplace_back(returned[i]);
    if (error)
      throw KernelFailure{side.name, error_json(error_code_name(error.code()),
                                                side.name + " kernel failed: " + error.message(),
                                                error.details())};
    if (side.returns_outputs()) {
      for (auto& t : launched.owned)
        launched.outputs.push_back(&t.get()->dl_tensor);
    } else {
      launched.outputs = binder.output_views();
    }
    return launched;
  }

  // Runs engine work that follows a side's launch. A device fault surfacing there (sticky
  // errors make every later device call fail) is that side's kernel failure.
  template <class Work> std::invoke_result_t<Work> on_device(const Side& side, Work&& work) {
    try {
      return work();
    } catch (const KernelFault& fault) {
      throw KernelFailure{side.name, error_json("device_error", side.name +
                                                                    " kernel faulted on the "
                                                                    "device: " +
                                                                    fault.what())};
    }
  }

  void synchronize(const Side& side) {
    on_device(side, [&] { engine_->synchronize(); });
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
    if (!provider.plugin->has(KEVAL_CAP_DEFAULT_INPUTS))
      throw KernelFailure{
          provider.name, error_json("no_inputs", "the request has no IOContract and kernel type '" +
                                                     provider.code->kernel_type +
                                                     "' cannot produce default inputs")};
    try {
      return InputSet::from_plugin(*engine_, provider.plugin->api(), provider.kernel,
                                   tensor::trial_seed(job_.seed, trial));
    } catch (const PluginCallError& e) {
      throw KernelFailure{provider.name, error_json(e.type, e.what(), e.details)};
    }
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
      std::unique_ptr<ArgumentBinder> binder;
      std::unique_ptr<Timer> timer;
      std::vector<double> samples;
      int64_t warmup = 0;
    };
    std::vector<Timed> timed;
    try {
      for (auto& side : sides_) {
        Timed t{side.get(), std::make_unique<ArgumentBinder>(*engine_, side_contract(*side),
                                                             side->code->io.has_value(), inputs)};
        Side* s = t.side;
        ArgumentBinder* b = t.binder.get();
        // Returned outputs are released right after the launch returns; for graph replay the
        // launch runs once, at capture.
        t.timer =
            on_device(*s, [&] { return engine_->make_timer([this, s, b] { launch(*s, *b); }); });
        timed.push_back(std::move(t));
      }
      for (auto& t : timed)
        t.warmup = warm_up(*t.side, *t.binder, *t.timer);
      for (int64_t i = 0; i < samples; ++i) {
        if (i % std::max<int64_t>(1, samples / 10) == 0)
          progress("profiling", i, samples);
        // Alternate which side goes first so neither always runs right after the other.
        for (size_t k = 0; k < timed.size(); ++k) {
          auto& t = timed[(static_cast<size_t>(i) + k) % timed.size()];
          t.samples.push_back(sample(*t.side, *t.binder, *t.timer));
        }
      }
    } catch (const KernelFailure& failure) {
      send_profile_failure(failure);
      return;
    }
    progress("profiling", samples, samples);

    json::object result;
    result["ok"] = true;
    result["method"] = timed.front().timer->method();
    result["device"] = engine_->describe();
    for (auto& t : timed) {
      json::object stats = tensor::to_json(tensor::compute_stats(t.samples));
      stats["method"] = t.timer->method();
      stats["warmup_runs"] = t.warmup;
      result[t.side->name] = std::move(stats);
    }
    if (ref() != nullptr) {
      const double ref_median = result["ref"].as_object()["median"].to_number<double>();
      const double custom_median = result["custom"].as_object()["median"].to_number<double>();
      if (custom_median > 0)
        result["speedup"] = ref_median / custom_median;
    }
    send_phase(protocol::msg::kPhaseProfiled, std::move(result));
  }

  // One timed run. Outputs are poisoned before it (so no run can reuse an earlier result),
  // outside the timed region; errors the device reports afterwards are the kernel's.
  double sample(Side& side, ArgumentBinder& binder, Timer& timer) {
    const double ms = on_device(side, [&] {
      binder.poison_outputs(*engine_);
      return timer.sample();
    });
    synchronize(side);
    return ms;
  }

  // Runs the kernel until consecutive timings settle (relative change of the running median of
  // the last 5 samples under 5 %), at least 3 and at most 100 runs or 2 s.
  int64_t warm_up(Side& side, ArgumentBinder& binder, Timer& timer) {
    std::vector<double> recent;
    const auto start = Clock::now();
    double previous_median = -1;
    int64_t runs = 0;
    while (runs < 100 && ms_since(start) < 2000) {
      recent.push_back(sample(side, binder, timer));
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
    json::object result;
    result["ok"] = false;
    result["failed_side"] = failure.side;
    result["error"] = failure.error;
    send_phase(protocol::msg::kPhaseProfiled, std::move(result));
  }

  // ---------------------------------------------------------------------------------------
  // Messages

  void fail_validation(json::object error) {
    json::object result;
    result["ok"] = false;
    result["error"] = std::move(error);
    send_phase(protocol::msg::kPhaseValidated, std::move(result));
  }

  void send_phase(const char* phase, json::object result) {
    std::fflush(stdout); // user output printed so far belongs before this phase in the logs
    json::object m;
    m["type"] = protocol::msg::kPhase;
    m["phase"] = phase;
    m["result"] = std::move(result);
    channel_.send(std::move(m));
  }

  void progress(const char* phase, int64_t done, int64_t total) {
    json::object m;
    m["type"] = protocol::msg::kProgress;
    m["phase"] = phase;
    m["done"] = done;
    m["total"] = total;
    channel_.send(std::move(m));
  }

  void finish() {
    std::fflush(stdout);
    json::object m;
    m["type"] = protocol::msg::kDone;
    channel_.send(std::move(m));
  }

  static constexpr size_t kMaxOutputs = 64;

  protocol::BlockingChannel& channel_;
  const JobSpec& job_;
  const EvalRequest& request_;
  std::map<std::string, std::unique_ptr<LoadedPlugin>> plugins_;
  // Declared before the sides: kernels (and their device modules) are released before the
  // engine releases the device context.
  std::unique_ptr<Engine> engine_;
  std::vector<std::unique_ptr<Side>> sides_; // ref first (if any), custom last
  int cuda_arch_ = job_.cuda_arch;           // 0 until known
  bool cuda_usable_ = false;
  std::string cuda_reason_;
};

} // namespace

JobSpec parse_job(const json::object& frame) {
  JobSpec job;
  job.job_id = json::value_to<std::string>(frame.at("job_id"));
  const std::string mode = json::value_to<std::string>(frame.at("mode"));
  const auto parsed_mode =
      mode == "compare" ? EvalRequest::Mode::compare : EvalRequest::Mode::evaluate;
  job.request = request::parse_request(frame.at("request"), parsed_mode);
  for (const auto& [type, path] : frame.at("plugins").as_object())
    job.plugins[std::string(type)] = json::value_to<std::string>(path);
  job.work_dir = json::value_to<std::string>(frame.at("work_dir"));
  job.cuda_arch = static_cast<int>(frame.at("cuda_arch").to_number<int64_t>());
  job.seed = frame.at("seed").to_number<uint64_t>();
  return job;
}

void run_pipeline(protocol::BlockingChannel& channel, const JobSpec& job) {
  Pipeline(channel, job).run();
}

} // namespace keval::worker
