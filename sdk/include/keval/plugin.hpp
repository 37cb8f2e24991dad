// keval plugin SDK — header-only C++ layer over the C ABI in <keval/plugin.h>.
//
// A plugin author writes one class and one macro:
//
//   class MyKernel : public keval::sdk::Kernel {
//     void launch(keval::sdk::LaunchContext& ctx) override { ... }
//   };
//   struct MyPlugin {
//     static keval_manifest manifest() { return keval::sdk::make_manifest("my_type", "1.0.0",
//         "what it does", KEVAL_CAP_DEVICE_CPU); }
//     static std::unique_ptr<keval::sdk::Kernel> compile(const keval::sdk::CompileInput& in);
//   };
//   KEVAL_PLUGIN(MyPlugin)
//
// Exceptions thrown from compile/bind/launch become keval_error objects: keval::sdk::Error
// keeps its code; any other std::exception becomes KEVAL_ERROR_RUNTIME from launch and
// KEVAL_ERROR_INTERNAL elsewhere. Nothing escapes across the C boundary.
#pragma once

#include <keval/plugin.h>

#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace keval::sdk {

// An error with a keval_error_code and optional long details (compiler log, traceback).
class Error : public std::runtime_error {
public:
  Error(keval_error_code code, const std::string& message, std::string details = {})
      : std::runtime_error(message), code_(code), details_(std::move(details)) {}
  keval_error_code code() const noexcept { return code_; }
  const std::string& details() const noexcept { return details_; }

private:
  keval_error_code code_;
  std::string details_;
};

// What compile() receives. Views are valid for the duration of the call.
struct CompileInput {
  std::string_view source_code;
  std::string_view metadata_json; // "{}" when the request had none
  const char* io_contract_json;   // nullptr when the request had no `io`
  std::string_view work_dir;      // private, removed after the job
  int cuda_arch = 0;              // 90 for sm_90; 0 when no CUDA device is expected
  std::string_view side;          // "ref" or "custom"
};

// What launch() receives. Arguments are in IOContract order.
class LaunchContext {
public:
  explicit LaunchContext(const keval_launch_args& args) : args_(args) {}
  size_t num_args() const { return args_.num_args; }
  const keval_arg& arg(size_t i) const {
    if (i >= args_.num_args)
      throw Error(KEVAL_ERROR_INVALID_REQUEST, "argument index " + std::to_string(i) +
                                                   " out of range (have " +
                                                   std::to_string(args_.num_args) + ")");
    return args_.args[i];
  }
  void* stream() const { return args_.stream; }
  // For KEVAL_CAP_RETURNS_OUTPUTS plugins: hands a produced tensor to the core.
  void return_output(keval_dl_managed_tensor* tensor) {
    if (args_.outputs == nullptr || args_.num_outputs == nullptr)
      throw Error(KEVAL_ERROR_INTERNAL, "this launch does not accept returned outputs");
    if (*args_.num_outputs >= args_.max_outputs) {
      if (tensor != nullptr && tensor->deleter != nullptr)
        tensor->deleter(tensor);
      throw Error(KEVAL_ERROR_RUNTIME,
                  "kernel returned more than " + std::to_string(args_.max_outputs) + " outputs");
    }
    args_.outputs[(*args_.num_outputs)++] = tensor;
  }

private:
  const keval_launch_args& args_;
};

// What default_inputs() receives.
class InputsContext {
public:
  explicit InputsContext(const keval_default_inputs_args& args) : args_(args) {}
  keval_dl_device device() const { return args_.device; }
  void* stream() const { return args_.stream; }
  uint64_t seed() const { return args_.seed; }
  void add_input(keval_dl_managed_tensor* tensor) {
    if (*args_.num_inputs >= args_.max_inputs) {
      if (tensor != nullptr && tensor->deleter != nullptr)
        tensor->deleter(tensor);
      throw Error(KEVAL_ERROR_RUNTIME,
                  "more than " + std::to_string(args_.max_inputs) + " default inputs");
    }
    args_.inputs[(*args_.num_inputs)++] = tensor;
  }

private:
  const keval_default_inputs_args& args_;
};

// One compiled kernel. Override what your kernel type needs.
class Kernel {
public:
  virtual ~Kernel() = default;
  // Called once after the device grant, with the device current.
  virtual void bind_device(const keval_device_args& /*device*/) {}
  // Runs the kernel once.
  virtual void launch(LaunchContext& ctx) = 0;
  // Only for KEVAL_CAP_DEFAULT_INPUTS plugins.
  virtual void default_inputs(InputsContext& /*ctx*/) {
    throw Error(KEVAL_ERROR_UNSUPPORTED, "this kernel type does not produce default inputs");
  }
  // JSON object text merged into the result metadata (kernel name, compile log, ...).
  virtual std::string info_json() const { return "{}"; }
};

inline keval_manifest make_manifest(const char* kernel_type, const char* plugin_version,
                                    const char* description, uint32_t capabilities) {
  keval_manifest m{};
  m.struct_size = sizeof(keval_manifest);
  m.kernel_type = kernel_type;
  m.plugin_version = plugin_version;
  m.description = description;
  m.capabilities = capabilities;
  return m;
}

namespace detail {

// The error object handed to the host: the C struct first, the strings it points into after.
struct OwnedError {
  keval_error c{};
  std::string message;
  std::string details;
};

inline keval_error* make_error(keval_error_code code, std::string message,
                               std::string details) noexcept {
  try {
    auto* e = new OwnedError;
    e->message = std::move(message);
    e->details = std::move(details);
    e->c.struct_size = sizeof(keval_error);
    e->c.code = code;
    e->c.message = e->message.c_str();
    e->c.details = e->details.empty() ? nullptr : e->details.c_str();
    return &e->c;
  } catch (...) {
    // Out of memory while reporting an error: a static object the destroyer recognises.
    static keval_error oom{sizeof(keval_error), KEVAL_ERROR_INTERNAL,
                           "out of memory while reporting an error", nullptr};
    return &oom;
  }
}

inline void destroy_error(keval_error* error) noexcept {
  if (error == nullptr ||
      std::strcmp(error->message, "out of memory while reporting an error") == 0)
    return;
  // keval_error is the first member of the standard-layout OwnedError.
  delete reinterpret_cast<OwnedError*>(error);
}

// Runs `body`, converting any exception into a keval_error*.
template <class Body> keval_error* guarded(keval_error_code fallback, Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const Error& e) {
    return make_error(e.code(), e.what(), e.details());
  } catch (const std::bad_alloc&) {
    return make_error(KEVAL_ERROR_INTERNAL, "out of memory", {});
  } catch (const std::exception& e) {
    return make_error(fallback, e.what(), {});
  } catch (...) {
    return make_error(fallback, "unknown exception", {});
  }
}

struct KernelBox {
  std::unique_ptr<Kernel> kernel;
  std::string info;
};

inline Kernel& unbox(keval_kernel* k) {
  if (k == nullptr)
    throw Error(KEVAL_ERROR_INTERNAL, "null kernel handle");
  return *reinterpret_cast<KernelBox*>(k)->kernel;
}

template <class Plugin> const keval_manifest* manifest_thunk() {
  static const keval_manifest m = Plugin::manifest();
  return &m;
}

template <class Plugin>
keval_error* compile_thunk(const keval_compile_args* args, keval_compile_result* result) {
  return guarded(KEVAL_ERROR_INTERNAL, [&] {
    if (args == nullptr || result == nullptr)
      throw Error(KEVAL_ERROR_INTERNAL, "compile called with null arguments");
    CompileInput in;
    in.source_code = args->source_code ? args->source_code : "";
    in.metadata_json = args->metadata_json ? args->metadata_json : "{}";
    in.io_contract_json = args->io_contract_json;
    in.work_dir = args->work_dir ? args->work_dir : "";
    in.cuda_arch = args->cuda_arch;
    in.side = args->side ? args->side : "custom";
    auto box = std::make_unique<KernelBox>();
    box->kernel = Plugin::compile(in);
    if (!box->kernel)
      throw Error(KEVAL_ERROR_INTERNAL, "plugin compile returned no kernel");
    box->info = box->kernel->info_json();
    result->kernel = reinterpret_cast<keval_kernel*>(box.get());
    result->info_json = box->info.c_str();
    box.release();
  });
}

inline keval_error* bind_thunk(keval_kernel* k, const keval_device_args* args) {
  return guarded(KEVAL_ERROR_RUNTIME, [&] { unbox(k).bind_device(*args); });
}

inline keval_error* inputs_thunk(keval_kernel* k, const keval_default_inputs_args* args) {
  return guarded(KEVAL_ERROR_RUNTIME, [&] {
    InputsContext ctx(*args);
    unbox(k).default_inputs(ctx);
  });
}

inline keval_error* launch_thunk(keval_kernel* k, const keval_launch_args* args) {
  return guarded(KEVAL_ERROR_RUNTIME, [&] {
    LaunchContext ctx(*args);
    unbox(k).launch(ctx);
  });
}

inline void kernel_destroy_thunk(keval_kernel* k) {
  delete reinterpret_cast<KernelBox*>(k);
}

// Plugins may define `static void prewarm();` (SDK 1.1): see keval_plugin_api::prewarm.
template <class Plugin, class = void> struct HasPrewarm : std::false_type {};
template <class Plugin>
struct HasPrewarm<Plugin, std::void_t<decltype(Plugin::prewarm())>> : std::true_type {};

template <class Plugin> keval_error* prewarm_thunk() {
  return guarded(KEVAL_ERROR_INTERNAL, [] { Plugin::prewarm(); });
}

// Plugins may define `static void warm_device(const keval_device_args& args);` (SDK 1.4): see
// keval_plugin_api::warm_device. Hosts before 1.4 never call it, so api_minor does not rise.
template <class Plugin, class = void> struct HasWarmDevice : std::false_type {};
template <class Plugin>
struct HasWarmDevice<
    Plugin, std::void_t<decltype(Plugin::warm_device(std::declval<const keval_device_args&>()))>>
    : std::true_type {};

template <class Plugin> keval_error* warm_device_thunk(const keval_device_args* args) {
  return guarded(KEVAL_ERROR_INTERNAL, [args] {
    if (args == nullptr)
      throw Error(KEVAL_ERROR_INTERNAL, "warm_device called with null arguments");
    Plugin::warm_device(*args);
  });
}

template <class Plugin> const keval_plugin_api* api_table() {
  static const keval_plugin_api table = [] {
    keval_plugin_api t{};
    t.struct_size = sizeof(keval_plugin_api);
    t.api_major = KEVAL_PLUGIN_API_MAJOR;
    // The oldest hosts that can run it (plugin.h's versioning rules), not this header's minor.
    t.api_minor = HasPrewarm<Plugin>::value ? KEVAL_PLUGIN_API_MINOR_PREWARM : 0;
    t.error_destroy = &destroy_error;
    t.manifest = &manifest_thunk<Plugin>;
    t.compile = &compile_thunk<Plugin>;
    t.bind_device = &bind_thunk;
    t.default_inputs =
        (Plugin::manifest().capabilities & KEVAL_CAP_DEFAULT_INPUTS) ? &inputs_thunk : nullptr;
    t.launch = &launch_thunk;
    t.kernel_destroy = &kernel_destroy_thunk;
    if constexpr (HasPrewarm<Plugin>::value)
      t.prewarm = &prewarm_thunk<Plugin>;
    if constexpr (HasWarmDevice<Plugin>::value)
      t.warm_device = &warm_device_thunk<Plugin>;
    return t;
  }();
  return &table;
}

} // namespace detail
} // namespace keval::sdk

// Exports the plugin's entry symbol. Use once per plugin library, at namespace scope.
#define KEVAL_PLUGIN(PluginType)                                                                   \
  extern "C" KEVAL_PLUGIN_EXPORT const keval_plugin_api* keval_plugin_entry_v1(void) {             \
    return ::keval::sdk::detail::api_table<PluginType>();                                          \
  }
