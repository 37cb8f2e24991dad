// Hardware counters of each kernel one run of a launch issues, read by CUPTI's range profiler in
// the process that runs it: automatic ranges (one per kernel, whatever stream or thread launched
// it) and kernel replay (CUPTI replays each kernel once per pass the counters need, restoring the
// memory it may touch between passes, so one run of the launch yields them all and leaves the
// results it would have left). Nothing here is timed: worker/metrics/ makes the report of what it
// returns.
//
// CUPTI is loaded at run time (detail/cupti_library.hpp); the metric names are Perfworks', as
// `ncu --metrics` takes them.
#pragma once

#include "worker/engine/device_counters.hpp"

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace keval::worker::detail {

// The counters of the device are being read by another process (a job on the same GPU); a
// moment later they may be free.
class CountersBusy : public CountersUnavailable {
public:
  using CountersUnavailable::CountersUnavailable;
};

struct CounterRequest {
  std::vector<std::string> metrics; // Perfworks names, e.g. "dram__bytes_read.sum"
  size_t max_kernels = 64;          // ranges the counter data holds; later kernels are not counted
};

// Runs `before_pass` (the engine's L2 flush), then `run` (it launches the kernels and waits for
// them) once, with the range profiler on `context`, the context of device `device_ordinal`,
// current on this thread. Throws CountersUnavailable when nothing can be counted; exceptions from
// `run` propagate after the profiler is switched off. The kernels' names and launches are left
// for the caller (CUPTI names automatic ranges by number).
DeviceCounters collect_counters(CUcontext context, int device_ordinal,
                                const CounterRequest& request,
                                const std::function<void()>& before_pass,
                                const std::function<void()>& run);

// Each kernel's `gpu__time_duration.sum` (ns) in each of `runs` runs of a launch, in launch order:
// the metric ncu's Duration is, read the way ncu reads it, from the timestamps the command stream
// writes around each launch (so the front end's processing of the launch is in it, unlike a
// trace interval, which runs from the grid's first block to its last). Every run is counted
// unreplayed: the metric needs one pass, so the range profiler runs in user replay, one pass per
// run, with nothing saved or restored, after `before` (the engine's L2 flush, as ncu's cache
// control). Automatic ranges serialise the launch's kernels, as ncu does. Throws
// CountersUnavailable when the counters cannot be read.
std::vector<std::vector<double>> time_kernels(CUcontext context, int device_ordinal, size_t runs,
                                              size_t max_kernels,
                                              const std::function<void()>& before,
                                              const std::function<void()>& run);

// DRAM traffic of the whole device over one interval, from PM sampling.
struct TrafficSample {
  uint64_t start_ns = 0, end_ns = 0; // CUPTI's clock, as the activity trace's timestamps
  double read_bytes = 0, write_bytes = 0;
};

// The device's DRAM traffic while `run` runs once, unreplayed, after `before`: PM sampling (the
// GPU's counters read at a fixed interval, device-wide, no replay), so each kernel's bytes are
// those of the samples its trace interval covers. Where kernel replay's restores leave the L2
// warm and dirty (working sets the L2 holds read from it instead of DRAM; dirty lines written
// back inside the range), this counts what an unprofiled run moves, as ncu does with its cache
// control. `expected_ms` sizes the sampling interval. Throws CountersUnavailable.
std::vector<TrafficSample> sample_dram_traffic(int device_ordinal, double expected_ms,
                                               const std::function<void()>& before,
                                               const std::function<void()>& run);

} // namespace keval::worker::detail
