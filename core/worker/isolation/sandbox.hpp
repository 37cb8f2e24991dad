// The sandbox of a process that runs user code (a runner), issue 12's layers on top of the
// separate process of isolation.hpp. The trusted worker prepares each runner's place (its own
// directory, its cgroup, its environment); the runner, first thing and while it still has a single
// thread, applies every layer to itself and reports each, active or skipped with the reason:
//
//   limits       cgroup v2 memory.max / pids.max when one was prepared, otherwise rlimits
//                (RLIMIT_DATA, RLIMIT_NPROC); RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE = 0 always;
//                RLIMIT_CPU once the job's timeout is known (limit_cpu_time)
//   network      its own network namespace with no interface up (a user namespace when not root)
//   user         root only: a uid of its own (runner_uid_base + pid, else the job uid) with the
//                job gid (--job-user), no supplementary groups
//   privileges   no_new_privs, every capability dropped, not dumpable
//   filesystem   Landlock: reads everywhere but the state directory, writes only beneath its own
//                directory, the shared build cache and /dev/shm; TCP and out-of-runner signals
//                denied where the kernel's Landlock ABI allows
//   seccomp      ptrace, process_vm_*, kexec, bpf, perf_event_open, mount-like and namespace
//                calls, non-Unix sockets denied
//   channel      a runner's channel to the trusted worker stays where keval put it (every mode)
//   environment  an allow-list (sandbox_environment), HOME/TMPDIR/caches in its own directory
//   directory    its working directory is its own directory
#pragma once

#include "protocol/sandbox_policy.hpp"

#include <filesystem>
#include <string>
#include <sys/types.h>
#include <vector>

#include <boost/json/object.hpp>

namespace keval::worker::isolation {

// --- In the trusted worker ------------------------------------------------------------------

// Creates the runner's own directory under policy.work_root (owned by the job uid when the user
// layer will switch to it) and, where a cgroup parent was delegated, its cgroup; returns the
// policy the runner is started with. Throws std::system_error when the directory cannot be made.
protocol::SandboxPolicy place_runner(const protocol::SandboxPolicy& policy);

// The policy of a runner for `side`: the reference's ("ref") as given; any other (the
// candidate, a whole program's solution and harness, the trusted worker's builder of
// pipeline/extension_builds.hpp) gets the shared build cache read-only, so
// that nothing its user code writes is ever loaded by another job (a planted library, header or
// precompiled header would otherwise run in every later build of its key).
protocol::SandboxPolicy policy_for_side(protocol::SandboxPolicy policy, const std::string& side);

// The environment a runner starts with: variables on the allow-list from ours, then HOME, TMPDIR
// and the tools' caches pointed into its own directory. Mode off: ours unchanged.
std::vector<std::string> sandbox_environment(const protocol::SandboxPolicy& runner_policy);

// Removes what place_runner made (after the runner and its descendants are gone).
void remove_runner_place(const protocol::SandboxPolicy& runner_policy);

// Why a runner that ended was killed by its limits ("exceeded its memory limit of 2 GiB (cgroup
// memory.max)"), or empty when they did not end it.
std::string limit_that_ended(const protocol::SandboxPolicy& runner_policy);

// Layers missing from a runner's report, as "layer: reason" lines (for --sandbox strict).
std::vector<std::string> missing_layers(const boost::json::object& report);

// --- In the runner ---------------------------------------------------------------------------

// Applies every layer of `policy` to the calling process, which must still be single-threaded
// (Landlock and namespaces apply to the calling thread; threads started later inherit them).
// A runner passes its channel to the trusted worker in `channel_fd`: the "channel" layer, applied
// in every mode as "privileges" is (both keep the verdict and the timings out of user code's
// reach), moves it to the highest descriptor the process may hold (close-on-exec; `*channel_fd`
// is updated), far from the numbers user code and its tools use, and keeps it there
// (detail::install_channel_guard), so that user code cannot put itself between the runner and
// the trusted worker. Returns the report: {"mode", "layers": {name: {"active", "detail"}},
// "skipped": {name: why}}.
boost::json::object apply_sandbox(const protocol::SandboxPolicy& policy, int* channel_fd = nullptr);

// RLIMIT_CPU for the rest of the runner's life: `seconds` of CPU time (all its threads
// together), then SIGXCPU, then SIGKILL. Lowering only; returns the limit set.
uint64_t limit_cpu_time(uint64_t seconds);

// When the memory limit is an rlimit, an allocation past it fails inside user code; the error it
// raises then says so. Returns `message` with the limit named when `message` reads like a host
// allocation failure, else `message` unchanged.
std::string explain_allocation_failure(const std::string& message);

} // namespace keval::worker::isolation
