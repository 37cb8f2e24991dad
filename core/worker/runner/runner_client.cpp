#include "worker/runner/runner_client.hpp"

#include "common/log.hpp"
#include "worker/isolation/cpu_priority.hpp"
#include "worker/isolation/isolation.hpp"
#include "worker/isolation/sandbox.hpp"
#include "worker/runner/runner_protocol.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <system_error>
#include <thread>

#include <boost/json/serialize.hpp>
#include <boost/json/value_to.hpp>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace keval::worker {

namespace json = boost::json;

namespace {

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

} // namespace

std::unique_ptr<RunnerClient> RunnerClient::spawn(const std::filesystem::path& worker_exe,
                                                  const std::vector<std::string>& prewarm,
                                                  const protocol::SandboxPolicy& sandbox) {
  protocol::SandboxPolicy place = isolation::place_runner(sandbox);
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    isolation::remove_runner_place(place);
    throw std::system_error(errno, std::generic_category(), "socketpair");
  }
  std::vector<std::string> args{"--runner", "--channel-fd", "3", "--sandbox",
                                json::serialize(protocol::to_json(place))};
  for (const auto& plugin : prewarm) {
    args.emplace_back("--prewarm");
    args.push_back(plugin);
  }
  pid_t pid = -1;
  try {
    // In the background from the start: a runner's prewarm (an interpreter importing torch) is
    // no job's GPU time, and at nice 0 a pool's refills slowed the round trips of the job being
    // timed beside them (cpu_priority.hpp).
    pid = isolation::spawn_with_channel(
        worker_exe, args, fds[1], isolation::sandbox_environment(place), place.background_nice);
  } catch (...) {
    ::close(fds[0]);
    ::close(fds[1]);
    isolation::remove_runner_place(place);
    throw;
  }
  ::close(fds[1]);
  return std::unique_ptr<RunnerClient>(new RunnerClient(pid, fds[0], std::move(place)));
}

RunnerClient::RunnerClient(pid_t pid, int fd, protocol::SandboxPolicy place)
    : pid_(pid), pidfd_(open_pidfd(pid)), place_(std::move(place)),
      channel_(std::make_unique<protocol::BlockingChannel>(fd, "runner",
                                                           runner_msg::kMaxRunnerFrameBytes)) {}

RunnerClient::~RunnerClient() {
  if (!reaped_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  isolation::remove_runner_place(place_);
}

bool RunnerClient::ok(const json::object& reply) {
  const json::value* v = reply.if_contains("ok");
  return v != nullptr && v->is_bool() && v->as_bool();
}

RunnerError RunnerClient::error_of(const json::object& reply) {
  RunnerError e{"runtime_error", "the kernel's process reported a failure without a message", {}};
  const json::value* error = reply.if_contains("error");
  if (error == nullptr || !error->is_object())
    return e;
  const auto text = [&](const char* key, std::string& out) {
    const json::value* v = error->as_object().if_contains(key);
    if (v != nullptr && v->is_string())
      out = std::string(v->as_string());
  };
  text("type", e.type);
  text("message", e.message);
  text("details", e.details);
  return e;
}

// After the channel broke: how the runner ended. A runner that closed its channel but lives on
// (user code can do that) is killed; its status then says SIGKILL and the message says why.
std::string RunnerClient::wait_for_exit() {
  if (reaped_)
    return "had already ended";
  int status = 0;
  for (int i = 0; i < 200; ++i) { // up to 200 ms for a process that is on its way out
    const pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      reaped_ = true;
      const std::string limit = isolation::limit_that_ended(place_);
      return limit.empty() ? isolation::describe_wait_status(status) : limit;
    }
    if (done < 0 && errno != EINTR) {
      reaped_ = true;
      return "ended";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(pid_, SIGKILL);
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  return "closed its channel to keval and was killed";
}

void RunnerClient::fail(const std::string& doing, const std::string& problem) {
  throw RunnerFailure(side_ + " kernel's process " + problem + " while " + doing);
}

json::object RunnerClient::receive(const std::string& doing) {
  if (pidfd_ && !channel_->wait_unless(pidfd_.get()))
    fail(doing, wait_for_exit());
  return channel_->receive();
}

json::object RunnerClient::await_hello() {
  try {
    json::object hello = receive("starting");
    if (hello.at("type") != runner_msg::kHello)
      fail("starting", "sent something other than its hello");
    return hello; // at its background nice since its start (spawn), threads and children too
  } catch (const RunnerFailure&) {
    throw;
  } catch (const protocol::ProtocolError&) {
    fail("starting", wait_for_exit());
  } catch (const std::system_error&) {
    fail("starting", wait_for_exit());
  } catch (const std::exception& e) {
    fail("starting", std::string("sent a broken hello: ") + e.what());
  }
}

std::string RunnerClient::set_background(bool background) {
  if (place_.background_nice == 0)
    return "";
  const int nice = background ? place_.background_nice : 0;
  std::string failed = isolation::set_tree_nice({pid_}, nice);
  if (!failed.empty())
    spdlog::warn("runner {} ({}): nice {} not set everywhere: {}", pid_,
                 side_.empty() ? "no side yet" : side_, nice, failed);
  return failed;
}

json::object RunnerClient::call(json::object command, const std::string& doing,
                                const std::vector<int>& fds) {
  const std::string type(command.at("type").as_string());
  const int64_t seq = send(std::move(command), doing, fds);
  return reply(type, seq, doing);
}

int64_t RunnerClient::send(json::object command, const std::string& doing,
                           const std::vector<int>& fds) {
  channel_->drop_unclaimed_fds(); // whatever a runner sent beyond what it announced
  const int64_t seq = next_seq_++;
  command["seq"] = seq;
  try {
    channel_->send(std::move(command), fds);
  } catch (const std::system_error&) {
    fail(doing, wait_for_exit());
  }
  return seq;
}

json::object RunnerClient::reply(const std::string& type, int64_t seq, const std::string& doing) {
  json::object reply;
  for (;;) {
    try {
      reply = receive(doing);
    } catch (const protocol::ProtocolError& e) {
      const std::string what = e.what();
      if (what.find("closed the channel") != std::string::npos)
        fail(doing, wait_for_exit());
      fail(doing, "sent an invalid message (" + what + ")");
    } catch (const std::system_error&) {
      fail(doing, wait_for_exit());
    }
    if (const json::value* kind = reply.if_contains("type");
        kind == nullptr || *kind != runner_msg::kBuildRequest)
      break;
    answer_request(reply, doing);
  }
  const json::value* kind = reply.if_contains("type");
  const json::value* answered = reply.if_contains("for");
  const json::value* echoed = reply.if_contains("seq");
  if (kind == nullptr || *kind != runner_msg::kReply || answered == nullptr ||
      *answered != type.c_str() || echoed == nullptr || !echoed->is_int64() ||
      echoed->as_int64() != seq)
    fail(doing, "sent a reply out of turn (" + json::serialize(reply).substr(0, 200) + ")");
  return reply;
}

void RunnerClient::answer_request(const json::object& request, const std::string& doing) {
  channel_->drop_unclaimed_fds(); // a request carries none
  if (!handler_)
    fail(doing, "asked for a build, which keval does not serve to this side");
  if (++requests_ > max_requests_)
    fail(doing, "asked for more than " + std::to_string(max_requests_) + " builds");
  Answer answer = handler_(request);
  answer.reply["type"] = runner_msg::kBuildReply;
  std::vector<int> fds;
  for (const UniqueFd& fd : answer.fds)
    fds.push_back(fd.get());
  try {
    channel_->send(std::move(answer.reply), fds);
  } catch (const std::system_error&) {
    fail(doing, wait_for_exit());
  }
}

void RunnerClient::post(json::object command) {
  command["seq"] = next_seq_++;
  try {
    channel_->send(std::move(command));
  } catch (const std::exception&) {
    // A runner that is gone needs no more commands; the next call() reports it.
  }
}

void RunnerClient::kill() {
  if (!reaped_)
    ::kill(pid_, SIGKILL); // whatever it still does is of no use: the job is over
}

void RunnerClient::stop() {
  if (reaped_)
    return;
  kill();
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
}

} // namespace keval::worker
