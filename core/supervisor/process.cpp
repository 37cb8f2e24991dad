#include "supervisor/process.hpp"

#include "supervisor/detail/child_setup.hpp"
#include "supervisor/detail/exec_launcher.hpp"
#include "supervisor/owned_children.hpp"

#include <array>
#include <csignal>
#include <cstring>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/steady_timer.hpp>
// process_environment's launcher hook is compiled only with Boost.Process's src.hpp, which the
// header-only build never includes: this is its one translation unit.
#include <boost/process/v2/impl/environment.ipp>

namespace keval::supervisor {

namespace asio = boost::asio;
namespace bp = boost::process::v2;

void CappedOutput::append(const char* data, size_t n) {
  total_ += n;
  const size_t head_cap = cap_ / 2;
  const size_t tail_cap = cap_ - head_cap;
  const size_t to_head = std::min(n, head_cap - std::min(head_cap, head_.size()));
  head_.append(data, to_head);
  data += to_head;
  n -= to_head;
  if (n == 0 || tail_cap == 0) {
    dropped_ += (tail_cap == 0) ? n : 0;
    return;
  }
  // Ring buffer of the most recent tail_cap bytes.
  for (size_t i = 0; i < n; ++i) {
    if (tail_.size() < tail_cap) {
      tail_.push_back(data[i]);
    } else {
      tail_[tail_start_] = data[i];
      tail_start_ = (tail_start_ + 1) % tail_cap;
      ++dropped_;
    }
  }
}

std::string CappedOutput::text() const {
  std::string out = head_;
  if (dropped_ > 0)
    out += "\n[... keval: " + std::to_string(dropped_) + " bytes of output truncated ...]\n";
  out += tail_.substr(tail_start_);
  out += tail_.substr(0, tail_start_);
  return out;
}

std::string describe_signal(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  std::string name = abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(signal);
  if (const char* text = strsignal(signal))
    name += std::string(" (") + text + ")";
  return name;
}

CommandResult run_command(const std::filesystem::path& exe, const std::vector<std::string>& args,
                          std::chrono::milliseconds timeout, size_t output_cap) {
  return run_command(exe, args, timeout, CommandOptions{output_cap, {}, std::nullopt});
}

CommandResult run_command(const std::filesystem::path& exe, const std::vector<std::string>& args,
                          std::chrono::milliseconds timeout, const CommandOptions& options) {
  asio::io_context ctx;
  asio::readable_pipe out_pipe(ctx), err_pipe(ctx);
  // ChildSetup registers the child as the host's own (OwnedChildren) and closes every other
  // descriptor in it.
  // Each init is handed over as a temporary: the launcher calls the hooks of what it gets, and a
  // const one would silently not redirect the child's output.
  const std::filesystem::path directory =
      options.directory.empty() ? std::filesystem::current_path() : options.directory;
  bp::process proc =
      options.environment
          ? detail::ExecLauncher{}(
                ctx.get_executor(), exe, args, bp::process_stdio{nullptr, out_pipe, err_pipe},
                bp::process_start_dir(directory), bp::process_environment(*options.environment),
                detail::ChildSetup{})
          : detail::ExecLauncher{}(ctx.get_executor(), exe, args,
                                   bp::process_stdio{nullptr, out_pipe, err_pipe},
                                   bp::process_start_dir(directory), detail::ChildSetup{});
  const int pid = proc.id();

  CommandResult result;
  CappedOutput out(options.output_cap), err(options.output_cap);
  std::array<char, 16384> out_buf{}, err_buf{};
  std::function<void(asio::readable_pipe&, std::array<char, 16384>&, CappedOutput&)> drain =
      [&](asio::readable_pipe& pipe, std::array<char, 16384>& buf, CappedOutput& sink) {
        pipe.async_read_some(asio::buffer(buf), [&](boost::system::error_code ec, size_t n) {
          sink.append(buf.data(), n);
          if (!ec)
            drain(pipe, buf, sink);
        });
      };
  drain(out_pipe, out_buf, out);
  drain(err_pipe, err_buf, err);

  asio::steady_timer timer(ctx, timeout);
  timer.async_wait([&](boost::system::error_code ec) {
    if (!ec) {
      result.timed_out = true;
      ::kill(-pid, SIGKILL);
    }
  });
  proc.async_wait([&](boost::system::error_code, int) {
    OwnedChildren::remove(pid); // reaped: the pid may name another process from now on
    timer.cancel();
    ::kill(-pid, SIGKILL); // anything the command left behind in its group
    const int native_status = proc.native_exit_code();
    if (WIFEXITED(native_status))
      result.exit_code = WEXITSTATUS(native_status);
    else if (WIFSIGNALED(native_status))
      result.signal = WTERMSIG(native_status);
  });
  ctx.run();
  result.out = out.text();
  result.err = err.text();
  return result;
}

} // namespace keval::supervisor
