// Whole-program requests (docs/cuda_program.md): a ComputeEval problem and solution carried in a
// kernel's metadata. Checked here before anything is written anywhere: every path relative and
// inside the workspace, sizes capped, shapes as ComputeEval defines them; a violation is a
// RequestError naming the field.
#pragma once

#include "request/model.hpp"

#include <optional>
#include <string>
#include <vector>

namespace keval::request {

struct ProgramFile {
  std::string path; // relative, '/'-separated, no '.', '..' or empty component
  std::string content;
};

struct ProgramSolution {
  std::string task_id;
  std::vector<ProgramFile> files;
};

// ComputeEval's timing_mode: how a benchmark's time is taken.
struct TimingMode {
  std::string type = "process"; // process | kernels | region | gpu | custom
  std::vector<std::string> include, exclude;
  std::string time_type = "kernel"; // region: kernel | wall_clock
};

struct ProgramRequest {
  std::string task_id;
  std::string problem_type; // cuda_cpp | cuda_python
  std::vector<ProgramFile> context_files, test_files;
  std::optional<std::string> build_command;
  std::string test_command;
  std::optional<std::string> benchmark_command;
  TimingMode timing_mode;
  std::optional<double> timeout_seconds;
  // source_references, normalised: a string or list is `all`.
  std::vector<std::string> references_all, references_any;
  std::optional<std::string> min_cuda_toolkit;
  std::optional<std::string> compute_capability = "8.0"; // null: runs without a GPU
  bool requires_datacenter_gpu = false;
  ProgramSolution solution;
  std::optional<ProgramSolution> baseline;
  bool benchmark = false;    // keval: performance mode
  bool harness_reuse = true; // keval: false builds every solution with the plain command
};

struct ProgramLimits {
  size_t max_path_bytes = 4096;
  size_t max_file_bytes = 4u << 20;
  size_t max_total_bytes = 64u << 20;
  size_t max_files = 1000;
  size_t max_command_bytes = 64u << 10;
  double max_timeout_seconds = 3600.0;
};

// True when `kernel` is a program request (its metadata holds a problem).
bool is_program(const KernelCode& kernel);

// Parses kernel.metadata ({problem, solution, benchmark}) of the kernel at `path` ("kernel").
// Throws RequestError naming the field at fault. Unknown fields are kept by the caller's JSON
// and not reported: a ComputeEval problem has many that keval does not use.
ProgramRequest parse_program(const KernelCode& kernel, const std::string& path,
                             const ProgramLimits& limits = {});

// Why `path` cannot name a file in a workspace, or "" when it can (see ProgramFile::path).
std::string path_problem(std::string_view path, size_t max_bytes = 4096);

} // namespace keval::request
