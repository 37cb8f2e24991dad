#include "plan/plan.hpp"

#include "plan/build_command.hpp"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <set>
#include <stdexcept>

#include <boost/json/serialize.hpp>
#include <openssl/evp.h>
#include <sys/wait.h>
#include <unistd.h>

namespace keval::cuda_program {

namespace json = boost::json;

namespace {

// Bumped when the way harness objects are made changes.
constexpr int kHarnessFormat = 1;
constexpr const char* kHarnessDir = ".keval/harness/";

std::string sha256_hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned i = 0; i < length; ++i) {
    hex += "0123456789abcdef"[digest[i] >> 4];
    hex += "0123456789abcdef"[digest[i] & 0xf];
  }
  return hex;
}

// Length-prefixed, so that no two different inputs hash the same text.
void feed(std::string& key, const std::string& part) {
  key += std::to_string(part.size()) + ":" + part + ";";
}

std::string text(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

bool present(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && !v->is_null();
}

struct Version {
  int major = 0, minor = 0;
};
// ComputeEval's parse_semver: the leading "major[.minor]".
Version parse_version(const std::string& s) {
  Version v;
  std::sscanf(s.c_str(), "%d.%d", &v.major, &v.minor);
  return v;
}
bool older(Version a, Version b) {
  return a.major != b.major ? a.major < b.major : a.minor < b.minor;
}

// ComputeEval's heuristic for datacenter GPUs, by name.
bool is_datacenter_gpu(const std::string& name) {
  static const std::array<const char*, 18> kPatterns{
      "A100", "A40",   "A30",  "A16",   "A10",  "A2",   "H100", "H200", "GH200",
      "B200", "GB200", "B300", "GB300", "GB10", "V100", "L40S", "L40",  "L4"};
  for (const char* p : kPatterns)
    if (name.find(p) != std::string::npos)
      return true;
  return false;
}

json::object shell(const std::string& command) {
  return json::object{{"argv", json::array{"/bin/sh", "-c", command}}, {"display", command}};
}

json::object step(const std::vector<std::string>& argv) {
  std::string display;
  json::array a;
  for (const auto& arg : argv) {
    display += (display.empty() ? "" : " ") + arg;
    a.emplace_back(arg);
  }
  return json::object{{"argv", std::move(a)}, {"display", display}};
}

std::vector<std::pair<std::string, std::string>> files_of(const json::object& o, const char* key) {
  std::vector<std::pair<std::string, std::string>> files;
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_array())
    return files;
  for (const auto& f : v->as_array())
    files.emplace_back(text(f.as_object(), "path"), text(f.as_object(), "content"));
  return files;
}

std::string basename_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Why the harness cannot be compiled apart from the solution, or "" when it can.
std::string harness_obstacle(const SplitBuild& split,
                             const std::vector<std::pair<std::string, std::string>>& problem_files,
                             const std::set<std::string>& test_paths,
                             const std::vector<std::pair<std::string, std::string>>& solution) {
  std::set<std::string> sources(split.sources.begin(), split.sources.end());
  std::set<std::string> problem_paths;
  for (const auto& [path, content] : problem_files)
    problem_paths.insert(path);
  for (const auto& [path, content] : solution) {
    if (problem_paths.count(path))
      return "the solution replaces the problem's file " + path;
    if (!sources.count(path))
      return "the solution's file " + path + " is not a translation unit of the build command";
  }
  bool harness_unit = false;
  for (const auto& s : split.sources)
    harness_unit = harness_unit || test_paths.count(s) != 0;
  if (!harness_unit)
    return "the build command compiles no test file";
  // A harness that #includes a solution file depends on it (`#include "solution.cu"`).
  static const std::regex include(R"(^[ \t]*#[ \t]*include[ \t]*["<]([^">]+)[">])",
                                  std::regex::multiline);
  for (const auto& [path, content] : problem_files)
    for (auto it = std::sregex_iterator(content.begin(), content.end(), include);
         it != std::sregex_iterator(); ++it) {
      const std::string included = basename_of((*it)[1].str());
      for (const auto& [solution_path, unused] : solution)
        if (basename_of(solution_path) == included)
          return path + " #includes the solution's " + solution_path;
    }
  return "";
}

} // namespace

Toolchain find_toolchain() {
  Toolchain t;
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH"))
    for (size_t begin = 0, end; begin <= std::string(path).size(); begin = end + 1) {
      const std::string p(path);
      end = std::min(p.find(':', begin), p.size());
      dirs.push_back(p.substr(begin, end - begin));
    }
  if (const char* home = std::getenv("CUDA_HOME"))
    dirs.push_back(std::string(home) + "/bin");
  dirs.push_back("/usr/local/cuda/bin");
  for (const auto& d : dirs)
    if (!d.empty() && ::access((d + "/nvcc").c_str(), X_OK) == 0) {
      t.nvcc = d + "/nvcc";
      break;
    }
  if (t.nvcc.empty())
    return t;
  // popen: nvcc's own arguments are fixed text, and this runs before any user code.
  if (FILE* out = ::popen(("'" + t.nvcc + "' --version 2>&1").c_str(), "r")) {
    char buffer[512];
    while (std::fgets(buffer, sizeof buffer, out) != nullptr)
      t.banner += buffer;
    ::pclose(out);
  }
  std::smatch m;
  if (std::regex_search(t.banner, m, std::regex(R"(\bV(\d+\.\d+\.\d+)\b)")))
    t.version = m[1].str();
  return t;
}

json::object make_plan(const json::object& program, const std::string& which,
                       const json::object& environment, const Toolchain& toolchain,
                       const std::string& profiler) {
  const json::object& problem = program.at("problem").as_object();
  json::object plan;
  plan["skipped"] = nullptr;
  plan["toolkit"] =
      toolchain.version.empty() ? json::value(nullptr) : json::value(toolchain.version);
  // Every step finds this nvcc first on PATH (the runner prepends it).
  plan["path"] = toolchain.nvcc.empty()
                     ? json::value(nullptr)
                     : json::value(toolchain.nvcc.substr(0, toolchain.nvcc.rfind('/')));

  // ---- Can this machine run it at all? ----
  const int64_t arch =
      environment.contains("cuda_arch") ? environment.at("cuda_arch").to_number<int64_t>() : 0;
  // compute_capability defaults to "8.0" in ComputeEval; null means no GPU is needed.
  const bool needs_gpu =
      !problem.contains("compute_capability") || !problem.at("compute_capability").is_null();
  const std::string required_cc =
      needs_gpu
          ? (present(problem, "compute_capability") ? text(problem, "compute_capability") : "8.0")
          : "";
  plan["gpu"] = needs_gpu;
  if (needs_gpu) {
    if (arch == 0) {
      plan["skipped"] = "needs a GPU of compute capability " + required_cc +
                        "; this machine has none usable (" + text(environment, "no_gpu_reason") +
                        ")";
      return plan;
    }
    const Version have{static_cast<int>(arch / 10), static_cast<int>(arch % 10)};
    if (older(have, parse_version(required_cc))) {
      plan["skipped"] = "needs compute capability " + required_cc + "; this GPU is " +
                        std::to_string(have.major) + "." + std::to_string(have.minor);
      return plan;
    }
    if (present(problem, "requires_datacenter_gpu") &&
        problem.at("requires_datacenter_gpu").as_bool()) {
      const std::string name = text(environment, "gpu_name");
      if (!is_datacenter_gpu(name)) {
        plan["skipped"] =
            "needs a datacenter GPU; this one is " + (name.empty() ? "unknown" : name);
        return plan;
      }
    }
  }
  if (present(problem, "min_cuda_toolkit")) {
    const std::string wanted = text(problem, "min_cuda_toolkit");
    if (toolchain.version.empty()) {
      plan["skipped"] = "needs CUDA toolkit " + wanted + "; no nvcc was found on this machine";
      return plan;
    }
    if (older(parse_version(toolchain.version), parse_version(wanted))) {
      plan["skipped"] = "needs CUDA toolkit " + wanted + "; this machine has " + toolchain.version;
      return plan;
    }
  }

  // ---- Timeouts: ComputeEval's defaults ----
  const double timeout =
      present(problem, "timeout_seconds") ? problem.at("timeout_seconds").to_number<double>() : 0.0;
  plan["timeouts"] = json::object{{"build", timeout > 0 ? timeout : 60.0},
                                  {"test", timeout > 0 ? timeout : 60.0},
                                  {"benchmark", timeout > 0 ? timeout : 300.0}};

  // ---- Build ----
  const json::object* solution_object = which == "baseline"
                                            ? &problem.at("baseline_solution").as_object()
                                            : &program.at("solution").as_object();
  const auto solution = files_of(*solution_object, "files");
  const auto context = files_of(problem, "context_files");
  const auto tests = files_of(problem, "test_files");
  std::vector<std::pair<std::string, std::string>> problem_files = context;
  problem_files.insert(problem_files.end(), tests.begin(), tests.end());
  std::set<std::string> test_paths;
  for (const auto& [path, content] : tests)
    test_paths.insert(path);

  const std::string build_command = text(problem, "build_command");
  json::array build_full;
  if (!build_command.empty())
    build_full.push_back(shell(build_command));
  plan["build_full"] = build_full;
  plan["harness"] = nullptr;
  plan["build_cache"] = nullptr; // only with a harness: its key keys the build too
  plan["build"] = build_full;
  const json::value* reuse = program.if_contains("harness_reuse");
  if (build_command.empty()) {
    plan["harness_unavailable"] = "the problem has no build command";
  } else if (reuse != nullptr && reuse->is_bool() && !reuse->as_bool()) {
    plan["harness_unavailable"] = "turned off by the request (metadata.harness_reuse)";
  } else {
    std::vector<std::string> workspace;
    for (const auto& [path, content] : problem_files)
      workspace.push_back(path);
    for (const auto& [path, content] : solution)
      workspace.push_back(path);
    auto split = split_build_command(build_command, workspace);
    std::string obstacle =
        std::holds_alternative<std::string>(split)
            ? std::get<std::string>(split)
            : harness_obstacle(std::get<SplitBuild>(split), problem_files, test_paths, solution);
    if (obstacle.empty() && toolchain.banner.empty())
      obstacle = "the toolchain's version is unknown, so its objects cannot be keyed";
    if (!obstacle.empty()) {
      plan["harness_unavailable"] = obstacle;
    } else {
      const SplitBuild& s = std::get<SplitBuild>(split);
      std::set<std::string> solution_paths;
      for (const auto& [path, content] : solution)
        solution_paths.insert(path);
      std::string key;
      feed(key, "keval cuda_program harness " + std::to_string(kHarnessFormat));
      feed(key, toolchain.nvcc);
      feed(key, toolchain.banner);
      feed(key, std::to_string(arch));
      feed(key, s.compiler);
      for (const auto& o : s.options)
        feed(key, o);
      json::array harness_steps, objects, build;
      // One nvcc, as the problem's command, with the harness's units replaced by their objects:
      // it compiles the solution's units and links (nvcc takes objects beside sources), so the
      // job pays for everything the plain command does but the harness's compilation.
      std::vector<std::string> linked;
      size_t h = 0;
      for (const auto& source : s.sources) {
        if (solution_paths.count(source)) {
          linked.push_back(source);
        } else {
          const std::string object = kHarnessDir + std::to_string(h++) + ".o";
          harness_steps.push_back(step(compile_argv(s, source, object)));
          objects.emplace_back(object);
          linked.push_back(object);
          feed(key, "unit " + source);
        }
      }
      // Everything a harness unit can #include: the problem's files, by path and content.
      for (const auto& [path, content] : problem_files) {
        feed(key, path);
        feed(key, content);
      }
      const std::vector<std::string> link = link_argv(s, linked);
      build.push_back(step(link));
      const std::string harness_key = sha256_hex(key);
      // The solution's whole build, content-addressed: a solution built before with the same
      // files (pass@k samples and resubmissions repeat) gets the same program. The key is the
      // harness's (toolchain, architecture, options, problem files), the solution's files by
      // path and content, and the link command; the command's one output is what is kept.
      std::string build_key;
      feed(build_key, "keval cuda_program build " + std::to_string(kHarnessFormat));
      feed(build_key, harness_key);
      for (const auto& [path, content] : solution) {
        feed(build_key, path);
        feed(build_key, content);
      }
      for (const auto& argument : link)
        feed(build_key, argument);
      plan["build_cache"] =
          json::object{{"key", sha256_hex(build_key)}, {"outputs", json::array{s.output}}};
      plan["harness"] = json::object{{"key", harness_key},
                                     {"steps", std::move(harness_steps)},
                                     {"objects", std::move(objects)}};
      plan["build"] = std::move(build);
    }
  }

  // ---- Test and benchmark ----
  plan["test"] = shell(text(problem, "test_command"));
  plan["benchmark"] = nullptr;
  if (present(problem, "benchmark_command")) {
    json::object benchmark = shell(text(problem, "benchmark_command"));
    if (!profiler.empty()) {
      // The profiler records kernels and NVTX ranges inside the benchmark's own process
      // (profiler/README.md): both injection points name it.
      benchmark["env"] =
          json::object{{"CUDA_INJECTION64_PATH", profiler}, {"NVTX_INJECTION64_PATH", profiler}};
    } else {
      benchmark["profiler_unavailable"] =
          "keval was built without the CUDA toolkit's CUPTI: only the process and custom timing "
          "modes can time a benchmark";
    }
    plan["benchmark"] = std::move(benchmark);
  }
  return plan;
}

} // namespace keval::cuda_program
