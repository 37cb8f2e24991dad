// The request level: JSON text, the top-level fields, KernelCode and IOContract. The parts of
// an IOContract (arguments, tensors, launch) live in detail/.
#include "request/parse.hpp"

#include "common/json_numbers.hpp"

#include "request/detail/io_parse.hpp"
#include "request/detail/json_reader.hpp"

#include <algorithm>
#include <unordered_map>

#include <boost/json/error.hpp>
#include <boost/json/parse_options.hpp>
#include <boost/json/stream_parser.hpp>

namespace keval::request {

namespace {

using namespace detail;

constexpr size_t kMaxJobIdLength = 64;

std::string compose_what(const std::string& path, const std::string& message) {
  return path.empty() ? message : path + ": " + message;
}

// ---- JSON text ----

struct TextPosition {
  size_t line = 1;
  size_t column = 1;
};

// 1-based line and column (in bytes) of `offset` in `text`.
TextPosition position_of(std::string_view text, size_t offset) {
  std::string_view before = text.substr(0, offset);
  size_t last_newline = before.rfind('\n');
  TextPosition position;
  position.line = 1 + static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
  position.column = 1 + offset - (last_newline == std::string_view::npos ? 0 : last_newline + 1);
  return position;
}

// Boost reports "extra data" at the whitespace before it; point at the offending character.
size_t skip_whitespace(std::string_view text, size_t offset) {
  while (offset < text.size() && (text[offset] == ' ' || text[offset] == '\t' ||
                                  text[offset] == '\n' || text[offset] == '\r'))
    ++offset;
  return offset;
}

[[noreturn]] void fail_syntax(std::string_view text, size_t offset, const json::error_code& error,
                              size_t max_depth) {
  TextPosition at = position_of(text, skip_whitespace(text, offset));
  std::string reason = error == json::error::too_deep
                           ? "nested deeper than " + std::to_string(max_depth) + " levels"
                           : error.message();
  throw RequestError("", "invalid JSON at line " + std::to_string(at.line) + ", column " +
                             std::to_string(at.column) + ": " + reason);
}

json::value parse_json_text(std::string_view text, size_t max_depth) {
  json::parse_options options;
  options.max_depth = max_depth;
  json::stream_parser parser({}, options);
  json::error_code error;
  size_t consumed = parser.write(text.data(), text.size(), error);
  if (!error)
    parser.finish(error); // a truncated document fails here, at the end of the text
  if (error)
    fail_syntax(text, consumed, error, max_depth);
  return parser.release();
}

// ---- IOContract and KernelCode ----

std::vector<ArgSpec> parse_args(const json::value& value, const std::string& path,
                                const ParseContext& ctx) {
  const json::array& items = read_array(value, path);
  if (items.size() > ctx.limits.max_args)
    throw RequestError(path, "has " + std::to_string(items.size()) +
                                 " entries, more than the limit of " +
                                 std::to_string(ctx.limits.max_args));
  TensorBudget budget; // one IOContract is one kernel: its tensors share the total limit
  std::unordered_map<std::string, size_t> index_by_name;
  std::vector<ArgSpec> args;
  args.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    std::string arg_path = element_path(path, i);
    ArgSpec arg = parse_arg_spec(items[i], arg_path, budget, ctx);
    auto [first, inserted] = index_by_name.emplace(arg.name, i);
    if (!inserted)
      throw RequestError(member_path(arg_path, "name"), "duplicate name '" + arg.name +
                                                            "', already used by " +
                                                            element_path("args", first->second));
    args.push_back(std::move(arg));
  }
  return args;
}

IOContract parse_io(const json::value& value, const std::string& path, const ParseContext& ctx) {
  ObjectReader reader(value, path, ctx);
  IOContract io;
  io.args = parse_args(reader.required("args"), reader.path_of("args"), ctx);
  if (const json::value* launch = reader.optional("launch"))
    io.launch = parse_launch_config(*launch, reader.path_of("launch"), ctx);
  reader.warn_unknown_fields();
  return io;
}

std::string parse_source_code(const json::value& value, const std::string& path,
                              const Limits& limits) {
  std::string_view source = read_nonempty_string(value, path);
  if (source.size() > limits.max_source_bytes)
    throw RequestError(path, "is " + std::to_string(source.size()) + " bytes, over the limit of " +
                                 std::to_string(limits.max_source_bytes) + " bytes");
  // Compilers, interpreters and the C ABI (a NUL-terminated string) would each see the source end
  // there: the kernel that ran would be a prefix of the one sent.
  if (const size_t nul = source.find('\0'); nul != std::string_view::npos) {
    const size_t line =
        1 + static_cast<size_t>(std::count(source.begin(), source.begin() + nul, '\n'));
    const size_t line_start = source.rfind('\n', nul == 0 ? 0 : nul - 1);
    const size_t column =
        line_start == std::string_view::npos || nul == 0 ? nul + 1 : nul - line_start;
    throw RequestError(path, "contains a NUL byte at offset " + std::to_string(nul) + " (line " +
                                 std::to_string(line) + ", column " + std::to_string(column) +
                                 "): source code cannot contain NUL");
  }
  return std::string(source);
}

// `device_metrics`: true (every section), false (none), or a list of section names and Perfworks
// metric names ("dram__bytes_read.sum": unit__counter, then its rollups and submetrics).
bool is_metric_name(std::string_view name) {
  const size_t unit_end = name.find("__");
  if (name.empty() || name.size() > 128 || unit_end == 0 || unit_end == std::string_view::npos ||
      unit_end + 2 >= name.size())
    return false;
  bool previous_dot = false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool dot = c == '.';
    if (!(dot || c == '_' || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
      return false;
    if (dot && (i < unit_end || previous_dot || i + 1 == name.size()))
      return false;
    previous_dot = dot;
  }
  return true;
}

DeviceMetricsRequest parse_device_metrics(const json::value& value, const std::string& path) {
  constexpr size_t kMaxEntries = 64;
  DeviceMetricsRequest request;
  if (value.is_bool()) {
    request.enabled = value.get_bool();
    if (request.enabled)
      request.sections.assign(std::begin(kDeviceMetricSections), std::end(kDeviceMetricSections));
    return request;
  }
  const json::array* list = value.if_array();
  if (list == nullptr)
    throw RequestError(path, "must be true, false, or a list of sections and metric names");
  if (list->empty() || list->size() > kMaxEntries)
    throw RequestError(path, "must list 1 to " + std::to_string(kMaxEntries) + " entries");
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    const std::string_view entry = read_string((*list)[i], at);
    auto& into = std::find(std::begin(kDeviceMetricSections), std::end(kDeviceMetricSections),
                           entry) != std::end(kDeviceMetricSections)
                     ? request.sections
                     : request.metrics;
    if (&into == &request.metrics && !is_metric_name(entry))
      throw RequestError(at, "'" + std::string(entry.substr(0, 64)) +
                                 "' is neither a section (speed_of_light, occupancy, memory, "
                                 "compute, detailed) nor a Perfworks metric name such as "
                                 "dram__bytes_read.sum");
    if (std::find(into.begin(), into.end(), entry) == into.end())
      into.emplace_back(entry);
  }
  return request;
}

KernelCode parse_kernel_code(const json::value& value, const std::string& path,
                             const ParseContext& ctx) {
  ObjectReader reader(value, path, ctx);
  KernelCode kernel;
  kernel.kernel_type = std::string(read_c_string(
      reader.required("kernel_type"), reader.path_of("kernel_type"), kMaxKernelTypeBytes, true));
  if (const json::value* metadata = reader.optional("metadata"))
    kernel.metadata = read_object(*metadata, reader.path_of("metadata"));
  // A whole program (docs/cuda_program.md) carries its code as files in metadata.solution, so
  // its source_code may be absent or empty; everything else needs one.
  const json::value* source = reader.optional("source_code");
  const bool program = kernel.metadata.contains("problem");
  if (!program || (source != nullptr && !(source->is_string() && source->as_string().empty())))
    kernel.source_code = parse_source_code(program ? *source : reader.required("source_code"),
                                           reader.path_of("source_code"), ctx.limits);
  if (const json::value* io = reader.optional("io")) {
    kernel.io = parse_io(*io, reader.path_of("io"), ctx);
    kernel.io_json = *io;
  }
  if (const json::value* metrics = reader.optional("device_metrics"))
    kernel.device_metrics = parse_device_metrics(*metrics, reader.path_of("device_metrics"));
  reader.warn_unknown_fields();
  return kernel;
}

// ---- Top level ----

bool is_job_id_character(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// Job ids name files and URLs, so they are restricted to a safe alphabet; "." and ".." would
// name directories.
std::string parse_job_id(const json::value& value, const std::string& path) {
  std::string_view id = read_nonempty_string(value, path);
  if (id.size() > kMaxJobIdLength)
    throw RequestError(path, "has " + std::to_string(id.size()) + " characters, more than " +
                                 std::to_string(kMaxJobIdLength));
  auto bad = std::find_if_not(id.begin(), id.end(), is_job_id_character);
  if (bad != id.end())
    throw RequestError(path, "contains '" + std::string(1, *bad) +
                                 "'; only letters, digits, '.', '_' and '-' are allowed");
  if (id == "." || id == "..")
    throw RequestError(path, "must not be '.' or '..'");
  return std::string(id);
}

double parse_timeout(const json::value& value, const std::string& path, double max_seconds) {
  double seconds = read_finite_number(value, path);
  if (seconds <= 0)
    throw RequestError(path, "must be > 0, got " + format_number(seconds));
  if (seconds > max_seconds)
    throw RequestError(path, "must be <= " + format_number(max_seconds) + ", got " +
                                 format_number(seconds));
  return seconds;
}

void parse_kernels(EvalRequest& request, ObjectReader& reader, const ParseContext& ctx) {
  if (request.mode == EvalRequest::Mode::evaluate) {
    request.kernel = parse_kernel_code(reader.required("kernel"), "kernel", ctx);
    return;
  }
  request.ref = parse_kernel_code(reader.required("ref_kernel"), "ref_kernel", ctx);
  request.kernel = parse_kernel_code(reader.required("custom_kernel"), "custom_kernel", ctx);
}

// `true`: every flag; `false`: none; else a list of flag names (request/model.hpp, kFlagNames).
std::vector<std::string> parse_strict(const json::value& value, const std::string& path) {
  std::vector<std::string> names;
  if (value.is_bool()) {
    if (value.get_bool())
      for (std::string_view name : kFlagNames)
        names.emplace_back(name);
    return names;
  }
  if (!value.is_array())
    throw RequestError(path, std::string("must be true, false or a list of flag names, got ") +
                                 kind_name(value));
  const json::array& list = value.get_array();
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string item = element_path(path, i);
    const std::string_view name = read_nonempty_string(list[i], item);
    if (std::find(std::begin(kFlagNames), std::end(kFlagNames), name) == std::end(kFlagNames)) {
      std::string known;
      for (std::string_view n : kFlagNames)
        known += (known.empty() ? "" : ", ") + std::string(n);
      throw RequestError(item, "'" + std::string(name.substr(0, 64)) +
                                   "' is not a flag; flags are " + known);
    }
    if (std::find(names.begin(), names.end(), name) == names.end())
      names.emplace_back(name);
  }
  return names;
}

// num_trials and timeout are the V2 contract's; the rest are keval extensions.
void parse_settings(EvalRequest& request, ObjectReader& reader, const Limits& limits) {
  if (const json::value* trials = reader.optional("num_trials"))
    request.num_trials = read_positive_int(*trials, "num_trials", limits.max_num_trials);
  if (const json::value* timeout = reader.optional("timeout"))
    request.timeout_s = parse_timeout(*timeout, "timeout", limits.max_timeout_s);
  if (const json::value* trials = reader.optional("num_correctness_trials"))
    request.num_correctness_trials =
        read_positive_int(*trials, "num_correctness_trials", limits.max_correctness_trials);
  if (const json::value* atol = reader.optional("atol"))
    request.tolerance.atol = read_non_negative_number(*atol, "atol");
  if (const json::value* rtol = reader.optional("rtol"))
    request.tolerance.rtol = read_non_negative_number(*rtol, "rtol");
  if (const json::value* seed = reader.optional("seed"))
    request.seed = read_uint64(*seed, "seed");
  if (const json::value* strict = reader.optional("strict"))
    request.strict_flags = parse_strict(*strict, "strict");
  if (const json::value* threshold = reader.optional("excessive_speedup_threshold")) {
    request.excessive_speedup_threshold =
        read_finite_number(*threshold, "excessive_speedup_threshold");
    if (request.excessive_speedup_threshold <= 1.0)
      throw RequestError("excessive_speedup_threshold",
                         "must be > 1, got " + format_number(request.excessive_speedup_threshold));
  }
  if (const json::value* noise = reader.optional("max_noise")) {
    request.max_noise_percent = read_finite_number(*noise, "max_noise");
    if (*request.max_noise_percent <= 0)
      throw RequestError("max_noise",
                         "must be > 0 (percent), got " + format_number(*request.max_noise_percent));
  }
  if (const json::value* min = reader.optional("min_samples"))
    request.min_samples = read_positive_int(*min, "min_samples", limits.max_num_trials);
  if (const json::value* trace = reader.optional("device_trace"))
    request.device_trace = read_bool(*trace, "device_trace");
  if (const json::value* metrics = reader.optional("device_metrics"))
    request.device_metrics = parse_device_metrics(*metrics, "device_metrics");
  if (const json::value* hardware = reader.optional("hardware_time")) {
    if (hardware->is_bool())
      request.hardware_time_runs = hardware->get_bool() ? kDefaultHardwareTimeRuns : 0;
    else if (hardware->is_number())
      request.hardware_time_runs =
          read_positive_int(*hardware, "hardware_time", kMaxHardwareTimeRuns);
    else
      throw RequestError("hardware_time", std::string("must be true, false or a number of runs "
                                                      "(1 to ") +
                                              std::to_string(kMaxHardwareTimeRuns) + "), got " +
                                              kind_name(*hardware));
  }
  if (const json::value* async = reader.optional("async"))
    request.async = read_bool(*async, "async");
  if (const json::value* job_id = reader.optional("job_id"))
    request.job_id = parse_job_id(*job_id, "job_id");
}

} // namespace

RequestError::RequestError(std::string path, std::string message)
    : std::runtime_error(compose_what(path, message)), path_(std::move(path)),
      message_(std::move(message)) {}

EvalRequest parse_request_text(std::string_view text, EvalRequest::Mode mode, const Limits& limits,
                               TensorDataDecoding decoding) {
  if (text.size() > limits.max_request_bytes)
    throw RequestError("", "request is " + std::to_string(text.size()) +
                               " bytes, over the limit of " +
                               std::to_string(limits.max_request_bytes) + " bytes");
  return parse_request(parse_json_text(text, limits.max_json_depth), mode, limits, decoding);
}

EvalRequest parse_request(const boost::json::value& doc, EvalRequest::Mode mode,
                          const Limits& limits, TensorDataDecoding decoding) {
  if (!doc.is_object())
    throw RequestError("", std::string("request must be a JSON object, got ") + kind_name(doc));
  EvalRequest request;
  request.mode = mode;
  ParseContext ctx{limits, request.warnings, decoding};
  ObjectReader reader(doc, "", ctx);
  parse_kernels(request, reader, ctx);
  parse_settings(request, reader, limits);
  reader.warn_unknown_fields();
  // Fields keval reads refuse a non-finite number themselves; this catches the rest (an unknown
  // field, a reference's metadata), which would otherwise reach the job's frame.
  if (const auto at = non_finite_number_at(doc))
    throw RequestError(*at, "must be a finite number (a literal beyond a double's range reads as "
                            "infinity)");
  request.original = doc.get_object();
  return request;
}

IOContract parse_io_contract(const boost::json::value& io, const std::string& path,
                             const Limits& limits, std::vector<std::string>* warnings,
                             TensorDataDecoding decoding) {
  std::vector<std::string> discarded;
  ParseContext ctx{limits, warnings != nullptr ? *warnings : discarded, decoding};
  return parse_io(io, path, ctx);
}

} // namespace keval::request
