// A benchmark run's time under ComputeEval's timing modes (docs/cuda_program.md): from the
// profile the CUPTI injection library wrote inside the benchmark process (kernels, region, gpu),
// from the wall time the runner measured around the process (process), or from the program's own
// COMPUTE_EVAL_TIME_MS line (custom). Whatever came from inside the process is the program's to
// forge, so it is bounded here: finite, not negative, never more than the process's wall time.
#pragma once

#include "request/program.hpp"

#include <optional>
#include <string>

#include <boost/json/object.hpp>

namespace keval::worker::program {

struct BenchmarkRun {
  double time_ms = 0;
  double wall_ms = 0;
  boost::json::object metrics; // the profile (ComputeEval's PerformanceMetrics), when one was read
  std::string error;           // non-empty: no time
};

// `profile_json`: the profile's text (kernels, region and gpu modes need it).
BenchmarkRun time_of_run(const request::TimingMode& mode, double wall_ms,
                         const std::string& stdout_text,
                         const std::optional<std::string>& profile_json);

// "cupti_kernels", "cupti_region_kernel", "cupti_region_wall_clock", "cupti_gpu",
// "process_wall_clock", "self_reported".
std::string time_source(const request::TimingMode& mode);

boost::json::object to_json(const request::TimingMode& mode);

// fnmatch-style glob of ComputeEval's include/exclude lists ('*' and '?' and [...]).
bool glob_match(const std::string& pattern, const std::string& name);

} // namespace keval::worker::program
