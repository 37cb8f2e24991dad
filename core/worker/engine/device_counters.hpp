// Hardware counters of the kernels one run of a launch issues (Engine::collect_counters), as the
// process that ran them read them: what worker/metrics/ turns into a side's device_metrics.
// Collected after a side's timed samples, never while one is taken.
#pragma once

#include "worker/engine/device_work.hpp"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>

namespace keval::worker {

// Counters cannot be read where the launch runs; what() says why in words a user can act on (no
// GPU, no CUPTI, the driver restricts counters to administrators, another profiler holds them).
class CountersUnavailable : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// What the device offers one SM, for the theoretical occupancy of a launch.
struct SmLimits {
  int64_t sm_count = 0;
  int64_t max_warps = 0;                 // resident warps per SM
  int64_t max_blocks = 0;                // resident blocks per SM
  int64_t registers = 0;                 // 32-bit registers per SM
  int64_t shared_bytes = 0;              // shared memory per SM
  int64_t reserved_shared_per_block = 0; // the driver's own shared memory per block
};

// What runs of the launch of their own, neither replayed nor restored, measured of one kernel:
// its duration (gpu__time_duration from one-pass profiled runs, ncu's metric; else the trace's
// interval) and its DRAM bytes from PM sampling (ncu's way; kernel replay's restores leave the
// L2 warm and dirty). worker/metrics/ reports these, and what follows from them, in place of the
// range profiler's values.
struct UnreplayedRun {
  double duration_ns = 0; // 0: no duration was measured
  double dram_read_bytes = 0;
  double dram_write_bytes = 0;
};

struct CountedKernel {
  std::string name;                  // demangled where the trace saw it; "kernel <i>" otherwise
  std::optional<LaunchShape> launch; // from the trace of the first pass, when there is one
  std::vector<double> values;        // one per DeviceCounters::metrics
  std::optional<UnreplayedRun> unreplayed;
};

struct DeviceCounters {
  std::string chip;                                             // "GH100", ...
  std::vector<std::string> metrics;                             // collected, in values' order
  std::vector<std::pair<std::string, std::string>> unsupported; // (metric, why) left out
  std::vector<CountedKernel> kernels;                           // in launch order
  int64_t passes = 0;      // runs of the launch the counters needed
  int64_t not_counted = 0; // kernels past the most one run may count
  std::optional<SmLimits> limits;
  // Where the kernels' durations and DRAM bytes come from: "unreplayed" (every kernel's
  // `unreplayed` is set), else why they are the range profiler's.
  std::string traffic;
  // Unreplayed durations are gpu__time_duration unless this says why they are the trace's
  // intervals instead.
  std::string trace_durations;
};

// What a runner sends (to_json) and the trusted worker reads back (from_json: the shapes and
// bounds above, every number finite; std::invalid_argument naming the field at fault).
boost::json::object to_json(const DeviceCounters& counters);
DeviceCounters device_counters_from_json(const boost::json::object& o);

// Bounds on what a runner may send back.
inline constexpr size_t kMaxCountedKernels = 256;
inline constexpr size_t kMaxCounterMetrics = 128;

} // namespace keval::worker
