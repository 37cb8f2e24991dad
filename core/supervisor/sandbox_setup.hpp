// The host's half of the sandbox: turns `--sandbox`, `--job-user`, `--runner-uids`, `--job-memory`,
// `--job-pids` into the policy every keval-worker is started with, prepares what the job uid must
// reach (its runners' directories, the shared build cache) and what it must not (the state
// directory), hands a delegated cgroup v2 to the runners where this process may, and probes what
// the machine actually applies so `keval serve` can say it once at start.
#pragma once

#include "protocol/sandbox_policy.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>

#include <boost/json/object.hpp>

namespace keval::supervisor {

struct SandboxOptions {
  protocol::SandboxMode mode = protocol::SandboxMode::standard;
  std::string job_user = "nobody"; // NAME, UID or UID:GID; used when keval runs as root
  uint64_t memory_bytes = 0;       // 0: protocol::default_job_memory()
  uint64_t max_processes = 1024;
  // Runners run as this + their pid (--runner-uids; 0: all as the job user's uid).
  uint32_t runner_uid_base = protocol::SandboxPolicy::kDefaultRunnerUidBase;
};

class SandboxOptionError : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

// The policy for workers of a host whose state lives in `state_dir`. Creates the work root and
// the shared build cache; when keval runs as root and will switch to the job uid, makes the state
// directory and work root traversable (0711: not listable) and the cache the job uid's and
// writable by the job gid (runners of their own uids share it through that group). Also
// moves this process into a leaf of its cgroup when that is what it takes to delegate memory
// and pids limits to runners (see the .cpp). Throws SandboxOptionError for a bad --job-user.
protocol::SandboxPolicy prepare_host_sandbox(const SandboxOptions& options,
                                             const std::filesystem::path& state_dir);

// Removes what the trusted worker started with `policy` made for its runners (place_runner in
// worker/isolation/sandbox.hpp): their directories `WORK_ROOT/runner-<worker_tag>-<n>` and their
// cgroups. The worker removes them itself when it ends normally or by SIGTERM; this is for the
// end it cannot clean up after (SIGKILL once a timeout's grace is over, a crash). Call once the
// worker and its process group are gone. Returns how many were removed; failures are logged.
// Does nothing without a worker_tag.
size_t remove_runner_places(const protocol::SandboxPolicy& policy);

// Starts `worker_exe --sandbox-probe POLICY`: a runner that applies the sandbox and reports it.
// Returns its report, or {"error": ...} when the probe itself failed.
boost::json::object probe_sandbox(const std::filesystem::path& worker_exe,
                                  const protocol::SandboxPolicy& policy,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(30));

// One line for the log: "standard: active network, user, ...; skipped memory (why), ...".
std::string describe_sandbox(const boost::json::object& report);

} // namespace keval::supervisor
