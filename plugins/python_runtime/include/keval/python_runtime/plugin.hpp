// keval's Python runtime, as Python-based kernel-type plugins use it (torch, torch_cuda, triton,
// multi_kernel in keval's tree, and third parties' through the SDK: sdk/README.md).
//
// One shared library, libkeval_python_runtime.so, embeds CPython for the whole keval-worker
// process (one job per process; a runner runs one side of it). A Python plugin is a small C++
// module, its manifest plus the name of its driver (a Python package), built from this header:
//
//   constexpr keval::python_runtime::KernelTypeSpec kTorch{
//       "torch", "1.0.0", "PyTorch source ...", KEVAL_CAP_DEVICE_CPU | ...,
//       "keval_torch"};
//   KEVAL_PYTHON_PLUGIN(kTorch)
//
// The driver package is found in the `python/` folder beside the plugin library (where the CMake
// helpers keval_add_python_plugin and keval_sdk_add_python_plugin put it), and imports keval's
// shared modules as `keval_runtime.*`. Its name must be unique among the plugins a keval loads:
// every Python type of a worker shares one interpreter and one module namespace.
//
// The boundary between a plugin and the runtime is C (the keval_python_* functions), like the
// SDK's own: errors are keval_error objects, never exceptions, and they are released by the
// runtime that allocated them. manifest() is the plugin's static data and starts nothing; the
// interpreter starts at the first compile() or prewarm().
#pragma once

#include <keval/plugin.h>

#include <cstdint>
#include <string>

#include <dlfcn.h>

#define KEVAL_PYTHON_RUNTIME_API __attribute__((visibility("default")))

extern "C" {

// Where a plugin's driver is: the Python package `module`, importable from `directory` (absolute;
// null when the package is on sys.path already). struct_size first, as every SDK struct.
typedef struct keval_python_driver {
  size_t struct_size;
  const char* module;
  const char* directory;
} keval_python_driver;

// Compiles `args->source_code` with `driver`: starts the interpreter on first use, imports the
// driver and calls its compile(). Python exceptions become errors with their traceback in
// `details`.
KEVAL_PYTHON_RUNTIME_API keval_error* keval_python_compile(const keval_python_driver* driver,
                                                           const keval_compile_args* args,
                                                           keval_compile_result* result);
KEVAL_PYTHON_RUNTIME_API keval_error* keval_python_bind_device(keval_kernel* kernel,
                                                               const keval_device_args* args);
KEVAL_PYTHON_RUNTIME_API keval_error*
keval_python_default_inputs(keval_kernel* kernel, const keval_default_inputs_args* args);
KEVAL_PYTHON_RUNTIME_API keval_error* keval_python_launch(keval_kernel* kernel,
                                                          const keval_launch_args* args);
KEVAL_PYTHON_RUNTIME_API void keval_python_kernel_destroy(keval_kernel* kernel);
// Starts the interpreter and imports `driver`, then calls its prewarm() when it has one (which
// imports the type's frameworks): SDK 1.1's prewarm, for workers started ahead of a job.
KEVAL_PYTHON_RUNTIME_API keval_error* keval_python_prewarm(const keval_python_driver* driver);
// Calls the driver's warm_device(device_type, device_id, stream) when it has one: SDK 1.4's
// warm_device, the type's framework set up on the device opened ahead (keval_runtime.device).
KEVAL_PYTHON_RUNTIME_API keval_error* keval_python_warm_device(const keval_python_driver* driver,
                                                               const keval_device_args* args);
KEVAL_PYTHON_RUNTIME_API void keval_python_error_destroy(keval_error* error);

} // extern "C"

namespace keval::python_runtime {

// What distinguishes one Python kernel type from another.
struct KernelTypeSpec {
  const char* kernel_type;    // the request's kernel_type
  const char* plugin_version; // semver
  const char* description;    // one line for `keval plugins`
  uint32_t capabilities;      // KEVAL_CAP_*
  const char* driver_module;  // the Python package implementing the type (its driver)
};

// The driver of the plugin described by `Spec`: its package, in python/ beside this library.
template <const KernelTypeSpec& Spec> const keval_python_driver* driver() {
  static const std::string directory = [] {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<const void*>(&driver<Spec>), &info) == 0 ||
        info.dli_fname == nullptr)
      return std::string();
    std::string library = info.dli_fname;
    const auto slash = library.rfind('/');
    return (slash == std::string::npos ? std::string(".") : library.substr(0, slash)) + "/python";
  }();
  static const keval_python_driver location{sizeof(keval_python_driver), Spec.driver_module,
                                            directory.empty() ? nullptr : directory.c_str()};
  return &location;
}

// The SDK function table of the plugin described by `Spec`.
template <const KernelTypeSpec& Spec> const keval_plugin_api* plugin_api() {
  static const keval_plugin_api table = [] {
    keval_plugin_api t{};
    t.struct_size = sizeof(keval_plugin_api);
    t.api_major = KEVAL_PLUGIN_API_MAJOR;
    t.api_minor = KEVAL_PLUGIN_API_MINOR_PREWARM; // every Python type prewarms its interpreter
    t.error_destroy = &keval_python_error_destroy;
    t.manifest = []() -> const keval_manifest* {
      static const keval_manifest manifest{sizeof(keval_manifest), Spec.kernel_type,
                                           Spec.plugin_version, Spec.description,
                                           Spec.capabilities};
      return &manifest;
    };
    t.compile = [](const keval_compile_args* args, keval_compile_result* result) {
      return keval_python_compile(driver<Spec>(), args, result);
    };
    t.bind_device = &keval_python_bind_device;
    t.default_inputs =
        (Spec.capabilities & KEVAL_CAP_DEFAULT_INPUTS) ? &keval_python_default_inputs : nullptr;
    t.launch = &keval_python_launch;
    t.kernel_destroy = &keval_python_kernel_destroy;
    t.prewarm = []() { return keval_python_prewarm(driver<Spec>()); };
    // Hosts before 1.4 never call it: api_minor stays (KEVAL_PLUGIN_API_MINOR_WARM_DEVICE).
    t.warm_device = [](const keval_device_args* args) {
      return keval_python_warm_device(driver<Spec>(), args);
    };
    return t;
  }();
  return &table;
}

} // namespace keval::python_runtime

// Exports the plugin's entry symbol for the KernelTypeSpec object `spec` (namespace scope).
#define KEVAL_PYTHON_PLUGIN(spec)                                                                  \
  extern "C" KEVAL_PLUGIN_EXPORT const keval_plugin_api* keval_plugin_entry_v1(void) {             \
    return ::keval::python_runtime::plugin_api<spec>();                                            \
  }
