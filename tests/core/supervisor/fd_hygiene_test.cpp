// Children start with only the descriptors we chose (issue 11): whatever the host holds, close-on-
// exec or not (sockets, connections, other workers' channels), is closed in the child before
// exec, and a failed exec is still reported.
#include "supervisor/detail/child_setup.hpp"
#include "supervisor/detail/exec_launcher.hpp"
#include "supervisor/owned_children.hpp"
#include "supervisor/process.hpp"

#include <cstring>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace keval::supervisor {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
namespace bp = boost::process::v2;

// Inheritable descriptors of every kind a host holds, some far above the low numbers: a file, a
// connected socket pair, a listening TCP socket, and copies at high numbers. Closed at the end.
class InheritableDescriptors {
public:
  InheritableDescriptors() {
    keep(::open("/dev/null", O_RDONLY));
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0) {
      keep(pair[0]);
      keep(pair[1]);
    }
    const int listening = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (listening >= 0 &&
        ::bind(listening, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0)
      ::listen(listening, 4);
    keep(listening);
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    for (const int high : {40, 100, static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1000)) - 1})
      keep(::dup2(fds_.front(), high));
  }
  ~InheritableDescriptors() {
    for (const int fd : fds_)
      ::close(fd);
  }
  InheritableDescriptors(const InheritableDescriptors&) = delete;
  InheritableDescriptors& operator=(const InheritableDescriptors&) = delete;

  const std::vector<int>& fds() const { return fds_; }

private:
  void keep(int fd) {
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0); // inheritable, as Asio leaves sockets
    fds_.push_back(fd);
  }
  std::vector<int> fds_;
};

// The numbers `ls /proc/self/fd` printed, one a line.
std::set<int> listed(const std::string& out) {
  std::set<int> fds;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line))
    if (!line.empty())
      fds.insert(std::stoi(line));
  return fds;
}

TEST(FdHygiene, CommandSeesOnlyItsStandardStreams) {
  InheritableDescriptors inheritable;
  ASSERT_GE(inheritable.fds().size(), 7u);
  const auto r = run_command("/bin/ls", {"/proc/self/fd"}, 60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 3 is ls's own: the directory it lists.
  EXPECT_EQ(listed(r.out), (std::set<int>{0, 1, 2, 3})) << r.out;
}

TEST(FdHygiene, WorkerGetsItsChannelAndNothingElse) {
  InheritableDescriptors inheritable;
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  // The child's end far above 3, with inheritable descriptors on both sides of it: the gaps
  // between kept descriptors must be closed too.
  const int child_end = ::dup2(pair[1], 60);
  ASSERT_EQ(child_end, 60);
  ::close(pair[1]);

  asio::io_context ctx;
  asio::readable_pipe out(ctx);
  bp::process proc = detail::ExecLauncher{}(
      ctx.get_executor(), "/bin/sh",
      std::vector<std::string>{"-c", "readlink /proc/self/fd/3; ls /proc/self/fd"},
      bp::process_stdio{nullptr, out, nullptr}, detail::ChildSetup{child_end, 3});
  // ChildSetup also registered it as the host's own, so reap_orphans leaves it alone.
  EXPECT_TRUE(OwnedChildren::contains(proc.id()));
  std::string text;
  boost::system::error_code ec;
  asio::read(out, asio::dynamic_buffer(text), ec);
  EXPECT_EQ(proc.wait(), 0);
  ::close(child_end);
  ::close(pair[0]);

  const size_t newline = text.find('\n');
  ASSERT_NE(newline, std::string::npos) << text;
  // fd 3 is a socket: the channel.
  EXPECT_EQ(text.compare(0, 8, "socket:["), 0) << text;
  // 0-2, the channel, and ls's own directory (4).
  EXPECT_EQ(listed(text.substr(newline + 1)), (std::set<int>{0, 1, 2, 3, 4})) << text;
}

TEST(FdHygiene, FailedExecIsStillReported) {
  // The launcher learns of a failed exec through a close-on-exec pipe the child must not close.
  // /dev/null exists, so only the exec itself fails (EACCES).
  EXPECT_THROW(run_command("/dev/null", {}, 10s), std::runtime_error);
  EXPECT_THROW(run_command("/nonexistent/keval-no-such-program", {}, 10s), std::runtime_error);
}

// An io_context service standing for the locks and allocations of an io_context's fork
// notification: in a child it exits at once with 42 (as a child deadlocked on a lock another
// thread held at fork time would never exec), and in the parent it counts the notifications.
class ForkWatch : public asio::execution_context::service {
public:
  using key_type = ForkWatch;
  static inline asio::execution_context::id id;
  explicit ForkWatch(asio::execution_context& context) : service(context) {}
  void notify_fork(asio::execution_context::fork_event event) override {
    if (event == asio::execution_context::fork_child)
      ::_exit(42);
    ++parent_notifications;
  }
  int parent_notifications = 0;

private:
  void shutdown() override {}
};

TEST(FdHygiene, TheChildExecsWithoutTouchingTheParentsIoContext) {
  // Boost's default launcher notifies the io_context in the child (copying its services into a
  // vector under a mutex); a daemon thread holding that allocator lock or mutex at fork time left
  // the child hung before exec. The launcher keval uses does not notify.
  asio::io_context ctx;
  auto& watch = asio::use_service<ForkWatch>(ctx);
  asio::readable_pipe out(ctx);
  bp::process proc = detail::ExecLauncher{}(
      ctx.get_executor(), "/bin/sh", std::vector<std::string>{"-c", "echo ran"},
      bp::process_stdio{nullptr, out, nullptr}, detail::ChildSetup{});
  std::string text;
  boost::system::error_code ec;
  asio::read(out, asio::dynamic_buffer(text), ec);
  EXPECT_EQ(proc.wait(), 0) << "the child ran the io_context's fork notification";
  EXPECT_EQ(text, "ran\n");
  EXPECT_EQ(watch.parent_notifications, 0);
}

// Runs close_descriptors_except in a forked child (as between fork and exec) and returns the
// descriptors above 2 still open in it.
std::set<int> open_after_closing(detail::CloseMethod method, std::vector<int> keep) {
  int report[2];
  EXPECT_EQ(::pipe2(report, O_CLOEXEC), 0);
  keep.push_back(report[1]);
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  const int end = static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 20));
  const pid_t pid = ::fork();
  if (pid == 0) { // async-signal-safe calls only from here
    const int error = detail::close_descriptors_except(keep.data(), keep.size(), method);
    for (int fd = 3; fd < end; ++fd)
      if (::fcntl(fd, F_GETFD) != -1 && ::write(report[1], &fd, sizeof fd) != sizeof fd)
        ::_exit(2);
    ::_exit(error == 0 ? 0 : 1);
  }
  ::close(report[1]);
  std::set<int> open;
  int fd = 0;
  while (::read(report[0], &fd, sizeof fd) == sizeof fd)
    open.insert(fd);
  ::close(report[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  open.erase(report[1]);
  return open;
}

TEST(FdHygiene, ClosesEveryDescriptorButTheKeptOnesByEitherMethod) {
  InheritableDescriptors inheritable;
  const std::vector<int> keep{inheritable.fds()[2], 2, inheritable.fds()[5],
                              inheritable.fds()[2]}; // unordered, a duplicate, one below 3
  const std::set<int> expected{inheritable.fds()[2], inheritable.fds()[5]};
  EXPECT_EQ(open_after_closing(detail::CloseMethod::close_range, keep), expected);
  EXPECT_EQ(open_after_closing(detail::CloseMethod::loop, keep), expected);
  EXPECT_EQ(open_after_closing(detail::CloseMethod::close_range, {}), std::set<int>{});
}

} // namespace
} // namespace keval::supervisor
