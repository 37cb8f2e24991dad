// kernel_type "cuda_program": whole CUDA programs judged by a held-out harness, ComputeEval's
// model (docs/cuda_program.md). A program type (KEVAL_CAP_PROGRAM): the core writes the
// workspace and runs every command in a sandboxed process; this plugin says what a problem means
// here (plan/plan.hpp). The tensor-kernel entries are never called for a program type and say so.
#include "plan/plan.hpp"

#include <keval/plugin.hpp>

#include <filesystem>
#include <string>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <dlfcn.h>

namespace {

// Errors as the SDK's C++ layer makes and releases them (keval/plugin.hpp).
using keval::sdk::detail::destroy_error;
using keval::sdk::detail::make_error;

const keval_manifest* manifest() {
  static const keval_manifest m{
      sizeof(keval_manifest), "cuda_program", "1.0.0",
      "whole CUDA programs judged by a held-out harness's exit code (ComputeEval problems)",
      KEVAL_CAP_PROGRAM};
  return &m;
}

keval_error* not_a_kernel() {
  return make_error(KEVAL_ERROR_UNSUPPORTED,
                    "cuda_program is a whole-program type: its requests are planned by "
                    "plan_program and run by the core, never compiled as a kernel",
                    {});
}

keval_error* compile(const keval_compile_args*, keval_compile_result*) {
  return not_a_kernel();
}
keval_error* bind_device(keval_kernel*, const keval_device_args*) {
  return not_a_kernel();
}
keval_error* launch(keval_kernel*, const keval_launch_args*) {
  return not_a_kernel();
}
void kernel_destroy(keval_kernel*) {}

// The CUPTI injection library built beside this plugin, or "" when it was not built.
std::string profiler_path() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&manifest), &info) == 0 || info.dli_fname == nullptr)
    return "";
  const std::filesystem::path p = std::filesystem::path(info.dli_fname).parent_path() /
                                  "cuda_program" / "libkeval_program_profiler.so";
  std::error_code ec;
  return std::filesystem::exists(p, ec) ? std::filesystem::absolute(p, ec).string() : "";
}

keval_error* plan_program(const keval_program_args* args, const char** plan_json) {
  thread_local std::string plan;
  return keval::sdk::detail::guarded(KEVAL_ERROR_INVALID_REQUEST, [&] {
    if (args == nullptr || args->program_json == nullptr || args->which == nullptr ||
        args->environment_json == nullptr)
      throw keval::sdk::Error(KEVAL_ERROR_INVALID_REQUEST, "plan_program: missing arguments");
    static const keval::cuda_program::Toolchain toolchain = keval::cuda_program::find_toolchain();
    try {
      const boost::json::object program = boost::json::parse(args->program_json).as_object();
      const boost::json::object environment =
          boost::json::parse(args->environment_json).as_object();
      plan = boost::json::serialize(keval::cuda_program::make_plan(
          program, args->which, environment, toolchain, profiler_path()));
    } catch (const std::exception& e) {
      throw keval::sdk::Error(KEVAL_ERROR_INVALID_REQUEST,
                              std::string("cannot plan the program: ") + e.what());
    }
    *plan_json = plan.c_str();
  });
}

const keval_plugin_api* table() {
  static const keval_plugin_api api = [] {
    keval_plugin_api t{};
    t.struct_size = sizeof t;
    t.api_major = KEVAL_PLUGIN_API_MAJOR;
    t.api_minor = KEVAL_PLUGIN_API_MINOR_PROGRAM;
    t.error_destroy = &destroy_error;
    t.manifest = &manifest;
    t.compile = &compile;
    t.bind_device = &bind_device;
    t.default_inputs = nullptr;
    t.launch = &launch;
    t.kernel_destroy = &kernel_destroy;
    t.prewarm = nullptr;
    t.plan_program = &plan_program;
    return t;
  }();
  return &api;
}

} // namespace

extern "C" KEVAL_PLUGIN_EXPORT const keval_plugin_api* keval_plugin_entry_v1(void) {
  return table();
}
