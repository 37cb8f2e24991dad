// The launcher every host-side spawn uses: Boost.Process v2's fork-and-exec, without the
// io_context fork notification in the child.
//
// Why not boost::process::v2::posix::default_launcher: between fork and exec its child calls
// notify_fork(fork_child) on the process's io_context, which copies the context's services into a
// std::vector (malloc) under the registry's mutex and re-creates the reactor. The daemon forks
// while its HTTP threads allocate and lock: a lock held by another thread at fork time stays held
// for ever in the child, which then never execs, and the parent's read of the exec-error pipe
// never returns. Under AddressSanitizer (whose GCC 12 allocator takes no lock across fork) the
// first jobs of a busy daemon hung that way, in CI. A child that execs at once does not need its
// copy of the io_context; the parent's notify_fork(prepare/parent) pair is not needed either,
// since the parent's context is not touched. Everything else (the initializers' hooks, argv, the
// exec-error pipe, the descriptor whitelist) is Boost's.
#pragma once

#include "supervisor/detail/child_setup.hpp"

#include <cerrno>
#include <cstdlib>
#include <utility>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace keval::supervisor::detail {

struct ExecLauncher : boost::process::v2::posix::default_launcher {
  template <typename Executor, typename Args, typename... Inits>
  auto operator()(Executor exec, const boost::process::v2::filesystem::path& executable,
                  Args&& args, Inits&&... inits) -> boost::process::v2::basic_process<Executor> {
    boost::process::v2::error_code ec;
    auto process = (*this)(std::move(exec), ec, executable, std::forward<Args>(args),
                           std::forward<Inits>(inits)...);
    if (ec)
      boost::asio::detail::throw_error(ec, "keval exec launcher");
    return process;
  }

  template <typename Executor, typename Args, typename... Inits>
  auto operator()(Executor exec, boost::process::v2::error_code& ec,
                  const boost::process::v2::filesystem::path& executable, Args&& args,
                  Inits&&... inits) -> boost::process::v2::basic_process<Executor> {
    namespace hooks = boost::process::v2::posix::detail;
    using Process = boost::process::v2::basic_process<Executor>;
    auto argv = this->build_argv_(executable, std::forward<Args>(args));
    pipe_guard exec_error; // the child writes errno here if exec fails; closes on exec
    if (::pipe2(exec_error.p, O_CLOEXEC) != 0) {
      ec.assign(errno, boost::system::system_category());
      return Process{exec};
    }
    ec = hooks::on_setup(*this, executable, argv, inits...);
    if (ec) {
      hooks::on_error(*this, executable, argv, ec, inits...);
      return Process{exec};
    }
    fd_whitelist.push_back(exec_error.p[1]);
    pid = ::fork();
    if (pid == -1) {
      ec.assign(errno, boost::system::system_category());
      hooks::on_fork_error(*this, executable, argv, ec, inits...);
      hooks::on_error(*this, executable, argv, ec, inits...);
      return Process{exec};
    }
    if (pid == 0) {
      // The child: async-signal-safe calls only, no allocation (the hooks keep to that).
      ::close(exec_error.p[0]);
      ec = hooks::on_exec_setup(*this, executable, argv, inits...);
      if (!ec)
        close_all_fds(ec);
      if (!ec)
        ::execve(executable.c_str(), const_cast<char* const*>(argv), const_cast<char* const*>(env));
      const int error = errno;
      ignore_unused(::write(exec_error.p[1], &error, sizeof(error)));
      ::_exit(127); // not exit(): the parent's atexit handlers and static objects are not ours
    }
    ::close(exec_error.p[1]);
    exec_error.p[1] = -1;
    int child_error = 0;
    ssize_t count = -1;
    while ((count = ::read(exec_error.p[0], &child_error, sizeof(child_error))) == -1) {
      if (errno != EAGAIN && errno != EINTR) {
        child_error = errno;
        count = sizeof(child_error);
        break;
      }
    }
    if (count != 0) {
      ec.assign(child_error, boost::system::system_category());
      ::waitpid(pid, nullptr, 0); // it has written and is exiting: no zombie left behind
      hooks::on_error(*this, executable, argv, ec, inits...);
      return Process{exec};
    }
    Process process(exec, pid);
    hooks::on_success(*this, executable, argv, ec, inits...);
    return process;
  }
};

} // namespace keval::supervisor::detail
