#include "daemon/detail/helper_process.hpp"

#include "common/unique_fd.hpp"
#include "supervisor/detail/exec_launcher.hpp"
#include "supervisor/owned_children.hpp"
#include "supervisor/process.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/json/parse.hpp>
#include <fcntl.h>
#include <poll.h>
#include <spdlog/fmt/fmt.h>
#include <sys/wait.h>
#include <unistd.h>

namespace keval::daemon::detail {

namespace json = boost::json;
namespace bp = boost::process::v2;

namespace {

constexpr size_t kMaxAnswerBytes = 64 * 1024;
// How long an ending helper has after its standard input closes: its exit undoes the driver's
// state or releases a context, a fraction of a second.
constexpr std::chrono::milliseconds kEndWithin{5000};

// The helper's first line, read within `deadline`; nullopt when it did not come whole (the pipe
// ended, or the time ran out: `timed_out` says which).
std::optional<std::string> read_line(int fd, std::chrono::steady_clock::time_point deadline,
                                     bool& timed_out) {
  std::string line;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      return std::nullopt;
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR)
      continue;
    if (ready <= 0)
      continue; // the deadline is looked at again
    char buffer[512];
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return std::nullopt;
    line.append(buffer, static_cast<size_t>(n));
    if (const auto end = line.find('\n'); end != std::string::npos)
      return line.substr(0, end);
    if (line.size() > kMaxAnswerBytes)
      return std::nullopt;
  }
}

} // namespace

std::string describe_wait_status(int status) {
  if (WIFEXITED(status))
    return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return supervisor::describe_signal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

HelperProcess::Started HelperProcess::start(const std::filesystem::path& worker_exe,
                                            const std::vector<std::string>& args,
                                            const std::string& first_line, const char* serves_key,
                                            const char* an_answer,
                                            std::chrono::milliseconds answer_within) {
  Started started;
  std::string what = worker_exe.filename().string();
  for (const std::string& arg : args)
    what += " " + arg;
  int in[2] = {-1, -1}, out[2] = {-1, -1};
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
    started.failure = "cannot make pipes for " + what + ": " + std::strerror(errno);
    for (int fd : {in[0], in[1], out[0], out[1]})
      if (fd >= 0)
        ::close(fd);
    return started;
  }
  UniqueFd child_in(in[0]), input(in[1]), output(out[0]), child_out(out[1]);
  std::unique_ptr<HelperProcess> helper(new HelperProcess());
  try {
    boost::asio::io_context ctx;
    // Its standard error is the daemon's: what the driver says goes to the daemon's log.
    bp::process process = supervisor::detail::ExecLauncher{}(
        ctx.get_executor(), worker_exe, args,
        bp::process_stdio{child_in.get(), child_out.get(), {}}, supervisor::detail::ChildSetup{});
    helper->pid_ = process.id();
    process.detach(); // it lives past this context; waitpid reaps it
  } catch (const std::exception& e) {
    started.failure = "cannot start " + what + ": " + e.what();
    return started;
  }
  child_in = UniqueFd();
  child_out = UniqueFd(); // its end only: the pipe ends with the helper
  // A line of at most a pipe's buffer goes in whole, without waiting for the helper to read it.
  const std::string line = first_line.empty() ? std::string() : first_line + "\n";
  const bool told = line.empty() || ::write(input.get(), line.data(), line.size()) ==
                                        static_cast<ssize_t>(line.size());
  helper->input_ = input.release();

  bool timed_out = false;
  const std::optional<std::string> answer_line =
      told ? read_line(output.get(), std::chrono::steady_clock::now() + answer_within, timed_out)
           : std::nullopt;
  if (answer_line) {
    json::error_code ec;
    const json::value parsed = json::parse(*answer_line, ec);
    if (!ec && parsed.is_object())
      started.answer = parsed.as_object();
  }
  const json::value* serves = started.answer.if_contains(serves_key);
  if (serves != nullptr && serves->is_bool() && serves->as_bool()) {
    started.process = std::move(helper);
    return started;
  }
  if (serves != nullptr && serves->is_bool()) {
    const json::value* why = started.answer.if_contains("reason");
    started.failure = why != nullptr && why->is_string() ? std::string(why->as_string())
                                                         : what + " did not say why";
  } else if (timed_out) {
    started.failure =
        fmt::format("{} did not answer within {:g} s", what, answer_within.count() / 1000.0);
  } else if (!told) {
    started.failure = what + " did not take its first line";
  } else {
    started.failure =
        what + (answer_line ? " answered '" + answer_line->substr(0, 200) + "', not " + an_answer
                            : " ended without answering");
  }
  // It ends by itself when it serves nothing; one that did not answer in time is past waiting for.
  helper->end(timed_out ? std::chrono::milliseconds(0) : kEndWithin);
  if (helper->status_ && !(WIFEXITED(*helper->status_) && WEXITSTATUS(*helper->status_) == 0))
    started.failure += " (" + describe_wait_status(*helper->status_) + ")";
  return started;
}

HelperProcess::~HelperProcess() {
  end(kEndWithin);
}

bool HelperProcess::running() const {
  std::lock_guard lock(mutex_);
  if (status_)
    return false;
  int s = 0;
  const pid_t r = ::waitpid(pid_, &s, WNOHANG);
  if (r == pid_ || (r < 0 && errno == ECHILD)) {
    status_ = r == pid_ ? s : 0;
    supervisor::OwnedChildren::remove(pid_);
    return false;
  }
  return true;
}

std::string HelperProcess::ended_how() const {
  if (running())
    return {};
  std::lock_guard lock(mutex_);
  return describe_wait_status(*status_);
}

void HelperProcess::end(std::chrono::milliseconds grace) {
  if (input_ >= 0) {
    ::close(input_);
    input_ = -1;
  }
  if (pid_ < 0)
    return;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (running()) {
    ::kill(pid_, SIGKILL);
    int s = 0;
    while (::waitpid(pid_, &s, 0) < 0 && errno == EINTR) {
    }
    std::lock_guard lock(mutex_);
    status_ = s;
    supervisor::OwnedChildren::remove(pid_);
  }
}

} // namespace keval::daemon::detail
