// A whole program's command (build, test, benchmark) as a process of its own: started by the
// trusted worker as `keval-worker --program-step POLICY -- ARGV...`, it applies the sandbox to
// itself in its runner's place (the runner's directory, cgroup and uid: the workspace the runner
// wrote) and then becomes the command. So the layers hold for the very process that runs the
// program, with its own /proc entry writable (the CUDA driver names its threads there; a process
// a runner forks would inherit the runner's rules, which name the runner's entry only), and the
// trusted worker itself waits for it: the exit status it judges by comes from the kernel.
#pragma once

#include "protocol/sandbox_policy.hpp"

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace keval::worker::program {

inline constexpr const char* kStepOption = "--program-step";

// --- In the trusted worker ------------------------------------------------------------------

struct StepResult {
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool timed_out = false;
  double seconds = 0;
  std::string out, err; // first and last halves of output_cap each
};

struct Step {
  std::vector<std::string> argv;          // argv[0] looked up on PATH when bare
  std::map<std::string, std::string> env; // over the sandbox's environment
  std::string path_prepend;               // put first on PATH ("" for none)
  double timeout_s = 60;
  size_t output_cap = 64u << 10;
};

// Runs `step` in the place of the runner `runner_pid` (`place`: its policy). Throws
// std::system_error when the process cannot be started.
StepResult run_step(const std::filesystem::path& worker_exe, const protocol::SandboxPolicy& place,
                    pid_t runner_pid, const Step& step);

// --- In the step's process ------------------------------------------------------------------

// `keval-worker --program-step POLICY -- ARGV...`: applies the sandbox, enters the runner's
// directory and execs ARGV. Returns only on failure (exit code 125, the reason on stderr).
int exec_step(int argc, char** argv);

} // namespace keval::worker::program
