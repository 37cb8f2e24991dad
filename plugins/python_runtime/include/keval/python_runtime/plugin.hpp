// keval's Python runtime, as the Python-based kernel-type plugins (torch, triton, multi_kernel)
// use it.
//
// One shared library, libkeval_python_runtime.so, embeds CPython for the whole keval-worker
// process: a compare of torch against triton loads two plugins and both run in the same
// interpreter. It lives beside the plugins directory (lib/keval/), never in it, and plugins find
// it through their RPATH ($ORIGIN/..). A plugin is its manifest plus the name of the Python
// module that implements its kernel type (keval_runtime.<type>_driver); this header builds the
// SDK's function table from the two:
//
//   constexpr keval::python_runtime::KernelTypeSpec kTorch{
//       "torch", "1.0.0", "PyTorch source ...", KEVAL_CAP_DEVICE_CPU | ...,
//       "keval_runtime.torch_driver"};
//   KEVAL_PYTHON_PLUGIN(kTorch)
//
// The boundary between a plugin and the runtime is C (the keval_python_* functions), like the
// SDK's own: errors are keval_error objects, never exceptions, and they are released by the
// runtime that allocated them. manifest() is the plugin's static data and starts nothing; the
// interpreter starts at the first compile().
#pragma once

#include <keval/plugin.h>

#include <cstdint>

#define KEVAL_PYTHON_RUNTIME_API __attribute__((visibility("default")))

extern "C" {

// Compiles `args->source_code` with the driver module `driver_module` (importable from
// keval_runtime, e.g. "keval_runtime.torch_driver"): starts the interpreter on first use, loads
// the source as a fresh module and lets the driver choose its target. Python exceptions become
// errors with their traceback in `details`.
KEVAL_PYTHON_RUNTIME_API keval_error* keval_python_compile(const char* driver_module,
                                                           const keval_compile_args* args,
                                                           keval_compile_result* result);
KEVAL_PYTHON_RUNTIME_API keval_error* keval_python_bind_device(keval_kernel* kernel,
                                                               const keval_device_args* args);
KEVAL_PYTHON_RUNTIME_API keval_error*
keval_python_default_inputs(keval_kernel* kernel, const keval_default_inputs_args* args);
KEVAL_PYTHON_RUNTIME_API keval_error* keval_python_launch(keval_kernel* kernel,
                                                          const keval_launch_args* args);
KEVAL_PYTHON_RUNTIME_API void keval_python_kernel_destroy(keval_kernel* kernel);
// Starts the interpreter and imports `driver_module`, then calls its prewarm() when it has one
// (which imports the type's frameworks): SDK 1.1's prewarm, for workers started ahead of a job.
KEVAL_PYTHON_RUNTIME_API keval_error* keval_python_prewarm(const char* driver_module);
KEVAL_PYTHON_RUNTIME_API void keval_python_error_destroy(keval_error* error);

} // extern "C"

namespace keval::python_runtime {

// What distinguishes one Python kernel type from another.
struct KernelTypeSpec {
  const char* kernel_type;    // the request's kernel_type
  const char* plugin_version; // semver
  const char* description;    // one line for `keval plugins`
  uint32_t capabilities;      // KEVAL_CAP_*
  const char* driver_module;  // the Python module implementing the type
};

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
      return keval_python_compile(Spec.driver_module, args, result);
    };
    t.bind_device = &keval_python_bind_device;
    t.default_inputs =
        (Spec.capabilities & KEVAL_CAP_DEFAULT_INPUTS) ? &keval_python_default_inputs : nullptr;
    t.launch = &keval_python_launch;
    t.kernel_destroy = &keval_python_kernel_destroy;
    t.prewarm = []() { return keval_python_prewarm(Spec.driver_module); };
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
