// The request model of the V2 contract (the compatibility spec): KernelCode, IOContract, and the
// evaluate / compare requests. Plain data; parsing and validation live in parse.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

namespace keval::request {

// Element types the V2 contract allows ("PyTorch dtype string").
enum class DType { f16, bf16, f32, f64, i8, i16, i32, i64, u8, boolean };

// Name as written in requests ("float32", "bfloat16", "int64", "bool", ...).
const char* dtype_name(DType dtype);
// Accepts the canonical names and torch's aliases ("float", "half", "torch.float32", ...).
std::optional<DType> parse_dtype(std::string_view name);
size_t dtype_size(DType dtype);

enum class InitKind { randn, uniform, zeros, ones, full, arange };
const char* init_kind_name(InitKind kind);

// TensorInit: server-side generation. Only the fields of the chosen kind are meaningful.
struct TensorInit {
  InitKind kind = InitKind::randn;
  std::optional<uint64_t> seed;   // randn / uniform; absent means "derive from trial seed"
  double mean = 0.0, std = 1.0;   // randn
  double low = 0.0, high = 1.0;   // uniform
  double fill_value = 0.0;        // full
  double start = 0.0, step = 1.0; // arange
};

// TensorData: client-provided bytes, checked against shape * dtype size. Decoded (base64, then
// zlib when compressed) only when parsed with TensorDataDecoding::decode (the worker); empty in
// the host, which only checks them (parse.hpp).
struct TensorData {
  std::vector<uint8_t> bytes;
  std::string compress; // "" or "zlib", as sent (kept for round-tripping)
};

struct TensorSpec {
  std::vector<int64_t> shape;
  DType dtype = DType::f32;
  std::optional<TensorInit> init;
  std::optional<TensorData> data;

  int64_t numel() const;
  uint64_t nbytes() const { return static_cast<uint64_t>(numel()) * dtype_size(dtype); }
};

enum class ArgType { tensor, int_, float_, bool_, str };
const char* arg_type_name(ArgType type);

enum class Role { input, output, inout };
const char* role_name(Role role);

struct ArgSpec {
  std::string name;
  ArgType type = ArgType::tensor;
  Role role = Role::input;
  bool is_meta = false;
  std::optional<TensorSpec> tensor_spec; // type == tensor
  // Scalar value (type != tensor), kept as JSON so int/float/bool/str keep their exact form.
  boost::json::value value;
};

struct LaunchDim {
  int64_t x = 1, y = 1, z = 1;
};

struct LaunchConfig {
  std::optional<LaunchDim> grid;
  std::optional<LaunchDim> block;
  std::optional<int64_t> num_warps;
  std::optional<int64_t> num_stages;
  std::optional<int64_t> shared_mem_bytes; // keval extension: dynamic shared memory (CUDA)
};

struct IOContract {
  std::vector<ArgSpec> args;
  std::optional<LaunchConfig> launch;
};

// keval: hardware counters of a side's kernels, collected after its timing (`device_metrics`:
// true, false, or a list of sections and Perfworks metric names). Seed 000's categories.
inline constexpr std::string_view kDeviceMetricSections[] = {"speed_of_light", "occupancy",
                                                             "memory", "compute", "detailed"};
struct DeviceMetricsRequest {
  bool enabled = true;               // false: `"device_metrics": false`, which turns a side off
  std::vector<std::string> sections; // of kDeviceMetricSections
  std::vector<std::string> metrics;  // raw Perfworks names ("dram__bytes_read.sum")
};

// keval: `hardware_time`, runs of each side's launch of their own after its timing, each timed by
// the hardware's counters (ncu's gpu__time_duration): true asks for the default number of runs,
// a number for that many.
inline constexpr int64_t kDefaultHardwareTimeRuns = 10;
inline constexpr int64_t kMaxHardwareTimeRuns = 100;

// KernelCode: one kernel of a request.
struct KernelCode {
  std::string source_code;
  std::string kernel_type;
  boost::json::object metadata; // {} when absent
  std::optional<IOContract> io;
  boost::json::value io_json; // the `io` object exactly as sent (null when absent)
  // keval: this side's device metrics, over the request's own (absent: the request's).
  std::optional<DeviceMetricsRequest> device_metrics;
};

// Tolerances for correctness (the V2 contract default: atol = rtol = 1e-2).
struct Tolerance {
  double atol = 1e-2;
  double rtol = 1e-2;
};

// The checks a verdict cannot settle, reported beside it as flags ({name, reason, details} in
// kernel_exec_result.metadata.flags); a request's `strict` turns the named ones into
// correctness: false. Names are part of the API.
inline constexpr std::string_view kFlagNames[] = {
    "excessive_speedup",     // the speedup is above excessive_speedup_threshold
    "library_only",          // the candidate's timed kernels all come from libraries
    "precision",             // passes the request's tolerance but not the dtype's strict default
    "degenerate_check",      // the reference's outputs cannot tell a wrong kernel from a right one
    "output_aliases_input",  // the candidate returned (a copy of) one of its inputs
    "static",                // its source holds patterns that game timing or checks
    "constant_output",       // evaluate: its outputs did not change when its inputs did
    "work_after_completion", // its device work ran outside the timed window (added to the time)
};

// POST /evaluate and POST /compare, one type: `ref` is present only for compare.
struct EvalRequest {
  enum class Mode { evaluate, compare } mode = Mode::evaluate;
  KernelCode kernel;                  // evaluate: `kernel`; compare: `custom_kernel`
  std::optional<KernelCode> ref;      // compare: `ref_kernel`
  int64_t num_trials = 100;           // profiled samples
  int64_t num_correctness_trials = 5; // keval extension; seed default behaviour
  double timeout_s = 120.0;           // whole-job wall-clock limit
  Tolerance tolerance;
  // keval: reproduces a run. Absent, each job draws a secret seed for its inputs (reported
  // after the job as metadata.seed), so nothing the candidate precomputes can match them.
  std::optional<uint64_t> seed;
  // keval: flags (kFlagNames) that make the result incorrect; `"strict": true` names them all.
  std::vector<std::string> strict_flags;
  double excessive_speedup_threshold = 10.0; // keval: KernelBench's default
  // keval: stop sampling once every side's relative standard error of the mean is at most this
  // many percent (nvbench's --max-noise idea), after min_samples; num_trials stays the cap.
  std::optional<double> max_noise_percent;
  int64_t min_samples = 10;
  // keval: trace each side's device work while timed (CUPTI, on a GPU): what work_after_completion,
  // library_only and the kernel time come from. Off, samples are timed untraced (no
  // instrumentation in the timed region at all) and the result says so.
  bool device_trace = true;
  // keval: device metrics for both sides (each side's own `device_metrics` wins); absent: none.
  std::optional<DeviceMetricsRequest> device_metrics;
  // What a side asked for: its own setting, else the request's; nullopt when it wants none.
  std::optional<DeviceMetricsRequest> device_metrics_for(const KernelCode& side) const {
    const auto& chosen = side.device_metrics ? side.device_metrics : device_metrics;
    if (!chosen || !chosen->enabled)
      return std::nullopt;
    return chosen;
  }
  // keval: runs timed by the hardware's counters per side (kDefaultHardwareTimeRuns for `true`);
  // 0: none.
  int64_t hardware_time_runs = 0;
  bool async = false;                // daemon only
  std::optional<std::string> job_id; // client-chosen id, else generated
  boost::json::object original;      // the request as sent, kept for the job record
  // Non-fatal findings, each "path: message" (unknown fields ignored for seed compatibility,
  // parameters that do not apply to the chosen init kind, ...). Reported in the response.
  std::vector<std::string> warnings;
};

} // namespace keval::request
