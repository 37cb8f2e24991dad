// Spawning children the way every keval job needs them: own process group (a timeout kills
// everything the job started), killed with the host, no core dumps, only the descriptors we
// choose inherited (every other one is closed in the child, see detail/child_setup.hpp), and
// registered as the host's own (owned_children.hpp) while they exist.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace keval::supervisor {

// Bounded capture of a child's output: keeps the first and the last half of `cap` bytes and
// counts what fell in between, so both the first error and the final traceback survive a flood.
class CappedOutput {
public:
  explicit CappedOutput(size_t cap) : cap_(cap) {}
  void append(const char* data, size_t n);
  size_t total_bytes() const { return total_; }
  size_t dropped_bytes() const { return dropped_; }
  // The kept text, with a marker where bytes were dropped.
  std::string text() const;

private:
  size_t cap_;
  size_t total_ = 0;
  size_t dropped_ = 0;
  std::string head_;
  std::string tail_; // ring of the last cap/2 bytes once head_ is full
  size_t tail_start_ = 0;
};

struct CommandResult {
  std::optional<int> exit_code; // normal exit
  std::optional<int> signal;    // killed by a signal
  bool timed_out = false;
  std::string out;
  std::string err;
};

struct CommandOptions {
  size_t output_cap = 1 << 20;     // per stream (CappedOutput)
  std::filesystem::path directory; // empty: ours
  // The whole environment ("NAME=value"); nullopt: ours.
  std::optional<std::vector<std::string>> environment;
};

// Runs a command to completion (plugin probes; a program's build and test steps). Kills its
// process group when `timeout` passes. Throws std::system_error when it cannot be started.
CommandResult run_command(const std::filesystem::path& exe, const std::vector<std::string>& args,
                          std::chrono::milliseconds timeout, const CommandOptions& options);
CommandResult run_command(const std::filesystem::path& exe, const std::vector<std::string>& args,
                          std::chrono::milliseconds timeout, size_t output_cap = 1 << 20);

// "SIGSEGV (segmentation fault)", "SIGKILL", ...
std::string describe_signal(int signal);

} // namespace keval::supervisor
