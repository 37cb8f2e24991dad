// The trusted worker's handle on one runner: starts it, asks it things, and turns whatever it
// does instead of answering (dies, closes its channel, sends garbage or a reply out of turn) into
// a RunnerFailure that names the side, which the pipeline reports as that side's failure.
#pragma once

#include "protocol/blocking_channel.hpp"
#include "protocol/sandbox_policy.hpp"

#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/json/object.hpp>
#include <sys/types.h>

namespace keval::worker {

// The runner did not answer as the protocol says. `what()` says how, for the result
// ("custom kernel's process exited with code 0 while launching").
class RunnerFailure : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// A command the runner answered with {ok: false, error}.
struct RunnerError {
  std::string type, message, details;
};

class RunnerClient {
public:
  // Starts `worker_exe --runner --channel-fd 3 --sandbox POLICY [--prewarm PLUGIN]...` in a
  // place of its own (its directory, its cgroup: isolation::place_runner) with the sandbox's
  // environment. Throws std::system_error when it cannot be started.
  static std::unique_ptr<RunnerClient> spawn(const std::filesystem::path& worker_exe,
                                             const std::vector<std::string>& prewarm,
                                             const protocol::SandboxPolicy& sandbox);
  ~RunnerClient(); // kills the runner if it is still there, then removes its place

  // The runner's own directory: the only one it may write (its plugin's work_dir).
  const std::string& directory() const { return place_.runner_dir; }
  const protocol::SandboxPolicy& place() const { return place_; }
  RunnerClient(const RunnerClient&) = delete;
  RunnerClient& operator=(const RunnerClient&) = delete;

  void set_side(std::string side) { side_ = std::move(side); }
  const std::string& side() const { return side_; }
  pid_t pid() const { return pid_; }

  // The runner's hello (sent before any user code loads, so it can be believed). Throws
  // RunnerFailure. The runner has waited in the background since its start where its place says
  // so (worker/isolation/cpu_priority.hpp), and goes on waiting there.
  boost::json::object await_hello();
  // Every thread of the runner's tree to its place's background nice value (true) or to 0
  // (false); nothing where the place has none. Returns what could not be set ("" when all
  // were), which is also logged: priority decides no verdict.
  std::string set_background(bool background);

  // Sends `command` (its "type" set) with `fds` and returns the reply's object. A reply with
  // ok=false is returned too; the caller reads its error with error_of(). Throws RunnerFailure.
  // `doing` describes the step for errors ("launching").
  boost::json::object call(boost::json::object command, const std::string& doing,
                           const std::vector<int>& fds = {});
  // call() in two halves, so that several runners work at once (both sides compile, bind their
  // device, ... side by side): send() returns the sequence number that reply() waits for.
  int64_t send(boost::json::object command, const std::string& doing,
               const std::vector<int>& fds = {});
  boost::json::object reply(const std::string& type, int64_t seq, const std::string& doing);
  // What the trusted worker answers a request the runner makes while one of its commands runs
  // (runner_protocol.hpp: build_request): the reply and the descriptors that go with it.
  struct Answer {
    boost::json::object reply;
    std::vector<UniqueFd> fds;
  };
  using RequestHandler = std::function<Answer(const boost::json::object& request)>;
  // reply() answers the runner's requests with `handler`, at most `max_requests` of them in the
  // runner's life; without a handler, or past that many, a request fails the runner. The
  // handler answers whatever it is sent (the runner may run user code): it never throws for
  // what a request holds.
  void serve_requests(RequestHandler handler, size_t max_requests) {
    handler_ = std::move(handler);
    max_requests_ = max_requests;
  }

  // Sends without waiting for an answer (unbind).
  void post(boost::json::object command);
  // Descriptors that came with the last reply.
  protocol::BlockingChannel& channel() { return *channel_; }

  static bool ok(const boost::json::object& reply);
  static RunnerError error_of(const boost::json::object& reply);

  // Kills the runner (SIGKILL) without waiting for it.
  void kill();
  // Kills the runner and reaps it.
  void stop();

private:
  RunnerClient(pid_t pid, int fd, protocol::SandboxPolicy place);
  [[noreturn]] void fail(const std::string& doing, const std::string& problem);
  std::string wait_for_exit();
  // The runner's next message; fails `doing` when the runner ends first, also while a process it
  // left behind holds its channel open (seen through pidfd_).
  boost::json::object receive(const std::string& doing);

  pid_t pid_;
  // Readable once the runner has ended (pidfd_open); empty where the kernel has none (before
  // Linux 5.3), and then only the channel's end tells.
  UniqueFd pidfd_;
  protocol::SandboxPolicy place_;
  bool reaped_ = false;
  std::string side_ = "runner";
  // Answers one request that came while `doing`.
  void answer_request(const boost::json::object& request, const std::string& doing);

  std::unique_ptr<protocol::BlockingChannel> channel_;
  int64_t next_seq_ = 1;
  RequestHandler handler_;
  size_t max_requests_ = 0;
  size_t requests_ = 0;
};

} // namespace keval::worker
