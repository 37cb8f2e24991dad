#include "worker/runner/runner.hpp"

#include "common/log.hpp"
#include "protocol/blocking_channel.hpp"
#include "request/model.hpp"
#include "tensor/dtype.hpp"
#include "worker/engine/engine.hpp"
#include "worker/engine/work_queues.hpp"
#include "worker/isolation/isolation.hpp"
#include "worker/isolation/sandbox.hpp"
#include "worker/pipeline/arguments.hpp"
#include "worker/pipeline/plugin_loader.hpp"
#include "worker/runner/detail/wire.hpp"
#include "worker/runner/program_commands.hpp"
#include "worker/runner/runner_protocol.hpp"

#ifdef KEVAL_HAVE_CUDA
#include "worker/cuda/cuda_engine.hpp"
#include "worker/cuda/engine_opener.hpp"

#include <nvtx3/nvToolsExt.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <unistd.h>

namespace keval::worker {

namespace json = boost::json;
using detail::WireError;

namespace {

// A command failed; becomes {ok: false, error}.
struct CommandError {
  std::string type;
  std::string message;
  std::string details;
};

CommandError plugin_failure(const PluginError& error, const std::string& context) {
  return {error_code_name(error.code()), context + error.message(), error.details()};
}

// One set of launch arguments the trusted worker handed over: its shared tensors, mapped here.
struct Binding {
  std::vector<std::unique_ptr<Tensor>> tensors;
  std::vector<std::string> names, strings;
  std::vector<keval_arg> args;
  std::unique_ptr<Timer> timer;
  // What the last timed run returned (plugins that return outputs): for graph replay, the run at
  // capture, whose buffers every replay writes again. Held, so that they stay the graph's (not
  // memory an allocator hands out again) and each sample's outputs can be sent for checking.
  std::vector<ManagedTensor> timed_outputs;
  // How many traced samples are read at once (Runner::read_activities).
  size_t samples_per_read = 1;
};

class Runner {
public:
  explicit Runner(int fd) : channel_(fd, "keval-worker", runner_msg::kMaxRunnerFrameBytes) {}

  ~Runner() {
    bindings_.clear();
    if (kernel_ != nullptr)
      plugin_->api().kernel_destroy(kernel_);
    if (companion_ != nullptr)
      companion_plugin_->api().kernel_destroy(companion_);
  }

  void prewarm(const std::vector<std::string>& paths, json::object& hello) {
    json::array done, errors;
    for (const std::string& path : paths) {
      try {
        LoadedPlugin& plugin = load(path);
        const keval_plugin_api& api = plugin.api();
        if (KEVAL_STRUCT_HAS(&api, keval_plugin_api, prewarm) && api.prewarm != nullptr) {
          PluginError error(api, api.prewarm());
          if (error)
            throw std::runtime_error(error.message());
          done.emplace_back(plugin.manifest().kernel_type);
        }
      } catch (const std::exception& e) {
        spdlog::warn("prewarm of {} failed (the job will do that setup itself): {}", path,
                     e.what());
        errors.emplace_back(path + ": " + e.what());
      }
    }
    hello["prewarmed"] = std::move(done);
    if (!errors.empty())
      hello["prewarm_errors"] = std::move(errors);
    // Opened when the trusted worker says (open_device), in its turn among the machine's
    // openers (worker/engine/device_turn.hpp), and then warmed (warm_device) where a plugin can.
    hello["opens_device"] = cuda_use().cuda;
    hello["warms_device"] = !device_warmers().empty();
  }

  // The loaded plugins that run on CUDA and set up their framework on a device opened ahead
  // (SDK 1.4 warm_device).
  std::vector<LoadedPlugin*> device_warmers() const {
    std::vector<LoadedPlugin*> warmers;
    for (const auto& [path, plugin] : plugins_) {
      const keval_plugin_api& api = plugin->api();
      if (plugin->has(KEVAL_CAP_DEVICE_CUDA) &&
          KEVAL_STRUCT_HAS(&api, keval_plugin_api, warm_device) && api.warm_device != nullptr)
        warmers.push_back(plugin.get());
    }
    return warmers;
  }

  // `warm_device`: each plugin's warm_device on the device opened ahead, answered once all have
  // ended: {warmed: [kernel_type...], errors?: ["kernel_type: message"...], skipped?: why none
  // ran}. Refused once user code has been loaded here: it is keval's set-up, before any job. The
  // trusted worker asks only while no job is timed on the GPU (engine/device_turn.hpp).
  json::object warm_device_now() {
    if (user_code_loaded_)
      throw WireError("'warm_device' after user code was loaded");
    if (std::exchange(device_warmed_, true))
      throw WireError("a second 'warm_device'"); // the SDK calls it at most once
    json::object reply;
    json::array warmed, errors;
#ifdef KEVAL_HAVE_CUDA
    Engine* engine = opener_.opened();
    if (engine == nullptr) {
      reply["skipped"] = "no device was opened ahead";
    } else {
      engine->use_on_this_thread();
      keval_device_args args{};
      args.struct_size = sizeof args;
      args.device = engine->device();
      args.stream = engine->stream();
      for (LoadedPlugin* plugin : device_warmers()) {
        PluginError error(plugin->api(), plugin->api().warm_device(&args));
        if (error)
          errors.emplace_back(plugin->manifest().kernel_type + std::string(": ") + error.message());
        else
          warmed.emplace_back(plugin->manifest().kernel_type);
      }
      // What the plugins queued and kept is theirs to end (the SDK says so); keval's stream is
      // waited for too, and nothing of the warm-up counts as a sample's work.
      engine->synchronize();
      engine->forget_traced_work();
    }
#else
    reply["skipped"] = "keval was built without CUDA";
#endif
    reply["warmed"] = std::move(warmed);
    if (!errors.empty())
      reply["errors"] = std::move(errors);
    return reply;
  }

  struct CudaUse {
    bool cuda = false;      // a plugin loaded here runs on CUDA
    bool one_stream = true; // all of those launch only on keval's stream
  };
  CudaUse cuda_use() const {
    CudaUse use;
    for (const auto& [path, plugin] : plugins_)
      if (plugin->has(KEVAL_CAP_DEVICE_CUDA)) {
        use.cuda = true;
        use.one_stream = use.one_stream && plugin->has(KEVAL_CAP_ONE_STREAM);
      }
    return use;
  }

  // A runner started ahead of its job, for a CUDA kernel type, opens its device before the job
  // comes (see EngineOpener) when the trusted worker says: `open_device` ({index?}: the ordinal
  // the host named, else the one device there is) answers once the open has ended ({cuda:
  // false}: no plugin here runs on CUDA, nothing was opened). An open that
  // failed is tried again at bind, which says why. Only for CUDA types: cuInit is serialised
  // across the machine's processes, so one that no job of the set needs would cost every CUDA
  // job its turn.
  json::object open_device_now(const json::object& command) {
    json::object reply;
    const CudaUse use = cuda_use();
    std::optional<int> ordinal;
    if (command.contains("index"))
      ordinal = static_cast<int>(detail::int_field(command, "index"));
#ifdef KEVAL_HAVE_CUDA
    if (use.cuda) {
      open_device(use.one_stream, ordinal);
      opener_.wait();
    }
#endif
    reply["cuda"] = use.cuda;
    return reply;
  }

#ifdef KEVAL_HAVE_CUDA
  // Starts opening the device, with one hardware work queue where every kernel type this runner
  // may run launches only on keval's stream (KEVAL_CAP_ONE_STREAM, worker/engine/work_queues.hpp).
  void open_device(bool one_stream, std::optional<int> ordinal = std::nullopt) {
    if (opener_.started())
      return; // its queues were chosen when it was
    if (one_stream)
      use_one_work_queue();
    opener_.start(EngineUse::runner, ordinal);
  }
#endif

  void hello(json::object hello) {
    hello["type"] = runner_msg::kHello;
    hello["pid"] = static_cast<int64_t>(::getpid());
    channel_.send(std::move(hello));
  }

  // Serves commands until the trusted worker closes the channel or kills this process.
  void serve() {
    for (;;) {
      json::object command = channel_.receive();
      const std::string type = detail::string_field(command, "type");
      if (type == runner_msg::kUnbind) { // posted: no reply
        bindings_.erase(detail::int_field(command, "binding"));
        continue;
      }
      json::object reply;
      std::vector<int> fds;
      try {
        reply = dispatch(type, command, fds);
        reply["ok"] = true;
      } catch (const CommandError& e) {
        reply = failure(e);
        fds.clear();
      } catch (const KernelFault& e) {
        reply =
            failure({"device_error", std::string("kernel faulted on the device: ") + e.what(), {}});
        fds.clear();
      } catch (const WireError&) {
        throw; // the trusted worker sent something broken: stop
      } catch (const std::exception& e) {
        reply = failure({"internal_error", e.what(), {}});
        fds.clear();
      }
      std::fflush(stdout); // what user code printed belongs before the reply in the logs
      reply["type"] = runner_msg::kReply;
      reply["for"] = type;
      reply["seq"] = command.contains("seq") ? command.at("seq") : json::value(nullptr);
      channel_.send(std::move(reply), fds);
    }
  }

private:
  static json::object failure(const CommandError& e) {
    json::object error;
    error["type"] = e.type;
    // Past an rlimit memory limit, user code sees an allocation failure: say which limit.
    error["message"] = isolation::explain_allocation_failure(e.message);
    if (!e.details.empty())
      error["details"] = isolation::explain_allocation_failure(e.details);
    json::object reply;
    reply["ok"] = false;
    reply["error"] = std::move(error);
    return reply;
  }

  // A plugin that fails to load leaves no entry behind: prepare_engine and the rest walk
  // plugins_ and expect every entry loaded (a null one crashed every prestarted runner whose
  // prewarm plugin could not be loaded, once CUDA was built in).
  LoadedPlugin& load(const std::string& path) {
    if (auto found = plugins_.find(path); found != plugins_.end())
      return *found->second;
    auto plugin = std::make_unique<LoadedPlugin>(path);
    return *plugins_.emplace(path, std::move(plugin)).first->second;
  }

  json::object dispatch(const std::string& type, const json::object& command,
                        std::vector<int>& fds) {
    if (type == runner_msg::kLoad)
      return load_plugin(detail::string_field(command, "plugin"),
                         !command.contains("device") || detail::bool_field(command, "device"));
    if (type == runner_msg::kOpenDevice)
      return open_device_now(command);
    if (type == runner_msg::kWarmDevice)
      return warm_device_now();
    // From here on, user code may be loaded (a compile, a companion, a program's files).
    user_code_loaded_ = user_code_loaded_ || type == runner_msg::kCompanion ||
                        type == runner_msg::kCompile || type == program_commands::kFiles ||
                        type == program_commands::kPlan;
    if (type == runner_msg::kCompanion)
      return compile_companion(command);
    // A whole program's workspace (program_commands.hpp): no plugin code runs for it.
    if (type == program_commands::kFiles)
      return program_commands::files(command, channel_);
    if (plugin_ == nullptr && type != runner_msg::kLoad)
      throw WireError("'" + type + "' before 'load'");
    if (type == program_commands::kPlan)
      return program_commands::plan(*plugin_, command);
    if (type == runner_msg::kCompile)
      return compile(command);
    if (kernel_ == nullptr)
      throw CommandError{"internal_error", "'" + type + "' before a successful compile", {}};
    if (type == runner_msg::kBind)
      return bind(command);
    if (!engine_)
      throw WireError("'" + type + "' before 'bind'");
    if (type == runner_msg::kArgs)
      return bind_args(command);
    if (type == runner_msg::kDefaultInputs)
      return default_inputs(detail::uint_field(command, "seed"),
                            !command.contains("share") || detail::bool_field(command, "share"),
                            fds);
    Binding& binding = find_binding(command);
    if (type == runner_msg::kLaunch)
      return launch(binding, fds);
    if (type == runner_msg::kTimer)
      return make_timer(binding, command);
    if (type == runner_msg::kSample)
      return sample(binding, fds);
    if (type == runner_msg::kActivity)
      return activity(binding);
    if (type == runner_msg::kMetrics)
      return metrics(binding, command);
    if (type == runner_msg::kHardwareTime)
      return hardware_time(binding, command);
    throw WireError("unknown command '" + type + "'");
  }

  // The device tracer, loaded on a thread of its own once the kernel compiled, before the job's
  // grant (load_device_trace_ahead): its first timer then only turns it on. After the compile, not
  // beside it: a Python kernel's compile imports torch, which may bring its own CUPTI, and the
  // tracer takes the one already loaded (worker/cuda/detail/activity_trace.hpp), as it would at
  // the timer.
  void load_trace_ahead() {
#ifdef KEVAL_HAVE_CUDA
    if (binds_cuda_device_ && !trace_loading_.valid())
      trace_loading_ = std::async(std::launch::async, load_device_trace_ahead);
#endif
  }

  // `device`: false for the trusted worker's builder, which never binds one.
  json::object load_plugin(const std::string& path, bool device) {
    plugin_ = &load(path);
    binds_cuda_device_ = device && plugin_->has(KEVAL_CAP_DEVICE_CUDA);
#ifdef KEVAL_HAVE_CUDA
    // The device is opened beside the compile instead of after the grant (see EngineOpener).
    if (binds_cuda_device_)
      open_device(plugin_->has(KEVAL_CAP_ONE_STREAM));
#endif
    json::object manifest;
    manifest["kernel_type"] = plugin_->manifest().kernel_type;
    manifest["capabilities"] = plugin_->manifest().capabilities;
    json::object reply;
    reply["manifest"] = std::move(manifest);
    return reply;
  }

  // The reference's source, compiled here only so that the candidate's plugin finds what
  // KernelBench keeps in the reference (get_inputs, get_init_inputs). Its kernel never runs.
  json::object compile_companion(const json::object& c) {
    if (kernel_ != nullptr || companion_ != nullptr)
      throw WireError("'companion' after a compile");
    companion_plugin_ = &load(detail::string_field(c, "plugin"));
    LoadedPlugin* own = plugin_;
    plugin_ = companion_plugin_;
    json::object reply;
    try {
      reply = compile(c);
    } catch (...) {
      plugin_ = own;
      throw;
    }
    companion_ = std::exchange(kernel_, nullptr);
    plugin_ = own;
    return reply;
  }

  json::object compile(const json::object& c) {
    const std::string source = detail::string_field(c, "source_code");
    const std::string metadata = detail::string_field(c, "metadata");
    const json::value* io_value = c.if_contains("io");
    const std::string io = io_value != nullptr && io_value->is_string()
                               ? std::string(io_value->as_string())
                               : std::string();
    const std::string work_dir = detail::string_field(c, "work_dir");
    const std::string side = detail::string_field(c, "side");
    // CPU time, all threads together, bounded by the job's timeout on every core (the host ends
    // the job at its timeout anyway; this bounds what a runaway process burns until then).
    if (const json::value* cpu = c.if_contains("cpu_seconds");
        cpu != nullptr && cpu->is_int64() && cpu->as_int64() > 0)
      isolation::limit_cpu_time(static_cast<uint64_t>(cpu->as_int64()));
    const auto start = std::chrono::steady_clock::now();
    keval_compile_args args{};
    args.struct_size = sizeof args;
    args.source_code = source.c_str();
    args.metadata_json = metadata.c_str();
    args.io_contract_json = io.empty() ? nullptr : io.c_str();
    args.work_dir = work_dir.c_str();
    args.cuda_arch = static_cast<int32_t>(detail::int_field(c, "cuda_arch"));
    args.side = side.c_str();
    keval_compile_result out{};
    out.struct_size = sizeof out;
    PluginError error(plugin_->api(), plugin_->api().compile(&args, &out));
    json::object reply;
    reply["time_ms"] =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (error)
      throw plugin_failure(error, "");
    if (out.kernel == nullptr)
      throw CommandError{"internal_error", "plugin reported success but no kernel", {}};
    kernel_ = out.kernel;
    load_trace_ahead();
    if (out.info_json != nullptr) {
      json::error_code ec;
      auto info = json::parse(out.info_json, ec);
      reply["info"] = ec ? json::value(out.info_json) : std::move(info);
    }
    return reply;
  }

  json::object bind(const json::object& command) {
    const json::object& device = detail::object_field(command, "device");
    if (const json::value* range = command.if_contains("nvtx_range")) {
      if (!range->is_string() || range->get_string().size() > 256)
        throw WireError("'nvtx_range' must be a string of at most 256 bytes");
      nvtx_range_ = std::string(range->get_string());
    }
    const std::string type = detail::string_field(device, "type");
    if (type == "cpu") {
      engine_ = make_cpu_engine();
    } else if (type == "cuda") {
#ifdef KEVAL_HAVE_CUDA
      const int index = static_cast<int>(detail::int_field(device, "index"));
      try {
        engine_ = opener_.take(index);
        if (!engine_)
          engine_ = make_cuda_engine(index, EngineUse::runner);
      } catch (const std::exception& e) {
        throw CommandError{
            "no_device", "cannot use CUDA device " + std::to_string(index) + ": " + e.what(), {}};
      }
#else
      throw CommandError{"no_device", "this keval-worker was built without the CUDA toolkit", {}};
#endif
    } else {
      throw WireError("unknown device type '" + type + "'");
    }
    keval_device_args args{};
    args.struct_size = sizeof args;
    args.device = engine_->device();
    args.stream = engine_->stream();
    PluginError error(plugin_->api(), plugin_->api().bind_device(kernel_, &args));
    if (error)
      throw plugin_failure(error, "kernel failed to bind to the device: ");
    return {};
  }

  Binding& find_binding(const json::object& command) {
    auto it = bindings_.find(detail::int_field(command, "binding"));
    if (it == bindings_.end())
      throw WireError("unknown binding");
    return it->second;
  }

  // Maps the trusted worker's shared tensors and builds the keval_arg array over them.
  json::object bind_args(const json::object& command) {
    const int64_t id = detail::int_field(command, "binding");
    const json::array& described = detail::array_field(command, "args");
    json::array tensor_descriptions;
    for (const auto& a : described)
      if (a.is_object() && a.as_object().contains("tensor"))
        tensor_descriptions.push_back(a.as_object().at("tensor"));
    std::vector<SharedTensorHandle> handles = detail::read_shared(tensor_descriptions, channel_);
    Binding binding;
    binding.names.reserve(described.size());
    binding.strings.reserve(described.size());
    size_t next_tensor = 0;
    for (const auto& value : described) {
      if (!value.is_object())
        throw WireError("an argument is not an object");
      const json::object& a = value.as_object();
      keval_arg arg{};
      arg.struct_size = sizeof arg;
      binding.names.push_back(detail::string_field(a, "name"));
      arg.name = binding.names.back().c_str();
      arg.kind = static_cast<int32_t>(detail::int_field(a, "kind"));
      arg.role = static_cast<int32_t>(detail::int_field(a, "role"));
      arg.is_meta = detail::bool_field(a, "is_meta") ? 1 : 0;
      switch (arg.kind) {
      case KEVAL_ARG_TENSOR:
        binding.tensors.push_back(engine_->open_shared(std::move(handles.at(next_tensor++))));
        arg.tensor = &binding.tensors.back()->dl();
        break;
      case KEVAL_ARG_INT:
      case KEVAL_ARG_BOOL:
        arg.int_value = detail::int_field(a, "int_value");
        break;
      case KEVAL_ARG_FLOAT:
        arg.float_value = detail::number_field(a, "float_value");
        break;
      case KEVAL_ARG_STR:
        binding.strings.push_back(detail::string_field(a, "str_value"));
        arg.str_value = binding.strings.back().c_str();
        break;
      default:
        throw WireError("an argument has an unknown kind");
      }
      binding.args.push_back(arg);
    }
    bindings_[id] = std::move(binding);
    return {};
  }

  // Runs the kernel once and waits for it. Tensors the plugin returned are copied into shared
  // buffers for the trusted worker (kept until the next command).
  json::object launch(Binding& binding, std::vector<int>& fds) {
    std::vector<ManagedTensor> owned = launch_once(binding);
    engine_->synchronize();
    json::array outputs = share(kOutputs, owned, fds);
    json::object reply;
    if (plugin_->has(KEVAL_CAP_RETURNS_OUTPUTS))
      reply["outputs"] = std::move(outputs);
    return reply;
  }

  // Copies of tensors the plugin produced, in shared buffers for the trusted worker, described
  // for the reply. A buffer of the previous reply of the same `kind`, at the same place and with
  // the same dtype and shape, is written again and described as reused (the trusted worker still
  // has it mapped); any other gets a new buffer, whose descriptor is appended to `fds`. The
  // buffers of a kind stay until its next reply: the trusted worker copies them out first.
  json::array share(const std::string& kind, const std::vector<ManagedTensor>& owned,
                    std::vector<int>& fds) {
    std::vector<std::unique_ptr<Tensor>>& kept = shared_[kind];
    std::vector<std::unique_ptr<Tensor>> now;
    json::array described;
    for (size_t k = 0; k < owned.size(); ++k) {
      const keval_dl_tensor& view = owned[k]->dl_tensor;
      Tensor* previous = k < kept.size() ? kept[k].get() : nullptr;
      if (previous != nullptr && previous->shared_fd() >= 0 && same_layout(*previous, view)) {
        engine_->copy_view_into(*previous, view);
        now.push_back(std::move(kept[k]));
        described.push_back(detail::describe_reused(*now.back()));
      } else {
        now.push_back(engine_->clone(view, Sharing::shared));
        described.push_back(detail::describe_shared(*now.back(), fds));
      }
    }
    kept = std::move(now); // the rest of the previous reply's buffers go
    if (fds.size() > protocol::kMaxFdsPerFrame)
      throw CommandError{"runtime_error", "kernel returned too many tensors", {}};
    return described;
  }

  static bool same_layout(const Tensor& tensor, const keval_dl_tensor& view) {
    const std::optional<request::DType> dtype = tensor::from_dl(view.dtype);
    return dtype && *dtype == tensor.dtype() &&
           std::equal(tensor.shape().begin(), tensor.shape().end(), view.shape,
                      view.shape + view.ndim);
  }

  std::vector<ManagedTensor> launch_once(Binding& binding) {
    const bool returns = plugin_->has(KEVAL_CAP_RETURNS_OUTPUTS);
    std::vector<keval_dl_managed_tensor*> returned(returns ? kMaxOutputs : 0);
    size_t num_returned = 0;
    keval_launch_args args{};
    args.struct_size = sizeof args;
    args.args = binding.args.data();
    args.num_args = binding.args.size();
    args.stream = engine_->stream();
    if (returns) {
      args.outputs = returned.data();
      args.max_outputs = returned.size();
      args.num_outputs = &num_returned;
    }
    PluginError error(plugin_->api(), launch_in_range(args));
    std::vector<ManagedTensor> owned;
    for (size_t i = 0; i < num_returned && i < returned.size(); ++i)
      owned.emplace_back(returned[i]);
    if (error)
      throw plugin_failure(error, "kernel failed: ");
    return owned;
  }

  // The plugin's launch inside the side's NVTX range ({job_id}_original or {job_id}_custom, as
  // the V2 server names them), so that `ncu --nvtx --nvtx-include` can pick out a side's kernels.
  keval_error* launch_in_range(const keval_launch_args& args) {
#ifdef KEVAL_HAVE_CUDA
    if (!nvtx_range_.empty()) {
      nvtxRangePushA(nvtx_range_.c_str());
      keval_error* status = plugin_->api().launch(kernel_, &args);
      nvtxRangePop();
      return status;
    }
#endif
    return plugin_->api().launch(kernel_, &args);
  }

  // The hardware counters of every kernel one launch issues (engine.hpp's collect_counters),
  // after the side's timed samples. Where they cannot be read, the reply says why instead.
  json::object metrics(Binding& binding, const json::object& command) {
    const json::array& asked = detail::array_field(command, "metrics");
    if (asked.empty() || asked.size() > kMaxCounterMetrics)
      throw WireError("'metrics' must name 1 to " + std::to_string(kMaxCounterMetrics) +
                      " metrics");
    std::vector<std::string> names;
    for (const auto& m : asked) {
      if (!m.is_string())
        throw WireError("'metrics' holds something other than a name");
      names.emplace_back(m.get_string());
    }
    const uint64_t max_kernels = detail::uint_field(command, "max_kernels");
    const json::value* expected = command.if_contains("expected_ms");
    const double expected_ms =
        expected != nullptr && expected->is_number() ? expected->to_number<double>() : 0.0;
    json::object reply;
    try {
      DeviceCounters counters = engine_->collect_counters(
          names, std::min<uint64_t>(std::max<uint64_t>(max_kernels, 1), kMaxCountedKernels),
          expected_ms, [this, &binding] {
            std::vector<ManagedTensor> outputs = launch_once(binding);
            engine_->synchronize();
          });
      reply["counters"] = to_json(counters);
    } catch (const CountersUnavailable& e) {
      reply["unavailable"] = e.what();
    }
    return reply;
  }

  // The hardware's time of every kernel one launch issues, in each of `runs` runs of its own
  // (engine.hpp's time_kernels), after the side's timed samples; the reason where it cannot be
  // read.
  json::object hardware_time(Binding& binding, const json::object& command) {
    const uint64_t runs = detail::uint_field(command, "runs");
    if (runs == 0 || runs > static_cast<uint64_t>(request::kMaxHardwareTimeRuns))
      throw WireError("'runs' must be 1 to " + std::to_string(request::kMaxHardwareTimeRuns));
    const uint64_t max_kernels = detail::uint_field(command, "max_kernels");
    json::object reply;
    try {
      const std::vector<std::vector<double>> measured = engine_->time_kernels(
          runs, std::min<uint64_t>(std::max<uint64_t>(max_kernels, 1), kMaxCountedKernels),
          [this, &binding] {
            std::vector<ManagedTensor> outputs = launch_once(binding);
            engine_->synchronize();
          });
      json::array all;
      for (const auto& kernels : measured) {
        json::array one;
        for (double ns : kernels)
          one.emplace_back(ns);
        all.emplace_back(std::move(one));
      }
      reply["runs"] = std::move(all);
    } catch (const CountersUnavailable& e) {
      reply["unavailable"] = e.what();
    }
    return reply;
  }

  // The plugin's default inputs for `seed`, shared unless `share` is false (the trusted worker
  // asks only so that the plugin learns the inputs' layout: nothing is copied or kept then).
  json::object default_inputs(uint64_t seed, bool share_them, std::vector<int>& fds) {
    std::vector<keval_dl_managed_tensor*> produced(kMaxOutputs, nullptr);
    size_t count = 0;
    keval_default_inputs_args args{};
    args.struct_size = sizeof args;
    args.device = engine_->device();
    args.stream = engine_->stream();
    args.seed = seed;
    args.inputs = produced.data();
    args.max_inputs = produced.size();
    args.num_inputs = &count;
    if (plugin_->api().default_inputs == nullptr)
      throw CommandError{"unsupported", "this kernel type cannot produce default inputs", {}};
    PluginError error(plugin_->api(), plugin_->api().default_inputs(kernel_, &args));
    std::vector<ManagedTensor> owned;
    for (size_t i = 0; i < count && i < produced.size(); ++i)
      owned.emplace_back(produced[i]);
    if (error)
      throw plugin_failure(error, "producing default inputs failed: ");
    json::array tensors = share_them ? share(kInputs, owned, fds) : json::array{};
    // Generating a trial's inputs is keval's errand, not the next sample's work.
    engine_->forget_traced_work();
    json::object reply;
    reply["tensors"] = std::move(tensors);
    return reply;
  }

  // {"capture": false} asks for events even where a graph could be captured: the other side of
  // the compare could not be, and both must be timed alike. A timer made again replaces the old.
  json::object make_timer(Binding& binding, const json::object& command) {
    const json::value* capture = command.if_contains("capture");
    if (capture != nullptr && !capture->is_bool())
      throw WireError("'capture' must be a boolean");
    const json::value* trace = command.if_contains("trace");
    if (trace != nullptr && !trace->is_bool())
      throw WireError("'trace' must be a boolean");
    binding.timer.reset();
    // One at a time again until a read of the new timer's samples shows how many a sample makes.
    binding.samples_per_read = 1;
    // For graph replay the launch runs once, at capture; for events, once per sample.
    binding.timer = engine_->make_timer(
        [this, &binding] {
          std::vector<ManagedTensor> outputs = launch_once(binding);
          binding.timed_outputs = std::move(outputs);
        },
        capture == nullptr || capture->get_bool(), trace == nullptr || trace->get_bool());
    json::object reply;
    reply["method"] = binding.timer->method();
    if (const std::string why = binding.timer->untraced_reason(); !why.empty())
      reply["untraced"] = why;
    json::object account; // a diagnostic the trusted worker sums (sampling.time_ms.setup_parts)
    for (const auto& [part, ms] : binding.timer->setup_ms())
      account[part] = ms;
    reply["host_ms"] = std::move(account);
    return reply;
  }

  // One timed run; the outputs it returned (plugins that return them) go back for checking,
  // copied into shared buffers after the timed region, as `launch` does.
  json::object sample(Binding& binding, std::vector<int>& fds) {
    if (!binding.timer)
      throw WireError("'sample' before 'timer'");
    // Where this call's time goes in this process ("host_ms"): the trusted worker sums it into
    // a diagnostic (sampling.time_ms.runs_calls_in_runner) that decides nothing.
    json::object account;
    auto lap_start = std::chrono::steady_clock::now();
    const auto lap = [&](const char* part) {
      const auto now = std::chrono::steady_clock::now();
      account[part] = std::chrono::duration<double, std::milli>(now - lap_start).count();
      lap_start = now;
    };
    const double ms = binding.timer->sample();
    lap(runner_msg::sample_account::kSample);
    engine_->synchronize();
    lap(runner_msg::sample_account::kSynchronize);
    json::object reply;
    reply["ms"] = ms;
    // The sample's end is marked in the trace before keval's own copies of the outputs below
    // (the next sample's summary knows them for what they are); its device work is read with
    // the samples' after it, once samples_per_read of them are unread.
    if (binding.timer->untraced_reason().empty()) {
      try {
        binding.timer->end_sample();
        if (binding.timer->unread_samples() >= binding.samples_per_read)
          reply["activities"] = read_activities(binding);
      } catch (const TraceLost& e) {
        reply["activity_lost"] = e.what();
      }
      lap(runner_msg::sample_account::kTrace);
    }
    if (plugin_->has(KEVAL_CAP_RETURNS_OUTPUTS)) {
      reply["outputs"] = share(kOutputs, binding.timed_outputs, fds);
      lap(runner_msg::sample_account::kShare);
    }
    reply["host_ms"] = std::move(account);
    return reply;
  }

  // The device work of every sample not read yet, in order. A read costs the process's next
  // device work about half a millisecond (CUPTI's flush), so samples are read together: as many
  // as keep a read under kRecordsPerRead records at the busiest sample of the last read, up to
  // kMaxSamplesPerRead; one at a time until a read has shown how many a sample makes.
  json::array read_activities(Binding& binding) {
    std::vector<SampleActivity> read = binding.timer->take_activities();
    int64_t most = 0;
    json::array out;
    for (const auto& activity : read) {
      int64_t records = 2; // keval's markers
      for (const auto& w : activity.work)
        records += w.count;
      most = std::max(most, records);
      out.push_back(to_json(activity));
    }
    if (!read.empty())
      binding.samples_per_read =
          std::clamp<size_t>(kRecordsPerRead / static_cast<size_t>(most), 1, kMaxSamplesPerRead);
    return out;
  }

  // {"activities": [...]}: the device work of the binding's samples not read yet ([] when none),
  // or {"activity_lost"} when the trace lost them.
  json::object activity(Binding& binding) {
    if (!binding.timer)
      throw WireError("'activity' before 'timer'");
    if (!binding.timer->untraced_reason().empty())
      throw CommandError{"unsupported", "this binding's samples are not traced", {}};
    json::object reply;
    try {
      reply["activities"] = read_activities(binding);
    } catch (const TraceLost& e) {
      reply["activity_lost"] = e.what();
    }
    return reply;
  }

  static constexpr size_t kRecordsPerRead = 1u << 17;
  static constexpr size_t kMaxSamplesPerRead = 16;
  static constexpr size_t kMaxOutputs = 64;
  // The kinds of tensors a runner shares (share()): what kernels return, and default inputs.
  static constexpr const char* kOutputs = "outputs";
  static constexpr const char* kInputs = "tensors";

  protocol::BlockingChannel channel_;
  std::map<std::string, std::unique_ptr<LoadedPlugin>> plugins_;
  LoadedPlugin* plugin_ = nullptr;
  LoadedPlugin* companion_plugin_ = nullptr;
  keval_kernel* companion_ = nullptr;
  // Declared before what lives on the device: destroyed after it.
  std::unique_ptr<Engine> engine_;
  keval_kernel* kernel_ = nullptr;
  std::map<int64_t, Binding> bindings_;
  std::map<std::string, std::vector<std::unique_ptr<Tensor>>> shared_; // kind -> share()
  std::string nvtx_range_;
  bool user_code_loaded_ = false; // a compile, companion or program command came: no warm_device
  // load_plugin: its plugin runs on CUDA and it binds a device (not the trusted worker's builder)
  bool binds_cuda_device_ = false;
  bool device_warmed_ = false; // warm_device came (at most once)
#ifdef KEVAL_HAVE_CUDA
  EngineOpener opener_;
  std::future<void> trace_loading_; // load_device_trace_ahead, started once a kernel compiled
#endif
};

} // namespace

int run_runner(int channel_fd, const std::vector<std::string>& prewarm,
               const protocol::SandboxPolicy& sandbox) {
  try {
    // First, while this process has one thread: nothing of a plugin has run yet.
    json::object hello;
    int channel = channel_fd;
    hello["isolation"] = isolation::apply_sandbox(sandbox, &channel);
    // For a plugin that asks the trusted worker for a build while it compiles (the torch_cuda
    // type's load_inline): set before any plugin starts its interpreter.
    ::setenv(runner_msg::kChannelFdVariable, std::to_string(channel).c_str(), 1);
    Runner runner(channel);
    runner.prewarm(prewarm, hello);
    runner.hello(std::move(hello));
    runner.serve();
    return 0;
  } catch (const std::exception& e) {
    spdlog::error("keval runner failed: {}", e.what());
    return 1;
  }
}

} // namespace keval::worker
