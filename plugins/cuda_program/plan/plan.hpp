// The cuda_program kernel type's plan (keval_plugin_api.plan_program, docs/cuda_program.md):
// what a ComputeEval problem means on this machine. Whether it can run here at all (compute
// capability, toolkit), the build as one shell command and, where its shape allows, split so the
// held-out harness is compiled once and reused, the test and the benchmark, and their timeouts.
#pragma once

#include <string>

#include <boost/json/object.hpp>

namespace keval::cuda_program {

struct Toolchain {
  std::string nvcc;    // resolved path, empty when none was found
  std::string version; // "13.0.48", empty when unknown
  std::string banner;  // the whole `nvcc --version` text (part of the harness key)
};

// Finds nvcc (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin) and reads its version.
Toolchain find_toolchain();

// `program`: {problem, solution{files}, benchmark}; `which`: "solution" or "baseline";
// `environment`: {cuda_arch, gpu_count, gpu_name?, no_gpu_reason?}; `profiler`: the CUPTI
// injection library's path, or empty when it was not built. Throws std::invalid_argument for a
// program the core should not have let through.
boost::json::object make_plan(const boost::json::object& program, const std::string& which,
                              const boost::json::object& environment, const Toolchain& toolchain,
                              const std::string& profiler);

} // namespace keval::cuda_program
