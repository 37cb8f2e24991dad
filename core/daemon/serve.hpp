// `keval serve`: the daemon. HTTP/JSON (the V2 contract's API) on a Unix socket, TCP on request, a
// job manager over every visible GPU, and a two-stage shutdown: the first SIGTERM/SIGINT stops
// accepting and lets running jobs finish within a grace period, the second cancels them.
#pragma once

#include "supervisor/sandbox_setup.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace keval::daemon {

struct ServeOptions {
  std::filesystem::path socket_path; // always served
  std::string socket_group;          // empty: owner-only socket (0600); else 0660 for this group
  std::string listen;                // "HOST:PORT" to serve TCP as well; empty: none
  bool allow_remote = false;         // let `listen` name a non-loopback address
  // The bearer token TCP clients must send (generated on first start, 0600); empty:
  // STATE/keys/tcp.token. Read only when `listen` is set.
  std::filesystem::path token_file;
  std::filesystem::path state_dir; // job records (jobs/), work directories (work/), lock
  std::filesystem::path worker_exe;
  std::vector<std::filesystem::path> plugin_dirs;
  // The sandbox of every job's user code (--sandbox, --job-user, --job-memory, --job-pids).
  supervisor::SandboxOptions sandbox;
  size_t max_queued = 256; // jobs waiting for a worker before submissions get 503
  size_t max_workers = 0;  // workers at once; 0: CPU cores + GPUs
  size_t jobs_per_gpu = 1; // 1: validation and profiling own their GPU
  size_t threads = 0;      // HTTP event-loop threads; 0: CPU cores, at least 2
  size_t warm_workers = 2; // workers started ahead of jobs, plugins prewarmed; 0: none
  // ... per set at most, when its demand asks for more; 0 or below warm_workers: no growth.
  // Unset: WarmPool::default_max_size (half the cores, at most 8).
  std::optional<size_t> warm_workers_max;
  // ... over the sets in use together, shared among them. Unset: WarmPool::default_max_total.
  std::optional<size_t> warm_workers_total;
  // Keep the CUDA driver initialised while serving, in a process of its own (driver_hold.hpp), on
  // a machine with GPUs.
  bool hold_driver = true;
  // One device verifier per GPU (device_verifiers.hpp): a job's trusted worker uses its GPU's
  // context instead of making one of its own.
  bool device_verifier = false;
  uint64_t max_body_bytes = 64ull << 20;
  // Connections served at once (Unix and TCP together); past it, 503. The descriptor limit
  // (RLIMIT_NOFILE) is raised to fit, or the daemon does not start.
  size_t max_connections = 1024;
  std::chrono::milliseconds http_timeout{std::chrono::seconds(30)}; // every read and write
  std::chrono::milliseconds job_ttl{std::chrono::hours(1)};
  uint64_t state_max_bytes = 2ull << 30; // records and blobs; past it, oldest finished expire
  std::chrono::milliseconds shutdown_grace{std::chrono::seconds(60)};
};

// Invalid options (a non-loopback --listen without allow_remote, an unknown group, ...).
class ServeOptionError : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

// Runs the daemon until it is told to stop; returns 0 after a clean shutdown. Throws
// ServeOptionError for bad options and std::runtime_error when it cannot start (the socket is
// in use, the state directory is locked by another daemon, ...).
int serve(const ServeOptions& options);

} // namespace keval::daemon
