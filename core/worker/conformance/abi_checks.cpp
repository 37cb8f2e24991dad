#include "worker/conformance/abi_checks.hpp"

#include "common/plugin_abi.hpp"
#include "common/remove_tree.hpp"
#include "request/parse.hpp"
#include "worker/pipeline/plugin_loader.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace keval::worker::conformance {

namespace json = boost::json;

namespace {

// The 1.0 table ends at kernel_destroy; a 1.0 host reads nothing past it.
constexpr size_t kTableSize10 = offsetof(keval_plugin_api, kernel_destroy) + sizeof(void*);
// A source no kernel type compiles: not Python, not C++, not a name any type looks up.
constexpr const char* kUncompilable = "keval conformance: (this is not a kernel\n\x01 }}}\n";
// Bytes a "newer host" appends to each argument struct, and the canary past the result struct.
constexpr size_t kNewerHostBytes = 64;
constexpr unsigned char kCanary = 0xA5;

struct Outcome {
  std::string status = "pass"; // pass, fail, skip
  std::string detail;
  json::object facts; // typed findings a reader may act on (the manifest's capabilities)
  void fail(const std::string& why) {
    if (status != "fail")
      detail.clear();
    status = "fail";
    detail += (detail.empty() ? "" : "; ") + why;
  }
  void skip(const std::string& why) {
    status = "skip";
    detail = why;
  }
};

void print(const char* check, const Outcome& outcome) {
  json::object line{{"check", check}, {"status", outcome.status}, {"detail", outcome.detail}};
  for (const auto& [key, value] : outcome.facts)
    line[key] = value;
  std::cout << json::serialize(line) << std::endl; // flushed: a crash next must not lose it
}

// Calls into the plugin; an exception escaping the C boundary is a failure of `outcome`.
bool guarded(Outcome& outcome, const char* call, const std::function<void()>& body) {
  try {
    body();
    return true;
  } catch (const std::exception& e) {
    outcome.fail(std::string(call) + " threw a C++ exception across the C boundary: " + e.what());
  } catch (...) {
    outcome.fail(std::string(call) + " threw across the C boundary");
  }
  return false;
}

// Runs `body` on a thread of its own: the serving thread is not the loading thread.
void on_serving_thread(const std::function<void()>& body) {
  std::thread(body).join();
}

std::string text_or_null(const char* text) {
  return text == nullptr ? "(null)" : "'" + std::string(text) + "'";
}

// The plugins' work_dir for one conformance run, as a job's is its own: a fresh directory under
// the temporary one, removed with whatever the plugin left there (a Python type writes the source
// it loads, the cuda type its CUBIN) when the run ends.
class ScratchDir {
public:
  ScratchDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "keval-conformance-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
    path_ = pattern;
  }
  ~ScratchDir() { remove_tree(path_); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

private:
  std::filesystem::path path_;
};

// The outcome of one compile call: its error (code, message) and whether a kernel came back.
struct CompileAnswer {
  bool error = false;
  int32_t code = 0;
  std::string message;
  keval_kernel* kernel = nullptr;
  std::string info;
  bool result_overrun = false; // wrote past the result struct it was given
};

// Calls compile with argument and result structs `extra` bytes larger than this header's, junk
// in the argument's tail and a canary in the result's.
CompileAnswer compile_with(const keval_plugin_api& api, const Sample& sample, int32_t cuda_arch,
                           const std::filesystem::path& work_dir_path, size_t extra,
                           Outcome& outcome) {
  std::vector<unsigned char> args_bytes(sizeof(keval_compile_args) + extra, 0x5A);
  std::vector<unsigned char> result_bytes(sizeof(keval_compile_result) + extra, kCanary);
  auto* args = reinterpret_cast<keval_compile_args*>(args_bytes.data());
  auto* result = reinterpret_cast<keval_compile_result*>(result_bytes.data());
  std::memset(args, 0, sizeof(keval_compile_args));
  std::memset(result, 0, sizeof(keval_compile_result));
  args->struct_size = args_bytes.size();
  args->source_code = sample.source.c_str();
  args->metadata_json = sample.metadata_json.c_str();
  args->io_contract_json = sample.io_json ? sample.io_json->c_str() : nullptr;
  const std::string work_dir = work_dir_path.string();
  args->work_dir = work_dir.c_str();
  args->cuda_arch = cuda_arch;
  args->side = sample.side.c_str();
  result->struct_size = result_bytes.size();
  CompileAnswer answer;
  guarded(outcome, "compile", [&] {
    PluginError error(api, api.compile(args, result));
    answer.error = static_cast<bool>(error);
    answer.code = error.code();
    answer.message = error.message();
  });
  answer.kernel = result->kernel;
  answer.info = result->info_json != nullptr ? result->info_json : "";
  for (size_t i = sizeof(keval_compile_result); i < result_bytes.size(); ++i)
    answer.result_overrun |= result_bytes[i] != kCanary;
  return answer;
}

void check_manifest(const LoadedPlugin& plugin, Outcome& outcome) {
  const keval_manifest& m = plugin.manifest();
  if (!std::regex_match(m.kernel_type, std::regex("[a-z][a-z0-9_]{0,63}")))
    outcome.fail("kernel_type " + text_or_null(m.kernel_type) +
                 " is not a lower-case identifier (a-z, 0-9, _; at most 64)");
  if (!std::regex_match(m.plugin_version, std::regex(R"(\d+\.\d+\.\d+([-+][0-9A-Za-z.+-]*)?)")))
    outcome.fail("plugin_version " + text_or_null(m.plugin_version) + " is not semver");
  if (const uint32_t unknown = m.capabilities & ~known_capabilities(); unknown != 0) {
    std::ostringstream hex;
    hex << std::hex << unknown;
    outcome.fail("capability bits this SDK does not define: 0x" + hex.str());
  }
  if ((m.capabilities & (KEVAL_CAP_DEVICE_CPU | KEVAL_CAP_DEVICE_CUDA | KEVAL_CAP_PROGRAM)) == 0)
    outcome.fail("declares no device (KEVAL_CAP_DEVICE_CPU or KEVAL_CAP_DEVICE_CUDA)");
  guarded(outcome, "manifest", [&] {
    const keval_manifest* again = plugin.api().manifest();
    if (again == nullptr || std::strcmp(again->kernel_type, m.kernel_type) != 0 ||
        again->capabilities != m.capabilities)
      outcome.fail("a second manifest() call describes another plugin");
  });
  json::array names;
  std::string listed;
  for (const auto& name : capability_names(m.capabilities)) {
    names.emplace_back(name);
    listed += (listed.empty() ? "" : ",") + name;
  }
  outcome.facts["capabilities"] = std::move(names);
  if (outcome.status == "pass")
    outcome.detail = std::string(m.kernel_type) + " " + m.plugin_version + " [" + listed + "]";
}

void check_versioning(const keval_plugin_api& api, Outcome& outcome) {
  const keval_plugin_api* table = &api; // KEVAL_STRUCT_HAS takes a pointer
  const bool has_prewarm =
      KEVAL_STRUCT_HAS(table, keval_plugin_api, prewarm) && api.prewarm != nullptr;
  if (has_prewarm && api.api_minor < KEVAL_PLUGIN_API_MINOR_PREWARM)
    outcome.fail("sets prewarm (SDK 1." + std::to_string(KEVAL_PLUGIN_API_MINOR_PREWARM) +
                 ") but declares api_minor " + std::to_string(api.api_minor) +
                 ": a host that old would not know of it");
  if (api.struct_size < kTableSize10)
    outcome.fail("table of " + std::to_string(api.struct_size) + " bytes, smaller than 1.0's " +
                 std::to_string(kTableSize10));
  if (outcome.status == "pass")
    outcome.detail = "api " + std::to_string(api.api_major) + "." + std::to_string(api.api_minor) +
                     ": loads in hosts 1." + std::to_string(api.api_minor) + " and newer; table " +
                     std::to_string(api.struct_size) + " bytes";
}

} // namespace

std::optional<Sample> sample_from_request(const std::filesystem::path& request_file,
                                          const std::string& kernel_type) {
  std::ifstream in(request_file, std::ios::binary);
  if (!in)
    throw std::runtime_error("cannot read " + request_file.string());
  std::stringstream text;
  text << in.rdbuf();
  boost::system::error_code ec;
  const json::value doc = json::parse(text.str(), ec);
  if (ec || !doc.is_object())
    throw std::runtime_error(request_file.string() + " is not a JSON object");
  // keval's own parser: a sample is held to what a request is, and a bad one names its field.
  const auto mode = doc.as_object().contains("ref_kernel") ? request::EvalRequest::Mode::compare
                                                           : request::EvalRequest::Mode::evaluate;
  request::EvalRequest parsed;
  try {
    parsed = request::parse_request(doc, mode);
  } catch (const request::RequestError& e) {
    throw std::runtime_error(request_file.string() + ": " + e.what());
  }
  const request::KernelCode* sides[] = {&parsed.kernel, parsed.ref ? &*parsed.ref : nullptr};
  for (const request::KernelCode* code : sides) {
    if (code == nullptr || code->kernel_type != kernel_type)
      continue;
    Sample sample;
    sample.source = code->source_code;
    sample.side = code == &parsed.kernel ? "custom" : "ref";
    sample.metadata_json = json::serialize(code->metadata);
    // The side's own IOContract, else the other side's (a compare borrows it).
    const request::KernelCode* other = code == &parsed.kernel ? sides[1] : &parsed.kernel;
    if (!code->io_json.is_null())
      sample.io_json = json::serialize(code->io_json);
    else if (other != nullptr && !other->io_json.is_null())
      sample.io_json = json::serialize(other->io_json);
    return sample;
  }
  return std::nullopt;
}

// A whole-program type (KEVAL_CAP_PROGRAM): compile_error and newer_host do not apply (its
// compile is never called); "compile" is its plan of the sample, which must be a JSON object
// with the steps the core runs (docs/cuda_program.md), or a reason it is skipped here.
template <class Report, class SkipRest>
bool check_program(const LoadedPlugin& plugin, const std::optional<Sample>& sample,
                   const Outcome& sample_problem, bool have_request, int target_arch,
                   Report& report, SkipRest& skip_rest) {
  for (const char* check : {"compile_error", "newer_host"}) {
    Outcome skipped;
    skipped.skip("a whole-program type: planned by plan_program, never compiled as a kernel");
    report(check, skipped);
  }
  if (!have_request) {
    skip_rest("compile", "no sample request (--request FILE)");
    return true;
  }
  if (!sample) {
    report("compile", sample_problem);
    skip_rest("kernel_destroy", "no sample planned");
    return false;
  }
  Outcome plan;
  on_serving_thread([&] {
    guarded(plan, "plan_program", [&] {
      const std::string environment =
          json::serialize(json::object{{"cuda_arch", target_arch}, {"gpu_count", 0}});
      keval_program_args args{};
      args.struct_size = sizeof args;
      args.program_json = sample->metadata_json.c_str();
      args.which = "solution";
      args.environment_json = environment.c_str();
      const char* plan_json = nullptr;
      PluginError error(plugin.api(), plugin.plan_program()(&args, &plan_json));
      if (error) {
        plan.fail(std::string("plan_program failed: ") + error_code_name(error.code()) + ": " +
                  error.message());
        return;
      }
      boost::system::error_code ec;
      const json::value parsed = json::parse(plan_json == nullptr ? "" : plan_json, ec);
      if (ec || !parsed.is_object()) {
        plan.fail("plan_program returned no JSON object");
        return;
      }
      const json::object& o = parsed.as_object();
      if (const json::value* skipped = o.if_contains("skipped"); skipped && skipped->is_string())
        plan.detail = "planned as skipped here: " + std::string(skipped->as_string());
      else if (!o.contains("test") || !o.contains("build_full"))
        plan.fail("the plan has no test or build_full step");
      else
        plan.detail = "plan_program: " + json::serialize(o.at("test")).substr(0, 160);
    });
  });
  report("compile", plan);
  Outcome destroy;
  destroy.skip("a whole-program type has no kernel to release");
  report("kernel_destroy", destroy);
  return true;
}

int run_abi_checks(const std::filesystem::path& path,
                   const std::optional<std::filesystem::path>& request_file, int32_t target_arch) {
  json::array order; // first line: the checks to expect, so a reader can tell which crashed
  for (const char* check : kAbiChecks)
    order.emplace_back(check);
  std::cout << json::serialize(json::object{{"checks", std::move(order)}}) << std::endl;
  int failures = 0;
  auto report = [&](const char* check, const Outcome& outcome) {
    failures += outcome.status == "fail";
    print(check, outcome);
  };
  // Skips every check from `first` on (by name: the order lives in kAbiChecks alone).
  auto skip_rest = [&](std::string_view first, const std::string& why) {
    size_t from = 0;
    while (from < std::size(kAbiChecks) && kAbiChecks[from] != first)
      ++from;
    for (size_t i = from; i < std::size(kAbiChecks); ++i) {
      Outcome skipped;
      skipped.skip(why);
      report(kAbiChecks[i], skipped);
    }
  };

  std::unique_ptr<LoadedPlugin> plugin;
  Outcome loads;
  guarded(loads, "the entry point or manifest", [&] {
    try {
      plugin = std::make_unique<LoadedPlugin>(path);
    } catch (const PluginLoadError& e) {
      loads.fail(e.what());
    }
  });
  report("loads", loads);
  if (plugin == nullptr) {
    skip_rest("manifest", "the plugin did not load");
    return 1;
  }
  const keval_plugin_api& api = plugin->api();

  Outcome manifest;
  check_manifest(*plugin, manifest);
  report("manifest", manifest);
  Outcome versioning;
  check_versioning(api, versioning);
  report("versioning", versioning);

  Outcome prewarm;
  const keval_plugin_api* table = &api; // KEVAL_STRUCT_HAS takes a pointer
  if (!KEVAL_STRUCT_HAS(table, keval_plugin_api, prewarm) || api.prewarm == nullptr) {
    prewarm.skip("the plugin has no prewarm");
  } else {
    on_serving_thread([&] {
      guarded(prewarm, "prewarm", [&] {
        PluginError error(api, api.prewarm());
        if (error)
          prewarm.detail =
              "returned an error (logged; the job does the setup itself): " + error.message();
      });
    });
  }
  report("prewarm", prewarm);

  Sample uncompilable;
  uncompilable.source = kUncompilable;
  std::optional<Sample> sample;
  Outcome sample_problem;
  if (request_file) {
    try {
      sample = sample_from_request(*request_file, plugin->manifest().kernel_type);
      if (!sample)
        sample_problem.fail(request_file->string() + " has no side of kernel_type '" +
                            plugin->manifest().kernel_type + "'");
    } catch (const std::exception& e) {
      sample_problem.fail(e.what());
    }
  }
  if (sample) { // the bad source with the sample's contract: the source is what is at fault
    uncompilable.metadata_json = sample->metadata_json;
    uncompilable.io_json = sample->io_json;
  }

  // A whole-program type is never compiled as a kernel: its checks are the plan of the sample.
  if (plugin->has(KEVAL_CAP_PROGRAM))
    return check_program(*plugin, sample, sample_problem, request_file.has_value(), target_arch,
                         report, skip_rest)
               ? (failures == 0 ? 0 : 1)
               : 1;

  // What the host would pass: a CUDA type compiles for the target GPU before any device exists.
  const int32_t cuda_arch = plugin->has(KEVAL_CAP_DEVICE_CUDA) ? target_arch : 0;
  std::optional<ScratchDir> scratch; // outlives every kernel compiled below
  try {
    scratch.emplace();
  } catch (const std::exception& e) { // the machine's fault, but nothing past here was checked
    Outcome no_directory;
    no_directory.fail(std::string("cannot create a work directory for the plugin's compiles (") +
                      e.what() + ")");
    report("compile_error", no_directory);
    skip_rest("newer_host", "no work directory for the plugin's compiles");
    return 1;
  }
  const std::filesystem::path& work_dir = scratch->path();
  Outcome compile_error;
  CompileAnswer bad;
  on_serving_thread(
      [&] { bad = compile_with(api, uncompilable, cuda_arch, work_dir, 0, compile_error); });
  if (bad.error && bad.code == KEVAL_ERROR_UNSUPPORTED) {
    compile_error.skip("this machine cannot run the plugin: " + bad.message);
  } else if (!bad.error) {
    compile_error.fail("compile accepted a source that is not a kernel");
  } else if (bad.code == KEVAL_ERROR_INVALID_REQUEST && !uncompilable.io_json &&
             plugin->has(KEVAL_CAP_REQUIRES_IO_CONTRACT)) {
    compile_error.detail = "refused for want of an IOContract (give --request to test the "
                           "compiler's own error): " +
                           bad.message;
  } else if (bad.code != KEVAL_ERROR_COMPILE) {
    compile_error.fail(std::string("error code ") + error_code_name(bad.code) +
                       ", not KEVAL_ERROR_COMPILE: " + bad.message);
  } else if (bad.message.empty() || bad.message == "(no message)") {
    compile_error.fail("the compile error has no message");
  } else {
    compile_error.detail = bad.message.substr(0, 200);
  }
  if (bad.error && bad.kernel != nullptr)
    compile_error.fail("a failed compile also returned a kernel");
  report("compile_error", compile_error);

  Outcome newer;
  CompileAnswer wide;
  on_serving_thread(
      [&] { wide = compile_with(api, uncompilable, cuda_arch, work_dir, kNewerHostBytes, newer); });
  if (wide.error != bad.error || wide.code != bad.code)
    newer.fail(std::string("with structs ") + std::to_string(kNewerHostBytes) +
               " bytes larger, compile answered " +
               (wide.error ? error_code_name(wide.code) : "success") + " instead of " +
               (bad.error ? error_code_name(bad.code) : "success"));
  if (wide.result_overrun)
    newer.fail("wrote past the keval_compile_result it knows (struct_size says larger)");
  if (newer.status == "pass")
    newer.detail = "argument and result structs " + std::to_string(kNewerHostBytes) +
                   " bytes larger than this SDK's: same answer, nothing written past";
  report("newer_host", newer);
  for (keval_kernel* stray : {bad.kernel, wide.kernel})
    if (stray != nullptr)
      api.kernel_destroy(stray);

  if (!request_file) {
    skip_rest("compile", "no sample request (--request FILE)");
    return failures == 0 ? 0 : 1;
  }
  if (!sample) {
    report("compile", sample_problem);
    skip_rest("kernel_destroy", "no sample compiled");
    return 1;
  }
  Outcome compile;
  CompileAnswer good;
  on_serving_thread([&] { good = compile_with(api, *sample, cuda_arch, work_dir, 0, compile); });
  if (good.error && good.code == KEVAL_ERROR_UNSUPPORTED) {
    compile.skip("this machine cannot run the plugin: " + good.message);
  } else if (good.error) {
    compile.fail(std::string("the sample did not compile: ") + error_code_name(good.code) + ": " +
                 good.message);
  } else if (good.kernel == nullptr) {
    compile.fail("compile succeeded but returned no kernel");
  } else if (!good.info.empty()) {
    boost::system::error_code ec;
    const json::value info = json::parse(good.info, ec);
    if (ec || !info.is_object())
      compile.fail("info_json is not a JSON object: " + good.info.substr(0, 200));
  }
  if (compile.status == "pass")
    compile.detail = good.info.empty() ? "no info" : good.info.substr(0, 200);
  report("compile", compile);

  Outcome destroy;
  if (good.kernel == nullptr) {
    destroy.skip("no kernel to release");
  } else {
    on_serving_thread([&] {
      guarded(destroy, "kernel_destroy", [&] { api.kernel_destroy(good.kernel); });
      guarded(destroy, "kernel_destroy(NULL)", [&] { api.kernel_destroy(nullptr); });
    });
  }
  report("kernel_destroy", destroy);
  return failures == 0 ? 0 : 1;
}

} // namespace keval::worker::conformance
