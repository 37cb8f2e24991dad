// The sandbox a job's user code runs in, as the host asks for it: what `keval serve` / `keval run`
// were told (--sandbox, --job-user, --job-memory, --job-pids, ...), handed to every keval-worker on
// its command line (workers are started before their job, so it cannot travel in the job frame),
// and from the worker to each runner together with what only the worker knows (the runner's own
// directory, the cgroup it joins). The layers themselves are applied in the runner
// (worker/isolation/sandbox.hpp), each reported.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

namespace keval::protocol {

enum class SandboxMode {
  standard, // every layer the machine allows, the others reported as skipped with their reason
  strict,   // a job whose runner lacks any layer fails before user code is loaded
  off,      // debugging only: no layer but the separate process; every result says so
};
const char* sandbox_mode_name(SandboxMode mode);
std::optional<SandboxMode> parse_sandbox_mode(std::string_view name);

struct SandboxPolicy {
  SandboxMode mode = SandboxMode::standard;
  // Who runs user code when keval runs as root (ignored otherwise: an ordinary user cannot switch).
  uint32_t job_uid = 65534;
  uint32_t job_gid = 65534;
  // Each runner runs as a uid of its own, runner_uid_base + its pid (a pid is unique among live
  // processes), with job_gid: RLIMIT_NPROC then counts that runner's processes alone (not every
  // concurrent job's: one job's threads could otherwise fail another's honest kernel), and no
  // runner can signal another job's processes. 0: every runner runs as job_uid. A base the
  // machine cannot use (a user namespace that does not map it) falls back to job_uid, reported.
  static constexpr uint32_t kLargestPid = 1u << 22; // PID_MAX_LIMIT on 64-bit Linux
  // Above the uid ranges systemd hands out (containers end at 0x6FFFFFFF); uids stay below 2^31,
  // which some tools read as signed.
  static constexpr uint32_t kDefaultRunnerUidBase = 0x70000000;
  static constexpr uint32_t kLargestRunnerUidBase = 0x7FFFFFFFu - kLargestPid;
  uint32_t runner_uid_base = kDefaultRunnerUidBase;
  // The pid whose uid (runner_uid_base + it) this process takes; 0: its own. A whole program's
  // step (docs/cuda_program.md) is a sandboxed process of its own in its runner's place: it takes
  // that runner's uid, so that it writes the runner's directory.
  uint32_t uid_of_pid = 0;
  // Per process that runs user code, its descendants included where a cgroup holds them.
  uint64_t memory_bytes = 0; // 0: the default (default_job_memory())
  uint64_t max_processes = 1024;
  uint64_t max_file_bytes = 8ull << 30; // largest file it may write
  uint64_t max_open_files = 4096;
  // Where the trusted worker makes each runner's own directory.
  std::string work_root;
  // Set by the host for each trusted worker it starts, unique among them ([0-9a-z]): the worker
  // names its runners' directories and cgroups "runner-<tag>-<n>", so that the host can remove
  // what a killed worker left behind without touching another worker's (a pid may be reused by
  // then). Empty: the worker's pid stands in.
  std::string worker_tag;
  // Never readable by user code (the state directory: records, their key, other jobs' files).
  std::string private_dir;
  // Writable beyond the runner's own directory (the torch_cuda build cache): a reference's
  // runner only. A candidate's runner gets the same directories in shared_readonly instead
  // (worker/isolation/sandbox.hpp, policy_for_side): what it builds stays its own (what the
  // trusted worker builds for it is kept in private_dir), so no candidate can change what
  // another job's build loads.
  std::vector<std::string> shared_writable;
  std::vector<std::string> shared_readonly;
  // Filled by the trusted worker for one runner:
  std::string runner_dir; // the runner's working directory, HOME and TMPDIR; the only place it
                          // writes besides shared_writable
  // cgroup v2, from the host: a delegated directory (memory and pids controllers enabled in its
  // cgroup.subtree_control) where each runner gets a cgroup of its own; empty: rlimits instead,
  // cgroup_skipped saying why.
  std::string cgroup_parent;
  std::string cgroup_skipped;
  std::string cgroup; // filled by the trusted worker: the runner's own cgroup, which it joins
  // Filled by the trusted worker: the nice value it keeps the runner at while the runner's job
  // has no device (worker/isolation/cpu_priority.hpp); 0: none.
  int32_t background_nice = 0;
};

// True when runners will run as the job uid (keval is root and the sandbox is on).
bool switches_user(const SandboxPolicy& policy);

// Half of this machine's memory, at most 16 GiB.
uint64_t default_job_memory();

boost::json::object to_json(const SandboxPolicy& policy);
// Throws std::invalid_argument naming the field at fault.
SandboxPolicy parse_sandbox_policy(const boost::json::object& o);
SandboxPolicy parse_sandbox_policy(std::string_view json_text);

// "512M", "16G", "1073741824" -> bytes; nullopt when it is not a size.
std::optional<uint64_t> parse_byte_size(std::string_view text);

} // namespace keval::protocol
