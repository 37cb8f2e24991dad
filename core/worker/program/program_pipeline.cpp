#include "worker/program/program_pipeline.hpp"

#include "checks/source_references.hpp"
#include "common/beneath.hpp"
#include "protocol/job_contract.hpp"
#include "request/program.hpp"
#include "supervisor/process.hpp"
#include "worker/artifacts/artifact_cache.hpp"
#include "worker/engine/device_counters.hpp"
#include "worker/isolation/cpu_priority.hpp"
#include "worker/isolation/isolation.hpp"
#include "worker/metrics/device_metrics.hpp"
#include "worker/program/step_process.hpp"
#include "worker/program/timing.hpp"
#include "worker/runner/program_commands.hpp"

#ifdef KEVAL_HAVE_CUDA
#include "worker/cuda/cuda_engine.hpp"
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <regex>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value_from.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

namespace keval::worker {

namespace {

namespace json = boost::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr size_t kOutputCap = 64u << 10; // per stream: the first and the last 32 KiB
constexpr size_t kMaxProfileBytes = 16u << 20;
constexpr int kBenchmarkRuns = 3; // per side, alternating, the median kept
// Device metrics (collect_device_metrics): launches counted per kernel name, and in all.
constexpr int kCountedPerKernel = 2;
constexpr int kMaxCountedKernels = 32;
constexpr size_t kMaxCountersBytes = 4u << 20;
constexpr size_t kMaxBuildOutputBytes = 256u << 20; // a build kept in the cache, per file
// Where a kept build's compiler output is stored in its cache entry (never written to a
// workspace).
constexpr const char* kKeptBuildOutput = ".keval/build-output.txt";

constexpr const char* kKeepFiles[] = {".keval/.keep", ".keval/harness/.keep",
                                      ".keval/solution/.keep"};

protocol::ErrorInfo error_info(std::string type, std::string message, std::string details = {}) {
  return {std::move(type), std::move(message), std::move(details)};
}

std::string text_of(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

double number_of(const json::object& o, const char* key, double fallback) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_number() ? v->to_number<double>() : fallback;
}

std::string format_seconds(double s) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g s", s);
  return buffer;
}

// "exited with code 1", "was killed by SIGSEGV (...)", "timed out after 30 s".
std::string how_it_ended(const json::object& r, double timeout_s) {
  if (r.at("timed_out").as_bool())
    return "timed out after " + format_seconds(timeout_s);
  if (const json::value& code = r.at("exit_code"); !code.is_null()) {
    const int64_t c = code.to_number<int64_t>();
    // The commands run under sh, which reports a program killed by signal N as 128 + N.
    if (c > 128 && c < 128 + 65)
      return "exited with code " + std::to_string(c) +
             " (the shell's report of a program killed by " +
             supervisor::describe_signal(static_cast<int>(c - 128)) + ")";
    return "exited with code " + std::to_string(c);
  }
  if (const json::value& sig = r.at("signal"); !sig.is_null())
    return "was killed by " +
           supervisor::describe_signal(static_cast<int>(sig.to_number<int64_t>()));
  return "ended";
}

bool succeeded(const json::object& r) {
  return !r.at("timed_out").as_bool() && !r.at("exit_code").is_null() &&
         r.at("exit_code").to_number<int64_t>() == 0;
}

// One side of the job: the solution, or the problem's baseline (performance mode).
struct ProgramSide {
  std::string name; // "solution" | "baseline"
  RunnerClient* runner = nullptr;
  std::unique_ptr<RunnerClient> owned;
  json::object plan;
  bool built = false;
  json::object build; // the report's "build"
};

class ProgramJob {
public:
  ProgramJob(protocol::BlockingChannel& channel, const JobSpec& job, RunnerClient& runner,
             std::string plugin_path, json::object isolation, RunnerSource& runners)
      : channel_(channel), job_(job), plugin_path_(std::move(plugin_path)),
        isolation_(std::move(isolation)), runners_(runners) {
    solution_.name = "solution";
    solution_.runner = &runner;
  }

  void run() {
    program_ = request::parse_program(job_.request.kernel, "kernel");
    report_["task_id"] = program_.task_id;
    report_["skipped"] = nullptr;
    report_["source_references"] = nullptr;
    report_["build"] = nullptr;
    report_["test"] = nullptr;
    report_["benchmark"] = nullptr;
    environment_ = probe_environment();
    if (!plan(solution_, "solution"))
      return;
    if (const json::value* skipped = solution_.plan.if_contains("skipped");
        skipped != nullptr && skipped->is_string()) {
      report_["skipped"] = *skipped;
      send_compiled(false, error_info("skipped", std::string(skipped->as_string())));
      return;
    }
    if (!check_references() || !check_process_control())
      return;
    const bool benchmark = program_.benchmark && program_.baseline.has_value();
    if (benchmark) {
      baseline_.name = "baseline";
      baseline_.owned = runners_.take("ref");
      baseline_.runner = baseline_.owned.get();
      load_plugin(*baseline_.runner);
      if (!plan(baseline_, "baseline"))
        return;
    }
    build_all(benchmark);
    if (!solution_.built) {
      if (std::string missing = missing_dependency(text_of(solution_.build, "output"));
          !missing.empty()) {
        report_["skipped"] = missing;
        send_compiled(false, error_info("skipped", missing));
        return;
      }
      send_compiled(false, error_info("compile_error", "the build " + build_failure_,
                                      text_of(solution_.build, "output")));
      return;
    }
    send_compiled(true, std::nullopt);
    if (!acquire_device())
      return;
    if (!test())
      return;
    if (benchmark)
      run_benchmark();
  }

private:
  // ---- What the plan needs to know of this machine ----

  json::object probe_environment() {
    json::object env;
    env["cuda_arch"] = job_.cuda_arch;
    env["gpu_count"] = 0;
    // A problem that runs without a GPU (compute_capability null) is planned without one: no
    // driver initialisation (a fraction of a second, serialised across the machine) on its path.
    if (!program_.compute_capability) {
      env["cuda_arch"] = 0;
      env["no_gpu_reason"] = "the problem runs without a GPU (compute_capability null)";
      return env;
    }
#ifdef KEVAL_HAVE_CUDA
    const CudaAvailability probe = probe_cuda();
    if (probe.usable) {
      env["cuda_arch"] = job_.cuda_arch != 0 ? job_.cuda_arch : probe.arch_of_first;
      env["gpu_count"] = probe.device_count;
      env["gpu_name"] = probe.name_of_first;
    } else {
      env["cuda_arch"] = 0;
      env["no_gpu_reason"] = probe.reason;
    }
#else
    env["cuda_arch"] = 0;
    env["no_gpu_reason"] = "this keval-worker was built without the CUDA toolkit";
#endif
    return env;
  }

  void load_plugin(RunnerClient& runner) {
    json::object load;
    load["type"] = "load";
    load["plugin"] = plugin_path_;
    const json::object reply = runner.call(std::move(load), "loading its plugin");
    if (!RunnerClient::ok(reply))
      throw std::runtime_error("cannot load plugin " + plugin_path_ + ": " +
                               RunnerClient::error_of(reply).message);
  }

  bool plan(ProgramSide& side, const char* which) {
    json::object command;
    command["type"] = program_commands::kPlan;
    // The metadata as sent, with the solution spelled out (a source_code stands for
    // solution.cu): the plugin reads the files from one place.
    json::object program = job_.request.kernel.metadata;
    json::array files;
    for (const auto& f : program_.solution.files)
      files.push_back(json::object{{"path", f.path}, {"content", f.content}});
    program["solution"] =
        json::object{{"type", "file"}, {"task_id", program_.task_id}, {"files", std::move(files)}};
    command["program"] = std::move(program);
    command["which"] = which;
    command["environment"] = environment_;
    const json::object reply = side.runner->call(std::move(command), "planning the program");
    if (!RunnerClient::ok(reply)) {
      const RunnerError e = RunnerClient::error_of(reply);
      send_compiled(false,
                    error_info(e.type == "internal_error" ? "internal_error" : "compile_error",
                               "the " + side.name + "'s plan failed: " + e.message, e.details));
      return false;
    }
    side.plan = reply.at("plan").as_object();
    return true;
  }

  // ---- Source references (ComputeEval's check, with a real tokenizer) ----

  std::vector<checks::SourceFile> solution_sources() const {
    std::vector<checks::SourceFile> files;
    for (const auto& f : program_.solution.files)
      files.push_back({f.path, f.content});
    return files;
  }

  bool check_references() {
    if (program_.references_all.empty() && program_.references_any.empty())
      return true;
    const checks::ReferenceCheck check = checks::check_source_references(
        solution_sources(),
        checks::SourceReferences{program_.references_all, program_.references_any});
    json::array missing;
    for (const auto& name : check.missing)
      missing.emplace_back(name);
    report_["source_references"] =
        json::object{{"passed", check.passed}, {"missing", std::move(missing)}};
    if (check.passed)
      return true;
    send_compiled(
        false, error_info("source_references",
                          "the solution does not use what the problem requires: " + check.message));
    return false;
  }

  // A build that failed for want of something the problem itself needs (a header its own files
  // #include, a library its build command links) fails every solution alike: this machine
  // cannot run the problem, which is "skipped", not a wrong solution. What only the solution
  // includes stays its own failure.
  std::string missing_dependency(const std::string& output) const {
    static const std::regex header(R"(fatal error: ([^\s:]+): No such file or directory)");
    static const std::regex library(R"(cannot find -l([A-Za-z0-9_+.-]+))");
    std::smatch m;
    if (std::regex_search(output, m, header)) {
      const std::string name = m[1].str();
      const std::regex included(
          "#[ \t]*include[ \t]*[<\"]" +
          std::regex_replace(name, std::regex(R"([.^$|()\[\]{}*+?\\])"), "\\$&") + "[>\"]");
      bool ours = false, provided = false;
      for (const auto* list : {&program_.context_files, &program_.test_files})
        for (const auto& f : *list) {
          ours = ours || std::regex_search(f.content, included);
          const size_t slash = f.path.rfind('/');
          provided = provided || f.path.substr(slash == std::string::npos ? 0 : slash + 1) == name;
        }
      for (const auto& f : program_.solution.files)
        provided = provided || f.path == name;
      if (ours && !provided)
        return "needs " + name + ", which the problem's own files include and this machine lacks";
    }
    if (std::regex_search(output, m, library) && program_.build_command &&
        program_.build_command->find("-l" + m[1].str()) != std::string::npos)
      return "needs the library " + m[1].str() +
             ", which the problem's build command links and this machine lacks";
    return "";
  }

  // ---- A verdict by exit status: the solution may not take the process's end into its hands ----

  // The harness and the solution share one process, so a solution that ends it (exit(0) before
  // the harness compares anything, an atexit or destructor hook that _exit(0)s over a failing
  // status, an exec of /bin/true) would turn any verdict into a pass. Such calls have no place in
  // a solution to a held-out-harness problem, so they fail it, named. Found by the same tokenizer
  // as source references: code only, never comments or strings. Not found: a plain
  // exit(status) with a computed status, and inline asm (device code uses it legitimately).
  bool check_process_control() {
    static const std::vector<std::string> kForbidden{"_exit",
                                                     "_Exit",
                                                     "quick_exit",
                                                     "at_quick_exit",
                                                     "atexit",
                                                     "on_exit",
                                                     "syscall",
                                                     "pthread_exit",
                                                     "execl",
                                                     "execlp",
                                                     "execle",
                                                     "execv",
                                                     "execvp",
                                                     "execvpe",
                                                     "execve",
                                                     "fexecve",
                                                     "posix_spawn",
                                                     "posix_spawnp",
                                                     "vfork",
                                                     "dlsym",
                                                     "longjmp",
                                                     "siglongjmp",
                                                     "system (",
                                                     "fork (",
                                                     "popen (",
                                                     "clone (",
                                                     "exit ( 0 )",
                                                     "exit ( EXIT_SUCCESS )",
                                                     "exit ( 0x0 )",
                                                     "exit ( false )",
                                                     "__attribute__ ( ( destructor",
                                                     "__attribute__ ( ( constructor",
                                                     "__attribute__ ( ( __destructor__",
                                                     "__attribute__ ( ( __constructor__"};
    // One pass over the files for all of them: what is not missing was found.
    const checks::ReferenceCheck check = checks::check_source_references(
        solution_sources(), checks::SourceReferences{kForbidden, {}});
    std::string found;
    for (const auto& pattern : kForbidden)
      if (std::find(check.missing.begin(), check.missing.end(), pattern) == check.missing.end())
        found += (found.empty() ? "" : ", ") + pattern;
    if (found.empty())
      return true;
    report_["process_control"] = found;
    send_compiled(false, error_info("terminates_process",
                                    "the solution can end or replace the process the harness "
                                    "judges by its exit status (" +
                                        found + "): a solution may not decide its own verdict"));
    return false;
  }

  // ---- Build (no device held; CUDA_VISIBLE_DEVICES empty) ----

  json::object workspace_files(const request::ProgramSolution* solution, bool with_tests) const {
    json::array files;
    for (const auto& f : program_.context_files)
      files.push_back(json::object{{"path", f.path}, {"content", f.content}});
    if (with_tests)
      for (const auto& f : program_.test_files)
        files.push_back(json::object{{"path", f.path}, {"content", f.content}});
    if (solution != nullptr) // may replace context files, as ComputeEval allows
      for (const auto& f : solution->files)
        files.push_back(json::object{{"path", f.path}, {"content", f.content}});
    // keval's own folders (harness and solution objects, profiles), made before any command.
    for (const char* keep : kKeepFiles)
      files.push_back(json::object{{"path", keep}, {"content", ""}});
    json::object command;
    command["type"] = program_commands::kFiles;
    command["files"] = std::move(files);
    return command;
  }

  // `objects` (harness objects) and `programs` (a cached build's outputs, written executable)
  // are copied into the workspace from the cache's descriptors.
  void write_workspace(RunnerClient& runner, const request::ProgramSolution* solution,
                       bool with_tests, std::map<std::string, UniqueFd>* objects = nullptr,
                       std::map<std::string, UniqueFd>* programs = nullptr) {
    json::object command = workspace_files(solution, with_tests);
    std::vector<int> fds;
    json::array from_fds;
    for (auto* files : {objects, programs})
      if (files != nullptr)
        for (const auto& [path, fd] : *files) {
          from_fds.push_back(json::object{{"path", path}, {"executable", files == programs}});
          ::lseek(fd.get(), 0, SEEK_SET);
          fds.push_back(fd.get());
        }
    if (!from_fds.empty())
      command["from_fds"] = std::move(from_fds);
    const json::object reply = runner.call(std::move(command), "writing the workspace", fds);
    if (!RunnerClient::ok(reply))
      throw std::runtime_error("cannot write the program's workspace: " +
                               RunnerClient::error_of(reply).message);
  }

  // Runs one command of the plan as a sandboxed process of its own in `side`'s place
  // (step_process.hpp) and waits for it here: {exit_code, signal, timed_out, seconds, stdout,
  // stderr}.
  json::object run(const ProgramSide& side, const json::array& argv, const json::object& env,
                   double timeout_s) const {
    program::Step step;
    for (const auto& a : argv)
      step.argv.emplace_back(a.as_string());
    for (const auto& [name, value] : env)
      step.env[std::string(name)] = value.is_string() ? std::string(value.as_string()) : "";
    if (const json::value* path = solution_.plan.if_contains("path"); path && path->is_string())
      step.path_prepend = std::string(path->as_string());
    step.timeout_s = timeout_s;
    step.output_cap = kOutputCap;
    // Before the grant (the builds) a step waits in the background as its runner does; from the
    // grant on it runs in the foreground (worker/isolation/cpu_priority.hpp).
    protocol::SandboxPolicy place = side.runner->place();
    if (device_held_)
      place.background_nice = 0;
    const program::StepResult r = program::run_step(worker_exe(), place, side.runner->pid(), step);
    json::object reply;
    reply["exit_code"] = r.exit_code ? json::value(*r.exit_code) : json::value(nullptr);
    reply["signal"] = r.signal ? json::value(*r.signal) : json::value(nullptr);
    reply["timed_out"] = r.timed_out;
    reply["seconds"] = r.seconds;
    reply["stdout"] = r.out;
    reply["stderr"] = r.err;
    return reply;
  }

  static const fs::path& worker_exe() {
    static const fs::path exe = fs::read_symlink("/proc/self/exe");
    return exe;
  }

  json::object no_gpu_env() const {
    return json::object{{"CUDA_VISIBLE_DEVICES", ""}};
  }

  // Runs `steps` in order in `side`'s runner; the report's build, and whether all passed.
  bool run_build_steps(ProgramSide& side, const json::array& steps, double timeout_s,
                       std::string& output, double& seconds) {
    for (const auto& value : steps) {
      const json::object& step = value.as_object();
      const json::object reply = run(side, step.at("argv").as_array(), no_gpu_env(), timeout_s);
      seconds += number_of(reply, "seconds", 0);
      output += "$ " + text_of(step, "display") + "\n" + text_of(reply, "stdout") +
                text_of(reply, "stderr");
      if (!succeeded(reply)) {
        if (side.name == "solution")
          build_failure_ = how_it_ended(reply, timeout_s);
        side.build["exit_code"] = reply.at("exit_code");
        side.build["timed_out"] = reply.at("timed_out");
        return false;
      }
    }
    side.build["exit_code"] = 0;
    side.build["timed_out"] = false;
    return true;
  }

  // The held-out harness compiled alone (context + test files, no solution), its objects taken
  // from the harness runner's directory without following links.
  std::optional<std::map<std::string, std::string>>
  build_harness(const json::object& harness, double timeout_s, json::object& note) {
    auto runner = runners_.take("harness");
    write_workspace(*runner, nullptr, true);
    ProgramSide side;
    side.name = "harness";
    side.runner = runner.get();
    std::string output;
    double seconds = 0;
    const bool ok =
        run_build_steps(side, harness.at("steps").as_array(), timeout_s, output, seconds);
    note["build_seconds"] = seconds;
    if (!ok) {
      note["unavailable"] = "the harness does not build without the solution";
      note["output"] = output;
      return std::nullopt;
    }
    std::map<std::string, std::string> objects;
    for (const auto& value : harness.at("objects").as_array()) {
      const std::string path(value.as_string());
      std::string why;
      auto bytes = read_file_beneath(runner->directory(), path, 256u << 20, &why);
      if (!bytes) {
        note["unavailable"] = "the harness build did not leave " + path + ": " + why;
        return std::nullopt;
      }
      objects.emplace(path, std::move(*bytes));
    }
    return objects;
  }

  // `kind`: "program-harness" (harness objects) or "program-build" (solutions' whole builds).
  ArtifactCache artifact_cache(const char* kind) const {
    const std::string& private_dir = solution_.runner->place().private_dir;
    if (private_dir.empty())
      return ArtifactCache({}, "no state directory to keep it in");
    return ArtifactCache(fs::path(private_dir) / "cache" / kind);
  }

  // A side's build with the harness's objects, through the build cache when the plan keys one:
  // taken from an earlier job that built the same files, else built here and kept when it
  // succeeded. A failed build is never kept; its output is this job's report. `note`: the
  // report's build.cache.
  bool build_against_harness(ProgramSide& side, const request::ProgramSolution& files,
                             ArtifactCache::Entry& harness, double timeout_s, std::string& output,
                             double& seconds, json::object& note) {
    const auto build_here = [&] {
      write_workspace(*side.runner, &files, true, &harness.files);
      return run_build_steps(side, side.plan.at("build").as_array(), timeout_s, output, seconds);
    };
    const json::value* keyed = side.plan.if_contains("build_cache");
    const bool planned = keyed != nullptr && keyed->is_object();
    ArtifactCache cache = artifact_cache("program-build");
    if (!planned || !cache.enabled()) {
      note["reused"] = false;
      note["unavailable"] = planned ? cache.why_disabled() : "the plan keys no build cache";
      return build_here();
    }
    const json::object& plan = keyed->as_object();
    const std::string key(plan.at("key").as_string());
    note["key"] = key;
    bool built = false;
    auto entry =
        cache.get_or_build(key, [&]() -> std::optional<std::map<std::string, std::string>> {
          built = build_here();
          if (!built)
            return std::nullopt;
          std::map<std::string, std::string> outputs{{kKeptBuildOutput, output}};
          for (const auto& value : plan.at("outputs").as_array()) {
            const std::string path(value.as_string());
            std::string why;
            auto bytes =
                read_file_beneath(side.runner->directory(), path, kMaxBuildOutputBytes, &why);
            if (!bytes) {
              note["not_kept"] = "the build left no " + path + " to keep: " + why;
              return std::nullopt;
            }
            outputs.emplace(path, std::move(*bytes));
          }
          return outputs;
        });
    note["reused"] = entry && entry->reused;
    if (!entry || !entry->reused)
      return built;
    // What the compiler printed when the build was made (warnings), as a build here would.
    if (auto kept = entry->files.find(kKeptBuildOutput); kept != entry->files.end()) {
      output = read_descriptor(kept->second.get(), kMaxBuildOutputBytes);
      entry->files.erase(kept);
    }
    write_workspace(*side.runner, &files, true, &harness.files, &entry->files);
    side.build["exit_code"] = 0;
    side.build["timed_out"] = false;
    return true;
  }

  // Both sides build at once where there are two; the harness (shared) first.
  void build_all(bool with_baseline) {
    std::vector<ProgramSide*> sides{&solution_};
    if (with_baseline)
      sides.push_back(&baseline_);
    for (ProgramSide* side : sides) {
      const auto started = Clock::now();
      side->build =
          json::object{{"command", program_.build_command ? json::value(*program_.build_command)
                                                          : json::value(nullptr)}};
      const double timeout_s = number_of(side->plan.at("timeouts").as_object(), "build", 60.0);
      json::object harness_note;
      std::optional<ArtifactCache::Entry> entry;
      const json::value* harness = side->plan.if_contains("harness");
      if (harness != nullptr && harness->is_object()) {
        ArtifactCache cache = artifact_cache("program-harness");
        const std::string key(harness->as_object().at("key").as_string());
        harness_note["key"] = key;
        entry = cache.get_or_build(
            key, [&] { return build_harness(harness->as_object(), timeout_s, harness_note); });
        harness_note["reused"] = entry && entry->reused;
        harness_note["cached"] = cache.enabled();
        if (!cache.enabled())
          harness_note["cache_disabled"] = cache.why_disabled();
      } else {
        harness_note["reused"] = false;
        harness_note["unavailable"] = side->plan.contains("harness_unavailable")
                                          ? side->plan.at("harness_unavailable")
                                          : json::value("the plan has no separate harness");
      }
      const request::ProgramSolution& files =
          side->name == "solution" ? program_.solution : *program_.baseline;
      std::string output;
      double seconds = 0;
      json::object cache_note{{"reused", false}};
      if (entry) {
        side->built =
            build_against_harness(*side, files, *entry, timeout_s, output, seconds, cache_note);
      } else {
        cache_note["unavailable"] = "the solution builds with the plain command";
        write_workspace(*side->runner, &files, true);
        side->built = run_build_steps(*side, side->plan.at("build_full").as_array(), timeout_s,
                                      output, seconds);
      }
      side->build["seconds"] = std::chrono::duration<double>(Clock::now() - started).count();
      side->build["output"] = output;
      side->build["harness"] = std::move(harness_note);
      side->build["cache"] = std::move(cache_note);
    }
    report_["build"] = solution_.build;
    if (with_baseline)
      baseline_build_ = baseline_.build;
  }

  void send_compiled(bool ok, std::optional<protocol::ErrorInfo> error) {
    protocol::CompileReport report;
    report.ok = ok;
    protocol::SideCompile side;
    side.kernel_type = job_.request.kernel.kernel_type;
    side.ok = ok;
    side.error = std::move(error);
    side.isolation = isolation_;
    side.time_ms = std::chrono::duration<double, std::milli>(Clock::now() - started_).count();
    report.custom = std::move(side);
    json::value value = json::value_from(report);
    value.as_object()["program"] = report_;
    if (report_.at("skipped").is_string())
      value.as_object()["skipped"] = report_.at("skipped");
    send(protocol::Phase::compiled, std::move(value));
  }

  void send(protocol::Phase phase, json::value report) {
    channel_.send(protocol::to_frame(protocol::PhaseMessage{phase, std::move(report.as_object())}));
  }

  // ---- Device and test ----

  bool acquire_device() {
    const bool needs_gpu = solution_.plan.at("gpu").as_bool();
    protocol::NeedDevice need;
    need.device_types.emplace_back(needs_gpu ? "cuda" : "cpu");
    channel_.send(protocol::to_frame(need));
    const auto asked = Clock::now();
    const protocol::Grant grant = protocol::parse_grant(channel_.receive());
    // A program is timed as it runs, from its first step on the device: granted while the GPU's
    // last job was still ending (that job handed it over), it waits until that job is gone.
    // Programs never hand their GPU over: their processes are not the runners this worker stops.
    if (grant.error.empty() && !grant.quiet)
      protocol::parse_device_quiet(channel_.receive());
    // The job's timeout does not count the wait for a device; what is left of it must not either.
    device_wait_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - asked).count();
    if (!grant.error.empty()) {
      send_validation_failure(error_info("no_device", grant.error), "");
      return false;
    }
    device_ = grant.device;
    visible_devices_ = needs_gpu ? visible_device(grant.index) : "";
    device_held_ = true;
    const int nice = solution_.runner->place().background_nice;
    report_["cpu_priority"] =
        nice == 0 ? isolation::background_unavailable()
                  : "the build steps ran at nice " + std::to_string(nice) +
                        " while the job had no device; the steps after its grant at 0";
    return true;
  }

  // The granted CUDA ordinal as the program must name it: our own CUDA_VISIBLE_DEVICES (the
  // daemon may have been given a subset) maps it.
  static std::string visible_device(int64_t index) {
    const char* ours = std::getenv("CUDA_VISIBLE_DEVICES");
    if (ours == nullptr || *ours == '\0')
      return std::to_string(index);
    std::string list(ours);
    int64_t i = 0;
    for (size_t begin = 0; begin <= list.size(); ++i) {
      const size_t end = std::min(list.find(',', begin), list.size());
      if (i == index)
        return list.substr(begin, end - begin);
      begin = end + 1;
    }
    return std::to_string(index);
  }

  json::object device_env() const {
    return json::object{{"CUDA_VISIBLE_DEVICES", visible_devices_}};
  }

  bool test() {
    const json::object& step = solution_.plan.at("test").as_object();
    const double timeout_s = number_of(solution_.plan.at("timeouts").as_object(), "test", 60.0);
    const json::object reply = run(solution_, step.at("argv").as_array(), device_env(), timeout_s);
    json::object test{{"command", program_.test_command}, {"exit_code", reply.at("exit_code")},
                      {"signal", reply.at("signal")},     {"timed_out", reply.at("timed_out")},
                      {"seconds", reply.at("seconds")},   {"stdout", reply.at("stdout")},
                      {"stderr", reply.at("stderr")}};
    report_["test"] = std::move(test);
    if (succeeded(reply)) {
      protocol::ValidationReport report;
      report.ok = true;
      report.mode = "program";
      report.device = device_;
      json::value value = json::value_from(report);
      value.as_object()["program"] = report_;
      send(protocol::Phase::validated, std::move(value));
      return true;
    }
    const bool timed_out = reply.at("timed_out").as_bool();
    const std::string type = timed_out                         ? "timeout"
                             : reply.at("exit_code").is_null() ? "runtime_error"
                                                               : "test_failed";
    send_validation_failure(
        error_info(type,
                   "the test (" + program_.test_command + ") " + how_it_ended(reply, timeout_s),
                   text_of(reply, "stdout") + text_of(reply, "stderr")),
        "custom");
    return false;
  }

  void send_validation_failure(protocol::ErrorInfo error, std::string side) {
    protocol::ValidationReport report;
    report.ok = false;
    report.mode = "program";
    report.device = device_;
    report.error = std::move(error);
    report.failed_side = std::move(side);
    json::value value = json::value_from(report);
    value.as_object()["program"] = report_;
    send(protocol::Phase::validated, std::move(value));
  }

  // ---- Benchmark (performance mode) ----

  // A benchmark step's environment: the device's, then the plan's (the profiler's injection).
  json::object benchmark_env(const json::object& step) const {
    json::object env = device_env();
    if (const json::value* extra = step.if_contains("env"); extra != nullptr && extra->is_object())
      for (const auto& [name, value] : extra->as_object())
        env[name] = value;
    return env;
  }

  // One benchmark run of `side`: its time by the timing mode, or why there is none.
  program::BenchmarkRun benchmark_once(ProgramSide& side, int index) {
    const json::object& step = side.plan.at("benchmark").as_object();
    const double timeout_s = number_of(side.plan.at("timeouts").as_object(), "benchmark", 300.0);
    const std::string profile = ".keval/profile-" + std::to_string(index) + ".json";
    json::object env = benchmark_env(step);
    env["KEVAL_PROFILE_OUTPUT"] = profile;
    const json::object reply = run(side, step.at("argv").as_array(), env, timeout_s);
    program::BenchmarkRun result;
    result.wall_ms = number_of(reply, "seconds", 0) * 1000.0;
    if (!succeeded(reply)) {
      result.error = "the " + side.name + "'s benchmark " + how_it_ended(reply, timeout_s) + ":\n" +
                     text_of(reply, "stdout") + text_of(reply, "stderr");
      return result;
    }
    std::string why;
    std::optional<std::string> profile_text;
    if (program_.timing_mode.type != "process" && program_.timing_mode.type != "custom") {
      profile_text = read_file_beneath(side.runner->directory(), profile, kMaxProfileBytes, &why);
      if (!profile_text) {
        result.error = "the " + side.name + "'s benchmark wrote no profile (" + why +
                       "): it may have ended by _exit or a signal, which the profiler cannot see";
        return result;
      }
    }
    return program::time_of_run(program_.timing_mode, result.wall_ms, text_of(reply, "stdout"),
                                profile_text);
  }

  void run_benchmark() {
    std::vector<double> solution_times, baseline_times;
    json::object solution_metrics, baseline_metrics;
    std::string error;
    for (int index = 0; index < kBenchmarkRuns && error.empty(); ++index)
      for (ProgramSide* side : {&solution_, &baseline_}) {
        if (side == &baseline_ && !baseline_.built) {
          error = "the baseline solution did not build:\n" + text_of(baseline_build_, "output");
          break;
        }
        program::BenchmarkRun r = benchmark_once(*side, index);
        if (!r.error.empty()) {
          error = r.error;
          break;
        }
        (side == &solution_ ? solution_times : baseline_times).push_back(r.time_ms);
        (side == &solution_ ? solution_metrics : baseline_metrics) = r.metrics;
      }
    json::object benchmark;
    benchmark["command"] = *program_.benchmark_command;
    benchmark["timing_mode"] = program::to_json(program_.timing_mode);
    benchmark["runs_per_side"] = kBenchmarkRuns;
    benchmark["protocol"] = "solution and baseline alternately on the same device, the median of "
                            "each side's runs";
    benchmark["time_source"] = program::time_source(program_.timing_mode);
    benchmark["baseline_build"] = baseline_build_;
    protocol::ProfileReport report;
    report.method = program::time_source(program_.timing_mode);
    report.device = device_;
    if (!error.empty()) {
      benchmark["error"] = error;
      report.ok = false;
      report.error = error_info("benchmark_failed", error.substr(0, error.find('\n')), error);
      report.failed_side = "custom";
    } else {
      const auto stats = [&](std::vector<double> times) {
        protocol::SideTiming t;
        std::sort(times.begin(), times.end());
        t.count = static_cast<int64_t>(times.size());
        t.min = times.front();
        t.max = times.back();
        t.median = times[times.size() / 2];
        double sum = 0;
        for (double x : times)
          sum += x;
        t.mean = sum / static_cast<double>(times.size());
        t.percentile_95 = t.percentile_99 = t.max;
        t.method = report.method;
        return t;
      };
      report.ok = true;
      report.custom = stats(solution_times);
      report.ref = stats(baseline_times);
      if (report.custom->median > 0)
        report.speedup = report.ref->median / report.custom->median;
      benchmark["solution"] = json::object{{"time_ms", report.custom->median},
                                           {"times_ms", json::value_from(solution_times)},
                                           {"metrics", solution_metrics}};
      benchmark["baseline"] = json::object{{"time_ms", report.ref->median},
                                           {"times_ms", json::value_from(baseline_times)},
                                           {"metrics", baseline_metrics}};
      benchmark["speedup"] = report.speedup ? json::value(*report.speedup) : json::value(nullptr);
      benchmark["error"] = nullptr;
    }
    report_["benchmark"] = std::move(benchmark);
    collect_device_metrics(error, report);
    json::value value = json::value_from(report);
    value.as_object()["program"] = report_;
    send(protocol::Phase::profiled, std::move(value));
  }

  // ---- Device metrics (docs/device_metrics.md, "Whole programs") ----

  // After the timed runs, never during one: each side that asked runs its benchmark command once
  // more with the injection profiler in counter mode (plugins/cuda_program/profiler/README.md),
  // which counts the first launches of each kernel the timing mode selects under CUPTI's range
  // profiler. What the program's process writes is data for the report, checked like a runner's
  // reply, never for the verdict or the time; a side whose counters cannot be read gets the
  // reason instead, and the job is otherwise unaffected.
  void collect_device_metrics(const std::string& benchmark_error, protocol::ProfileReport& report) {
    const std::optional<request::DeviceMetricsRequest> wanted =
        job_.request.device_metrics_for(job_.request.kernel);
    if (!wanted)
      return;
    int sides_left = 2;
    for (ProgramSide* side : {&solution_, &baseline_}) {
      const std::string key = side == &solution_ ? "custom" : "ref";
      // What is left of the job's timeout, shared by the sides still to run: a counted run that
      // would need more is cut there and says so, rather than end the job.
      const double elapsed_ms =
          std::chrono::duration<double, std::milli>(Clock::now() - started_).count() -
          device_wait_ms_;
      const double budget_s = (job_.request.timeout_s - elapsed_ms / 1000 - 5) / sides_left--;
      report.device_metrics[key] = [&] {
        if (!benchmark_error.empty())
          return metrics::unavailable_report("not collected: the benchmark failed (" +
                                             benchmark_error.substr(0, benchmark_error.find('\n')) +
                                             ")");
        if (budget_s < 5)
          return metrics::unavailable_report(
              "not collected: too little of the job's timeout was left for another run of the "
              "benchmark (" +
              format_seconds(std::max(budget_s, 0.0)) + ")");
        try {
          return device_metrics_of(*side, *wanted, budget_s);
        } catch (const std::invalid_argument& e) {
          return metrics::unavailable_report(
              std::string("the benchmark's process wrote counters keval cannot read: ") + e.what());
        }
      }();
    }
  }

  json::object device_metrics_of(ProgramSide& side, const request::DeviceMetricsRequest& wanted,
                                 double budget_s) {
    const request::TimingMode& mode = program_.timing_mode;
    const bool names_kernels = mode.type == "kernels" || mode.type == "gpu" ||
                               (mode.type == "region" && mode.time_type == "kernel");
    if (!names_kernels)
      return metrics::unavailable_report(
          "not collected: timing mode '" + mode.type +
          (mode.type == "region" ? "' with time_type '" + mode.time_type + "'" : std::string("'")) +
          " times no kernels; device metrics count the kernels a timing mode selects (kernels, "
          "gpu, or region with time_type kernel)");
    const json::object& step = side.plan.at("benchmark").as_object();
    json::object env = benchmark_env(step);
    if (!env.contains("CUDA_INJECTION64_PATH"))
      return metrics::unavailable_report(
          "not collected: keval was built without its CUPTI injection profiler "
          "(keval_program_profiler), which counts a program's kernels");
    const auto lines = [](const std::vector<std::string>& patterns) {
      std::string text;
      for (const auto& p : patterns)
        text += p + "\n";
      return text;
    };
    std::string metric_names;
    for (const auto& m : metrics::metrics_for(wanted))
      metric_names += (metric_names.empty() ? "" : ",") + m;
    const std::string counters = ".keval/counters-" + side.name + ".json";
    env["KEVAL_PROFILE_OUTPUT"] = ".keval/counted-profile-" + side.name + ".json";
    env["KEVAL_COUNTERS_OUTPUT"] = counters;
    env["KEVAL_COUNTERS_METRICS"] = metric_names;
    env["KEVAL_COUNTERS_MAX_KERNELS"] = std::to_string(kMaxCountedKernels);
    env["KEVAL_COUNTERS_PER_KERNEL"] = std::to_string(kCountedPerKernel);
    if (mode.type == "kernels") {
      env["KEVAL_COUNTERS_KERNEL_INCLUDE"] = lines(mode.include);
      env["KEVAL_COUNTERS_KERNEL_EXCLUDE"] = lines(mode.exclude);
    } else if (mode.type == "region") {
      env["KEVAL_COUNTERS_RANGE_INCLUDE"] = lines(mode.include);
      env["KEVAL_COUNTERS_RANGE_EXCLUDE"] = lines(mode.exclude);
    }
    // Each counted launch is replayed once per pass (about fifteen for every section).
    const double timeout_s = std::min(
        number_of(side.plan.at("timeouts").as_object(), "benchmark", 300.0) + 60.0, budget_s);
    const json::object reply = run(side, step.at("argv").as_array(), env, timeout_s);
    if (!succeeded(reply))
      return metrics::unavailable_report(
          "not collected: the " + side.name + "'s benchmark " + how_it_ended(reply, timeout_s) +
          " while its kernels were counted:\n" +
          (text_of(reply, "stdout") + text_of(reply, "stderr")).substr(0, 2000));
    std::string why;
    const std::optional<std::string> text =
        read_file_beneath(side.runner->directory(), counters, kMaxCountersBytes, &why);
    if (!text)
      return metrics::unavailable_report(
          "not collected: the " + side.name + "'s benchmark wrote no counters (" + why +
          "): it may have ended by _exit or a signal, which the profiler cannot see");
    json::value parsed;
    try {
      parsed = json::parse(*text);
    } catch (const std::exception& e) {
      throw std::invalid_argument(std::string("not JSON: ") + e.what());
    }
    const json::object* object = parsed.if_object();
    if (object == nullptr)
      throw std::invalid_argument("not a JSON object");
    if (const json::value* reason = object->if_contains("unavailable"))
      return metrics::unavailable_report(
          reason->is_string() ? std::string(reason->get_string()).substr(0, 1000)
                              : std::string("the benchmark's process gave no reason"));
    json::object side_report =
        metrics::build_report(wanted, device_counters_from_json(*object), "");
    side_report["source"] =
        "CUPTI range profiler in one more run of the benchmark command, after its timed runs: the "
        "first " +
        std::to_string(kCountedPerKernel) + " launches of each kernel the timing mode selects (" +
        std::to_string(kMaxCountedKernels) + " in all), each replayed per pass";
    return side_report;
  }

  protocol::BlockingChannel& channel_;
  const JobSpec& job_;
  std::string plugin_path_;
  json::object isolation_;
  RunnerSource& runners_;
  request::ProgramRequest program_;
  json::object environment_;
  json::object report_; // kernel_exec_result.metadata.program
  json::object device_;
  json::object baseline_build_;
  std::string visible_devices_;
  std::string build_failure_;
  ProgramSide solution_, baseline_;
  Clock::time_point started_ = Clock::now();
  double device_wait_ms_ = 0; // waiting for the grant, which the job's timeout does not count
  bool device_held_ = false;  // granted: steps run in the foreground
};

} // namespace

void run_program_job(protocol::BlockingChannel& channel, const JobSpec& job,
                     RunnerClient& solution_runner, const std::string& plugin_path,
                     const json::object& isolation, RunnerSource& runners) {
  ProgramJob(channel, job, solution_runner, plugin_path, isolation, runners).run();
}

} // namespace keval::worker
