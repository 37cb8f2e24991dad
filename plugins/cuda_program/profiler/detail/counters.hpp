// Counter mode: hardware counters of the kernels a benchmark process launches, for the device
// metrics of a `cuda_program` job (docs/device_metrics.md). keval runs the benchmark command once
// more, after its timed runs, with KEVAL_COUNTERS_OUTPUT set; this library then counts the first
// launches of each kernel the timing mode selects under CUPTI's range profiler (one session per
// counted launch: kernel replay, one range), and at exit writes what it read in the shape of the
// runners' `metrics` reply (worker/engine/device_counters.hpp), which keval checks as data from
// the program's own process: it never feeds the verdict or the timing.
//
// Environment (set by keval; see README.md):
//   KEVAL_COUNTERS_OUTPUT        where to write the counters (absolute path)
//   KEVAL_COUNTERS_METRICS       Perfworks metric names, comma-separated
//   KEVAL_COUNTERS_MAX_KERNELS   launches counted in all (default 32)
//   KEVAL_COUNTERS_PER_KERNEL    launches counted per kernel name (default 2)
//   KEVAL_COUNTERS_KERNEL_INCLUDE / _KERNEL_EXCLUDE   kernel-name globs, one per line
//   KEVAL_COUNTERS_RANGE_INCLUDE / _RANGE_EXCLUDE     NVTX-range globs, one per line: a launch is
//       counted only inside an open range they select (the `region` timing mode)
#pragma once

#include <cupti.h>

namespace keval::profiler {

// Whether this process runs in counter mode (KEVAL_COUNTERS_OUTPUT is set).
bool counters_requested();

// Subscribes to the launch callbacks; from InitializeInjection. Failures go to the counters'
// report (and stderr), never to the program.
void start_counters();

// The launch shape of a counted kernel, from its CONCURRENT_KERNEL activity record.
void note_kernel_record(const CUpti_ActivityKernel10& record);

// Writes the counters file; from the exit handler, after the activity flush.
void write_counters();

} // namespace keval::profiler
