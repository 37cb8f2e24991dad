#include "request/program.hpp"

#include "request/detail/json_reader.hpp"

#include <set>

namespace keval::request {

namespace {

using namespace detail;

// keval's own files in a workspace (harness objects, profiles) live below this name.
constexpr std::string_view kReservedDirectory = ".keval";

struct Budget {
  const ProgramLimits& limits;
  size_t files = 0;
  size_t bytes = 0;
};

std::string quoted(std::string_view text) {
  std::string out = "\"";
  for (const char c : text.substr(0, 200)) {
    if (static_cast<unsigned char>(c) < 0x20)
      out += "\\x" + std::string(1, "0123456789abcdef"[(c >> 4) & 0xf]) +
             std::string(1, "0123456789abcdef"[c & 0xf]);
    else
      out += c;
  }
  return out + (text.size() > 200 ? "...\"" : "\"");
}

// A string the plugin and the shell receive: no NUL, bounded.
std::string read_command(const json::value& value, const std::string& path, size_t max_bytes) {
  const std::string_view text = read_nonempty_string(value, path);
  if (text.size() > max_bytes)
    throw RequestError(path, "is " + std::to_string(text.size()) + " bytes, over the limit of " +
                                 std::to_string(max_bytes));
  if (text.find('\0') != std::string_view::npos)
    throw RequestError(path, "contains a NUL byte");
  return std::string(text);
}

std::vector<ProgramFile> read_files(const json::value& value, const std::string& path,
                                    Budget& budget) {
  std::vector<ProgramFile> files;
  const json::array& items = read_array(value, path);
  std::set<std::string> seen;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string item_path = element_path(path, i);
    const json::object& item = read_object(items[i], item_path);
    const auto field = [&](const char* key) -> const json::value& {
      const json::value* v = item.if_contains(key);
      if (v == nullptr || v->is_null())
        throw RequestError(member_path(item_path, key), "is required");
      return *v;
    };
    ProgramFile file;
    file.path = std::string(read_string(field("path"), member_path(item_path, "path")));
    if (std::string why = path_problem(file.path, budget.limits.max_path_bytes); !why.empty())
      throw RequestError(member_path(item_path, "path"), why + " (got " + quoted(file.path) + ")");
    if (!seen.insert(file.path).second)
      throw RequestError(member_path(item_path, "path"),
                         "names " + quoted(file.path) + " a second time in this list");
    file.content = std::string(read_string(field("content"), member_path(item_path, "content")));
    if (file.content.size() > budget.limits.max_file_bytes)
      throw RequestError(member_path(item_path, "content"),
                         "is " + std::to_string(file.content.size()) +
                             " bytes, over the limit of " +
                             std::to_string(budget.limits.max_file_bytes) + " per file");
    budget.bytes += file.content.size();
    if (++budget.files > budget.limits.max_files)
      throw RequestError(item_path, "one file more than the limit of " +
                                        std::to_string(budget.limits.max_files) + " per request");
    if (budget.bytes > budget.limits.max_total_bytes)
      throw RequestError(member_path(item_path, "content"),
                         "brings the request's files over the limit of " +
                             std::to_string(budget.limits.max_total_bytes) + " bytes");
    files.push_back(std::move(file));
  }
  return files;
}

ProgramSolution read_solution(const json::value& value, const std::string& path, Budget& budget) {
  const json::object& o = read_object(value, path);
  ProgramSolution solution;
  if (const json::value* type = o.if_contains("type"); type != nullptr && !type->is_null()) {
    const std::string_view t = read_string(*type, member_path(path, "type"));
    if (t == "patch")
      throw RequestError(member_path(path, "type"),
                         "patch solutions are not supported (ComputeEval does not apply them "
                         "either); send the files");
    if (t != "file")
      throw RequestError(member_path(path, "type"), "must be \"file\"");
  }
  if (const json::value* id = o.if_contains("task_id"); id != nullptr && !id->is_null())
    solution.task_id = std::string(read_string(*id, member_path(path, "task_id")));
  const json::value* files = o.if_contains("files");
  if (files == nullptr || files->is_null())
    throw RequestError(member_path(path, "files"), "is required");
  solution.files = read_files(*files, member_path(path, "files"), budget);
  if (solution.files.empty())
    throw RequestError(member_path(path, "files"), "must hold at least one file");
  return solution;
}

std::vector<std::string> read_names(const json::value& value, const std::string& path) {
  std::vector<std::string> names;
  const json::array& items = read_array(value, path);
  for (size_t i = 0; i < items.size(); ++i)
    names.emplace_back(read_command(items[i], element_path(path, i), 1024));
  return names;
}

void read_references(const json::value& value, const std::string& path, ProgramRequest& program) {
  if (value.is_string()) {
    program.references_all.push_back(read_command(value, path, 1024));
  } else if (value.is_array()) {
    program.references_all = read_names(value, path);
  } else if (value.is_object()) {
    const json::object& o = value.as_object();
    const json::value* all = o.if_contains("all");
    const json::value* any = o.if_contains("any");
    if ((all == nullptr || all->is_null()) && (any == nullptr || any->is_null()))
      throw RequestError(path, "must specify at least one of 'any' or 'all'");
    if (all != nullptr && !all->is_null())
      program.references_all = read_names(*all, member_path(path, "all"));
    if (any != nullptr && !any->is_null())
      program.references_any = read_names(*any, member_path(path, "any"));
  } else {
    throw RequestError(path,
                       std::string("must be a string, a list of strings or {any, all}, got ") +
                           kind_name(value));
  }
}

TimingMode read_timing_mode(const json::value& value, const std::string& path) {
  const json::object& o = read_object(value, path);
  TimingMode mode;
  if (const json::value* type = o.if_contains("type"); type != nullptr && !type->is_null())
    mode.type = std::string(read_string(*type, member_path(path, "type")));
  static const std::set<std::string> kTypes{"process", "kernels", "region", "gpu", "custom"};
  if (!kTypes.count(mode.type))
    throw RequestError(member_path(path, "type"),
                       "must be one of process, kernels, region, gpu, custom (got " +
                           quoted(mode.type) + ")");
  if (mode.type == "kernels" || mode.type == "region") {
    if (const json::value* v = o.if_contains("include"); v != nullptr && !v->is_null())
      mode.include = read_names(*v, member_path(path, "include"));
    if (const json::value* v = o.if_contains("exclude"); v != nullptr && !v->is_null())
      mode.exclude = read_names(*v, member_path(path, "exclude"));
  }
  if (mode.type == "region")
    if (const json::value* v = o.if_contains("time_type"); v != nullptr && !v->is_null()) {
      mode.time_type = std::string(read_string(*v, member_path(path, "time_type")));
      if (mode.time_type != "kernel" && mode.time_type != "wall_clock")
        throw RequestError(member_path(path, "time_type"), "must be \"kernel\" or \"wall_clock\"");
    }
  return mode;
}

// "12.4", "9.0", "8": ComputeEval's versions (parse_semver reads the leading numbers).
std::string read_version(const json::value& value, const std::string& path) {
  const std::string text = read_command(value, path, 64);
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])))
    throw RequestError(path, "must be a version such as \"12.0\" (got " + quoted(text) + ")");
  return text;
}

} // namespace

bool is_program(const KernelCode& kernel) {
  return kernel.metadata.contains("problem");
}

std::string path_problem(std::string_view path, size_t max_bytes) {
  if (path.empty())
    return "must not be empty";
  if (path.size() > max_bytes)
    return "is longer than " + std::to_string(max_bytes) + " bytes";
  if (path.front() == '/')
    return "must be relative";
  for (const char c : path)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return "must not contain control characters";
  if (path.find('\\') != std::string_view::npos)
    return "must use '/' as its separator (no '\\')";
  size_t begin = 0;
  bool first = true;
  while (begin <= path.size()) {
    const size_t end = std::min(path.find('/', begin), path.size());
    const std::string_view part = path.substr(begin, end - begin);
    if (part.empty())
      return end == path.size() ? "must name a file, not a directory" : "has an empty component";
    if (part == "..")
      return "must not contain '..'";
    if (part == ".")
      return "must not contain '.' components";
    if (first && part == kReservedDirectory)
      return "must not be below .keval/ (keval's own files)";
    if (part.size() > 255)
      return "has a component longer than 255 bytes";
    first = false;
    begin = end + 1;
  }
  return "";
}

ProgramRequest parse_program(const KernelCode& kernel, const std::string& path,
                             const ProgramLimits& limits) {
  const std::string metadata_path = member_path(path, "metadata");
  const std::string problem_path = member_path(metadata_path, "problem");
  const json::object& problem = read_object(kernel.metadata.at("problem"), problem_path);
  Budget budget{limits};
  ProgramRequest program;
  const auto optional = [&](const char* key) -> const json::value* {
    const json::value* v = problem.if_contains(key);
    return v == nullptr || v->is_null() ? nullptr : v;
  };
  const auto required = [&](const char* key) -> const json::value& {
    const json::value* v = optional(key);
    if (v == nullptr)
      throw RequestError(member_path(problem_path, key), "is required");
    return *v;
  };
  const auto at = [&](const char* key) { return member_path(problem_path, key); };

  program.task_id = read_command(required("task_id"), at("task_id"), 1024);
  program.problem_type = "cuda_cpp";
  if (const json::value* type = optional("type")) {
    program.problem_type = std::string(read_string(*type, at("type")));
    if (program.problem_type != "cuda_cpp" && program.problem_type != "cuda_python")
      throw RequestError(at("type"), "must be \"cuda_cpp\" or \"cuda_python\"");
  }
  if (const json::value* v = optional("context_files"))
    program.context_files = read_files(*v, at("context_files"), budget);
  if (const json::value* v = optional("test_files"))
    program.test_files = read_files(*v, at("test_files"), budget);
  if (const json::value* v = optional("build_command"))
    program.build_command = read_command(*v, at("build_command"), limits.max_command_bytes);
  program.test_command =
      read_command(required("test_command"), at("test_command"), limits.max_command_bytes);
  if (const json::value* v = optional("benchmark_command"))
    program.benchmark_command = read_command(*v, at("benchmark_command"), limits.max_command_bytes);
  if (const json::value* v = optional("timing_mode"))
    program.timing_mode = read_timing_mode(*v, at("timing_mode"));
  if (const json::value* v = optional("timeout_seconds")) {
    const double t = read_finite_number(*v, at("timeout_seconds"));
    if (!(t > 0) || t > limits.max_timeout_seconds)
      throw RequestError(at("timeout_seconds"),
                         "must be > 0 and at most " + format_number(limits.max_timeout_seconds));
    program.timeout_seconds = t;
  }
  if (const json::value* v = optional("source_references"))
    read_references(*v, at("source_references"), program);
  if (const json::value* v = optional("min_cuda_toolkit"))
    program.min_cuda_toolkit = read_version(*v, at("min_cuda_toolkit"));
  if (problem.contains("compute_capability")) {
    const json::value* v = optional("compute_capability");
    program.compute_capability =
        v ? std::optional<std::string>(read_version(*v, at("compute_capability"))) : std::nullopt;
  }
  if (const json::value* v = optional("requires_datacenter_gpu"))
    program.requires_datacenter_gpu = read_bool(*v, at("requires_datacenter_gpu"));
  if (const json::value* v = optional("baseline_solution"))
    program.baseline = read_solution(*v, at("baseline_solution"), budget);

  // The solution: metadata.solution, else source_code as the one file solution.cu.
  const json::value* solution = kernel.metadata.if_contains("solution");
  if (solution != nullptr && !solution->is_null()) {
    program.solution = read_solution(*solution, member_path(metadata_path, "solution"), budget);
  } else if (!kernel.source_code.empty()) {
    program.solution.files.push_back({"solution.cu", kernel.source_code});
  } else {
    throw RequestError(member_path(metadata_path, "solution"),
                       "is required (or a non-empty source_code, taken as solution.cu)");
  }
  if (!program.solution.task_id.empty() && program.solution.task_id != program.task_id)
    throw RequestError(member_path(member_path(metadata_path, "solution"), "task_id"),
                       "is " + quoted(program.solution.task_id) + " but the problem is " +
                           quoted(program.task_id));
  // ComputeEval's FileSolution.validate: a solution never replaces the held-out harness.
  std::set<std::string> tests;
  for (const auto& f : program.test_files)
    tests.insert(f.path);
  const std::string files_path = member_path(member_path(metadata_path, "solution"), "files");
  for (size_t i = 0; i < program.solution.files.size(); ++i)
    if (tests.count(program.solution.files[i].path))
      throw RequestError(member_path(element_path(files_path, i), "path"),
                         quoted(program.solution.files[i].path) +
                             " is one of the problem's test files; a solution cannot replace "
                             "the harness");
  // The workspace holds context, test and solution files together: a file cannot also be a
  // directory of another ("include" and "include/k.h").
  std::set<std::string> all;
  for (const auto* list : {&program.context_files, &program.test_files, &program.solution.files})
    for (const auto& f : *list)
      all.insert(f.path);
  for (const auto& f : program.solution.files)
    for (size_t slash = f.path.find('/'); slash != std::string::npos;
         slash = f.path.find('/', slash + 1))
      if (all.count(f.path.substr(0, slash)))
        throw RequestError(files_path, quoted(f.path) + " needs " +
                                           quoted(f.path.substr(0, slash)) +
                                           " to be a directory, but it is a file of the problem");
  if (const json::value* v = kernel.metadata.if_contains("benchmark");
      v != nullptr && !v->is_null())
    program.benchmark = read_bool(*v, member_path(metadata_path, "benchmark"));
  if (const json::value* v = kernel.metadata.if_contains("harness_reuse");
      v != nullptr && !v->is_null())
    program.harness_reuse = read_bool(*v, member_path(metadata_path, "harness_reuse"));
  if (program.benchmark && !program.benchmark_command)
    throw RequestError(member_path(metadata_path, "benchmark"),
                       "is true but the problem has no benchmark_command");
  return program;
}

} // namespace keval::request
