// The "channel" layer of a runner's sandbox: its channel to the trusted worker is moved to the top
// of the descriptor table and kept there, so that user code in the runner cannot put a relay of
// its own between the runner and the trusted worker (and rewrite the times the runner reports).
// Every case runs in a forked child, since a seccomp filter cannot be taken back; the child
// reports the first check that failed through a pipe.
#include "worker/isolation/sandbox.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <string>

#include <fcntl.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace keval::worker::isolation {
namespace {

namespace json = boost::json;

constexpr int kPrSetSyscallUserDispatch = 59;

struct Guarded {
  int channel = -1;  // the runner's end, after the sandbox moved it
  int original = -1; // where it was
  int peer = -1;     // the trusted worker's end
  json::object report;
};

// The sandbox of a runner in mode off (no namespaces, uid or Landlock here: the channel layer
// and the privileges are applied in every mode), given one end of a fresh socketpair.
Guarded guard_in_this_process() {
  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0)
    throw std::runtime_error("socketpair failed");
  Guarded g;
  g.original = ends[0];
  g.peer = ends[1];
  g.channel = ends[0];
  protocol::SandboxPolicy policy;
  policy.mode = protocol::SandboxMode::off;
  g.report = apply_sandbox(policy, &g.channel);
  return g;
}

// Runs `body` in a forked child; the child's first failed check, or "" when all held.
std::string in_child(const std::function<std::string(Guarded&)>& body) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0)
    return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipe_fds[0]);
    std::string failure;
    try {
      Guarded g = guard_in_this_process();
      failure = body(g);
    } catch (const std::exception& e) {
      failure = std::string("threw: ") + e.what();
    }
    if (!failure.empty())
      (void)!::write(pipe_fds[1], failure.data(), failure.size());
    ::_exit(failure.empty() ? 0 : 1);
  }
  ::close(pipe_fds[1]);
  std::string message;
  char buffer[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;)
    message.append(buffer, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status))
    return "the child died by signal " + std::to_string(WTERMSIG(status)) + " " + message;
  if (WEXITSTATUS(status) != 0 && message.empty())
    return "the child exited " + std::to_string(WEXITSTATUS(status));
  return message;
}

// "" when `result` is -1 with `expected` (EPERM), else what happened.
std::string denied(const char* what, long result, int expected = EPERM) {
  if (result == -1 && errno == expected)
    return "";
  return std::string(what) + " was not denied with " + std::strerror(expected) + ": returned " +
         std::to_string(result) +
         (result == -1 ? std::string(", ") + std::strerror(errno) : std::string());
}

std::string allowed(const char* what, long result) {
  if (result != -1)
    return "";
  return std::string(what) + " failed: " + std::strerror(errno);
}

// The layer's own verdict, or why this machine cannot apply it (the tests then skip).
std::string why_unguarded() {
  return in_child([](Guarded& g) -> std::string {
    const json::object& layers = g.report.at("layers").as_object();
    if (!layers.contains("channel"))
      return "no channel layer in the report";
    const json::object& layer = layers.at("channel").as_object();
    if (!layer.at("active").as_bool())
      return "inactive: " + std::string(layer.at("detail").as_string());
    return "";
  });
}

class ChannelGuard : public ::testing::Test {
protected:
  void SetUp() override {
    const std::string why = why_unguarded();
    if (why.find("no seccomp filter is written for this CPU architecture") != std::string::npos)
      GTEST_SKIP() << why;
    ASSERT_EQ(why, "") << "the channel layer must be active in every sandbox mode";
  }
};

TEST_F(ChannelGuard, TheChannelMovesToTheTopOfTheTableCloseOnExec) {
  EXPECT_EQ(in_child([](Guarded& g) -> std::string {
              // Within the 16 highest descriptors the process may hold (at most 65536).
              struct rlimit files {};
              ::getrlimit(RLIMIT_NOFILE, &files);
              const rlim_t top = std::min<rlim_t>(files.rlim_cur, 1 << 16) - 1;
              if (g.channel > static_cast<int>(top) || g.channel <= static_cast<int>(top) - 16)
                return "the channel is at " + std::to_string(g.channel) + ", not near " +
                       std::to_string(top);
              if (::fcntl(g.original, F_GETFD) != -1 || errno != EBADF)
                return "its old descriptor is still open";
              if ((::fcntl(g.channel, F_GETFD) & FD_CLOEXEC) == 0)
                return "the channel is not close-on-exec";
              // Still the same connection.
              if (::write(g.channel, "ping", 4) != 4)
                return "cannot write to the moved channel";
              char got[4] = {};
              if (::read(g.peer, got, 4) != 4 || std::memcmp(got, "ping", 4) != 0)
                return "the peer did not receive what the channel sent";
              return "";
            }),
            "");
}

TEST_F(ChannelGuard, TheChannelCanBeNeitherClosedNorReplaced) {
  EXPECT_EQ(in_child([](Guarded& g) -> std::string {
              int pair[2];
              if (::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0)
                return "socketpair failed";
              for (const std::string& failure :
                   {denied("close(channel)", ::close(g.channel)),
                    denied("dup2(other, channel)", ::dup2(pair[0], g.channel)),
                    denied("dup3(other, channel)", ::dup3(pair[0], g.channel, O_CLOEXEC)),
                    // ENOSYS: what closes every descriptor falls back to one at a time.
                    denied("close_range(channel, channel)",
                           ::syscall(SYS_close_range, g.channel, g.channel, 0), ENOSYS),
                    denied("close_range(0, ~0)", ::syscall(SYS_close_range, 0, ~0u, 0), ENOSYS),
                    denied("close_range(channel - 1, channel)",
                           ::syscall(SYS_close_range, g.channel - 1, g.channel, 0), ENOSYS),
                    denied("fcntl(channel, F_SETFD, 0)", ::fcntl(g.channel, F_SETFD, 0))})
                if (!failure.empty())
                  return failure;
              // After all that, it is still the channel.
              if (::write(g.channel, "x", 1) != 1)
                return "the channel no longer writes";
              char got = 0;
              if (::read(g.peer, &got, 1) != 1 || got != 'x')
                return "the peer is no longer at the other end";
              return "";
            }),
            "");
}

TEST_F(ChannelGuard, EveryOtherDescriptorIsUserCodesToManage) {
  EXPECT_EQ(in_child([](Guarded& g) -> std::string {
              const int a = ::open("/dev/null", O_RDONLY);
              const int b = ::open("/dev/null", O_RDONLY);
              for (const std::string& failure :
                   {allowed("dup2(a, b)", ::dup2(a, b)),
                    allowed("fcntl(a, F_SETFD, FD_CLOEXEC)", ::fcntl(a, F_SETFD, FD_CLOEXEC)),
                    allowed("fcntl(channel, F_GETFD)", ::fcntl(g.channel, F_GETFD)),
                    allowed("close_range(b, b)", ::syscall(SYS_close_range, b, b, 0)),
                    allowed("close_range above the channel",
                            ::syscall(SYS_close_range, g.channel + 1, ~0u, 0)),
                    allowed("close(a)", ::close(a))}) // a dup of the channel replaces nothing
                if (!failure.empty())
                  return failure;
              const int copy = ::dup(g.channel);
              if (copy < 0)
                return "dup(channel) failed";
              return allowed("close(dup of the channel)", ::close(copy));
            }),
            "");
}

TEST_F(ChannelGuard, NoFilterDispatchOrTracerCanInterceptTheRunner) {
  EXPECT_EQ(in_child([](Guarded&) -> std::string {
              uint32_t action = SECCOMP_RET_ALLOW;
              for (const std::string& failure :
                   {denied("seccomp(SECCOMP_GET_ACTION_AVAIL)",
                           ::syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action)),
                    denied("prctl(PR_SET_SECCOMP, strict)",
                           ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT, 0, 0, 0)),
                    denied("prctl(PR_SET_SYSCALL_USER_DISPATCH, off)",
                           ::prctl(kPrSetSyscallUserDispatch, 0, 0, 0, 0)),
                    denied("ptrace(PTRACE_TRACEME)", ::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr)),
                    allowed("prctl(PR_GET_DUMPABLE)", ::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))})
                if (!failure.empty())
                  return failure;
              return "";
            }),
            "");
}

TEST_F(ChannelGuard, WhatTheRunnerStartsInheritsTheGuard) {
  EXPECT_EQ(in_child([](Guarded& g) -> std::string {
              const pid_t grandchild = ::fork();
              if (grandchild == 0)
                ::_exit(::close(g.channel) == -1 && errno == EPERM ? 0 : 1);
              int status = 0;
              ::waitpid(grandchild, &status, 0);
              if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return "a forked child closed the channel";
              return "";
            }),
            "");
}

} // namespace
} // namespace keval::worker::isolation
