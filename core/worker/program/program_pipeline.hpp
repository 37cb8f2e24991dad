// A whole-program job (KEVAL_CAP_PROGRAM, docs/cuda_program.md) inside the trusted keval-worker:
// the plan from the kernel type's plugin, the source references, the build with no GPU, the
// test on the granted device, and in performance mode the benchmark of the solution and the
// problem's baseline. Every command runs in a sandboxed runner (worker/runner/
// program_commands.hpp) and this process judges by the exit status the runner read from the
// kernel; nothing the program prints or writes is taken as a verdict.
#pragma once

#include "protocol/blocking_channel.hpp"
#include "worker/pipeline/pipeline.hpp"
#include "worker/runner/runner_client.hpp"

#include <boost/json/object.hpp>

namespace keval::worker {

// Runs the job to its last phase with `solution_runner` (its plugin, a program type, loaded) for
// the solution; the baseline and the harness get runners of their own from `runners`. Sends the
// phases; the caller sends `done` and ends every process.
void run_program_job(protocol::BlockingChannel& channel, const JobSpec& job,
                     RunnerClient& solution_runner, const std::string& plugin_path,
                     const boost::json::object& isolation, RunnerSource& runners);

} // namespace keval::worker
