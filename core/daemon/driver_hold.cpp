#include "daemon/driver_hold.hpp"

#include "common/unique_fd.hpp"
#include "supervisor/detail/exec_launcher.hpp"
#include "supervisor/owned_children.hpp"
#include "supervisor/process.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/json/parse.hpp>
#include <fcntl.h>
#include <poll.h>
#include <spdlog/fmt/fmt.h>
#include <sys/wait.h>
#include <unistd.h>

namespace keval::daemon {

namespace json = boost::json;
namespace bp = boost::process::v2;

namespace {

constexpr size_t kMaxAnswerBytes = 4096;
// How long an ending holder has after its standard input closes: its exit undoes the driver's
// state, a fraction of a second.
constexpr std::chrono::milliseconds kEndWithin{5000};

std::string ended_how(int status) {
  if (WIFEXITED(status))
    return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return supervisor::describe_signal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// The holder's first line, read within `deadline`; nullopt when it did not come whole (the
// pipe ended, or the time ran out: `timed_out` says which).
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

struct DriverHold::Holder {
  pid_t pid = -1;
  UniqueFd input; // its standard input's write end: closing it ends the holder
  mutable std::mutex mutex;
  mutable std::optional<int> status; // its wait status, once reaped

  // Reaps it if it has ended (without waiting); true while it runs. With mutex held.
  bool running() const {
    if (status)
      return false;
    int s = 0;
    const pid_t r = ::waitpid(pid, &s, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) {
      status = r == pid ? s : 0;
      supervisor::OwnedChildren::remove(pid);
      return false;
    }
    return true;
  }

  // Closes its input and waits for it to end, at most `grace`; then kills it.
  void end(std::chrono::milliseconds grace = kEndWithin) {
    std::lock_guard lock(mutex);
    input = UniqueFd();
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (running() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (running()) {
      ::kill(pid, SIGKILL);
      int s = 0;
      while (::waitpid(pid, &s, 0) < 0 && errno == EINTR) {
      }
      status = s;
      supervisor::OwnedChildren::remove(pid);
    }
  }
};

DriverHold::DriverHold(const std::filesystem::path& worker_exe,
                       std::chrono::milliseconds answer_within) {
  const std::string what = worker_exe.filename().string() + " --hold-driver";
  int in[2] = {-1, -1}, out[2] = {-1, -1};
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
    reason_ = "cannot make pipes for " + what + ": " + std::strerror(errno);
    for (int fd : {in[0], in[1], out[0], out[1]})
      if (fd >= 0)
        ::close(fd);
    return;
  }
  UniqueFd child_in(in[0]), input(in[1]), output(out[0]), child_out(out[1]);
  auto holder = std::make_unique<Holder>();
  try {
    boost::asio::io_context ctx;
    // Its standard error is the daemon's: what the driver says goes to the daemon's log.
    bp::process process = supervisor::detail::ExecLauncher{}(
        ctx.get_executor(), worker_exe, std::vector<std::string>{"--hold-driver"},
        bp::process_stdio{child_in.get(), child_out.get(), {}}, supervisor::detail::ChildSetup{});
    holder->pid = process.id();
    process.detach(); // it lives past this context; waitpid reaps it
  } catch (const std::exception& e) {
    reason_ = "cannot start " + what + ": " + e.what();
    return;
  }
  child_in = UniqueFd();
  child_out = UniqueFd(); // its end only: the pipe ends with the holder
  holder->input = std::move(input);

  bool timed_out = false;
  const std::optional<std::string> line =
      read_line(output.get(), std::chrono::steady_clock::now() + answer_within, timed_out);
  json::object answer;
  if (line) {
    json::error_code ec;
    const json::value parsed = json::parse(*line, ec);
    if (!ec && parsed.is_object())
      answer = parsed.as_object();
  }
  const json::value* held = answer.if_contains("held");
  if (held != nullptr && held->is_bool() && held->as_bool()) {
    if (const json::value* ms = answer.if_contains("init_ms"); ms && ms->is_number())
      init_ms_ = ms->to_number<double>();
    holder_ = std::move(holder);
    return;
  }
  if (held != nullptr && held->is_bool()) {
    const json::value* why = answer.if_contains("reason");
    reason_ = why != nullptr && why->is_string() ? std::string(why->as_string())
                                                 : what + " did not say why";
  } else if (timed_out) {
    reason_ = fmt::format("{} did not answer within {:g} s", what, answer_within.count() / 1000.0);
  } else {
    reason_ = what + (line ? " answered '" + line->substr(0, 200) + "', not a hold"
                           : " ended without answering");
  }
  // It ends by itself when it holds nothing; one that did not answer in time is past waiting for.
  holder->end(timed_out ? std::chrono::milliseconds(0) : kEndWithin);
  if (holder->status && !(WIFEXITED(*holder->status) && WEXITSTATUS(*holder->status) == 0))
    reason_ += " (" + ended_how(*holder->status) + ")";
}

DriverHold DriverHold::none(std::string why) {
  DriverHold hold;
  hold.reason_ = std::move(why);
  return hold;
}

DriverHold::DriverHold(DriverHold&&) noexcept = default;

DriverHold::~DriverHold() {
  if (holder_)
    holder_->end();
}

bool DriverHold::held() const {
  if (!holder_)
    return false;
  std::lock_guard lock(holder_->mutex);
  return holder_->running();
}

json::object DriverHold::status() const {
  if (!holder_)
    return {{"held", false}, {"reason", reason_}};
  std::lock_guard lock(holder_->mutex);
  if (!holder_->running())
    return {{"held", false},
            {"reason", "its holder (pid " + std::to_string(holder_->pid) +
                           ") ended: " + ended_how(*holder_->status)}};
  json::object out{{"held", true}, {"pid", holder_->pid}};
  if (init_ms_)
    out["init_ms"] = *init_ms_;
  return out;
}

} // namespace keval::daemon
