#include "worker/program/step_process.hpp"

#include "supervisor/process.hpp"
#include "worker/isolation/sandbox.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include <boost/json/serialize.hpp>
#include <sys/resource.h>
#include <unistd.h>

namespace keval::worker::program {

namespace {

constexpr int kStepFailed = 125; // what sh's `command` uses for "could not run"

} // namespace

StepResult run_step(const std::filesystem::path& worker_exe, const protocol::SandboxPolicy& place,
                    pid_t runner_pid, const Step& step) {
  protocol::SandboxPolicy policy = place;
  policy.uid_of_pid = static_cast<uint32_t>(runner_pid);
  // The sandbox's environment (allow-listed, HOME and TMPDIR in the runner's directory), the
  // step's variables over it, and the toolchain first on PATH.
  std::map<std::string, std::string> variables;
  for (const std::string& entry : isolation::sandbox_environment(policy)) {
    const size_t eq = entry.find('=');
    if (eq != std::string::npos)
      variables[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [name, value] : step.env)
    variables[name] = value;
  if (!step.path_prepend.empty())
    variables["PATH"] =
        step.path_prepend +
        (variables.count("PATH") ? ":" + variables["PATH"] : std::string(":/usr/bin:/bin"));
  supervisor::CommandOptions options;
  options.output_cap = step.output_cap;
  options.directory = place.runner_dir;
  options.environment.emplace();
  for (const auto& [name, value] : variables)
    options.environment->push_back(name + "=" + value);
  std::vector<std::string> args{kStepOption, boost::json::serialize(protocol::to_json(policy)),
                                "--"};
  args.insert(args.end(), step.argv.begin(), step.argv.end());
  const auto started = std::chrono::steady_clock::now();
  const supervisor::CommandResult r = supervisor::run_command(
      worker_exe, args, std::chrono::milliseconds(static_cast<int64_t>(step.timeout_s * 1000.0)),
      options);
  StepResult result;
  result.exit_code = r.exit_code;
  result.signal = r.signal;
  result.timed_out = r.timed_out;
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  result.out = r.out;
  result.err = r.err;
  return result;
}

int exec_step(int argc, char** argv) {
  // argv: keval-worker --program-step POLICY -- ARGV...
  if (argc < 5 || std::strcmp(argv[1], kStepOption) != 0 || std::strcmp(argv[3], "--") != 0) {
    std::fprintf(stderr, "keval-worker %s: usage: %s POLICY -- ARGV...\n", kStepOption,
                 kStepOption);
    return kStepFailed;
  }
  try {
    const protocol::SandboxPolicy policy =
        protocol::parse_sandbox_policy(std::string_view(argv[2]));
    // While this process has one thread, so that the program and all it starts inherit it.
    if (policy.background_nice > 0 && ::setpriority(PRIO_PROCESS, 0, policy.background_nice) != 0)
      std::fprintf(stderr, "keval-worker %s: nice %d not set: %s\n", kStepOption,
                   policy.background_nice, std::strerror(errno));
    const boost::json::object report = isolation::apply_sandbox(policy);
    if (policy.mode == protocol::SandboxMode::strict) {
      const auto missing = isolation::missing_layers(report);
      if (!missing.empty()) {
        std::fprintf(stderr, "keval-worker %s: --sandbox strict and this step lacks: %s\n",
                     kStepOption, missing.front().c_str());
        return kStepFailed;
      }
    }
    if (::chdir(policy.runner_dir.c_str()) != 0) {
      std::fprintf(stderr, "keval-worker %s: cannot enter %s: %s\n", kStepOption,
                   policy.runner_dir.c_str(), std::strerror(errno));
      return kStepFailed;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "keval-worker %s: %s\n", kStepOption, e.what());
    return kStepFailed;
  }
  ::execvp(argv[4], argv + 4);
  std::fprintf(stderr, "%s: %s\n", argv[4], std::strerror(errno));
  return errno == ENOENT ? 127 : 126; // as a shell says "not found" / "cannot execute"
}

} // namespace keval::worker::program
