// A long-lived keval-worker helper of the daemon (the driver hold, a GPU's device verifier): the
// daemon's own child, started with a mode's arguments, told a line on its standard input when it
// needs one, answering one JSON line on its standard output, then serving until its standard
// input ends (the daemon closes it as it stops, and a daemon that dies takes it along: the
// parent-death signal of every child the host spawns). Runs no user code; the orphan reaper
// leaves it alone (owned_children.hpp).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

namespace keval::daemon::detail {

class HelperProcess {
public:
  struct Started {
    std::unique_ptr<HelperProcess> process; // set when it answered that it serves
    boost::json::object answer;             // its answer, when it gave one
    std::string failure;                    // why there is no process (its own reason if it said)
  };
  // Starts `worker_exe args...`, writes `first_line` and a newline to its standard input (none
  // when empty), and reads its answer within `answer_within`. It serves when the answer's boolean
  // `serves_key` ("held", "ready") is true; otherwise it is ended and `failure` says why: the
  // answer's "reason", a timeout, how it ended, or that its answer was not `an_answer` ("a
  // hold"). Never throws.
  static Started start(const std::filesystem::path& worker_exe,
                       const std::vector<std::string>& args, const std::string& first_line,
                       const char* serves_key, const char* an_answer,
                       std::chrono::milliseconds answer_within);

  // Ends it: closes its standard input, then kills it if it has not ended within a few seconds,
  // and reaps it.
  ~HelperProcess();
  HelperProcess(const HelperProcess&) = delete;
  HelperProcess& operator=(const HelperProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Reaps it if it has ended (without waiting); true while it runs.
  bool running() const;
  // How it ended ("exit code 3", "killed by SIGKILL"); empty while it runs.
  std::string ended_how() const;

private:
  HelperProcess() = default;
  void end(std::chrono::milliseconds grace);

  pid_t pid_ = -1;
  int input_ = -1; // its standard input's write end: closing it ends the helper
  mutable std::mutex mutex_;
  mutable std::optional<int> status_; // its wait status, once reaped
};

// "exit code 3", "killed by SIGKILL (...)": a wait status in words.
std::string describe_wait_status(int status);

} // namespace keval::daemon::detail
