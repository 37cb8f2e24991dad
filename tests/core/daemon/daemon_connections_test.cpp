// What a job's processes get of the daemon (issue 11): no descriptor of it (its sockets, its
// clients' connections, its lock are close-on-exec, and a worker starts with stdio and its
// channel only), and no hearing on its socket: a connection from under a worker is refused 403,
// while a client beside the daemon is served.
#include "support/daemon_harness.hpp"

#include <set>

#include <fcntl.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

namespace keval::test::daemon {
namespace {

// A keval-worker in front of the real one: for a job's worker (--protocol-fd), it first lists
// its descriptors and asks the daemon for /health with curl, from under the worker's pid, then
// execs the real worker, which runs the job as usual. Other uses (plugin probes) go straight
// through.
fs::path write_spying_worker(const fs::path& dir, const fs::path& socket) {
  const fs::path script = dir / "spying-worker";
  std::ofstream(script) << "#!/bin/sh\n"
                        << "if [ \"$1\" = --protocol-fd ]; then\n"
                        << "  ls /proc/self/fd > '" << (dir / "fds.tmp").string() << "'\n"
                        << "  mv '" << (dir / "fds.tmp").string() << "' '" << (dir / "fds").string()
                        << "'\n"
                        << "  curl -s -o '" << (dir / "body").string()
                        << "' -w '%{http_code}' --unix-socket '" << socket.string()
                        << "' http://localhost/health > '" << (dir / "code.tmp").string() << "'\n"
                        << "  mv '" << (dir / "code.tmp").string() << "' '"
                        << (dir / "code").string() << "'\n"
                        << "fi\n"
                        << "exec '" << worker_exe().string() << "' \"$@\"\n";
  fs::permissions(script, fs::perms::owner_all, fs::perm_options::replace);
  return script;
}

TEST(DaemonConnections, JobProcessIsRefusedAndClientsBesideTheDaemonAreServed) {
  if (!fs::exists("/usr/bin/curl") && !fs::exists("/bin/curl"))
    GTEST_SKIP() << "curl is not installed: it plays the job's process that connects";
  DaemonDirs dirs;
  const fs::path spy = dirs.tmp.path() / "spy";
  fs::create_directories(spy);
  DaemonProcess daemon(dirs.state(), dirs.socket(), {"--warm-workers", "0"},
                       {"KEVAL_WORKER=" + write_spying_worker(spy, dirs.socket()).string()});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();

  const auto job = HttpClient(dirs.socket()).post("/evaluate", fault_evaluate({}));
  ASSERT_EQ(job.status, 200u) << job.body() << daemon.log();
  EXPECT_TRUE(job.json_body().at("kernel_exec_result").at("correctness").as_bool());
  ASSERT_TRUE(fs::exists(spy / "code")) << daemon.log();
  EXPECT_EQ(read_file(spy / "code"), "403") << read_file(spy / "body");
  const auto refusal = json::parse(read_file(spy / "body")).as_object();
  EXPECT_EQ(refusal.at("error").at("class"), "forbidden");
  EXPECT_NE(daemon.log().find("refusing a connection"), std::string::npos) << daemon.log();

  // The test itself is no descendant of the daemon: served.
  EXPECT_EQ(HttpClient(dirs.socket()).get("/health").status, 200u);

  // The worker started with its standard streams and its channel (3) only; 4 is ls's own.
  std::set<std::string> fds;
  std::istringstream lines(read_file(spy / "fds"));
  for (std::string line; std::getline(lines, line);)
    fds.insert(line);
  EXPECT_EQ(fds, (std::set<std::string>{"0", "1", "2", "3", "4"})) << read_file(spy / "fds");
}

TEST(DaemonConnections, DaemonDescriptorsAreCloseOnExec) {
  DaemonDirs dirs;
  DaemonProcess daemon(dirs.state(), dirs.socket(),
                       {"--listen", "127.0.0.1:0", "--warm-workers", "0"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
  HttpClient kept_open(dirs.socket()); // an accepted connection, kept alive
  ASSERT_EQ(kept_open.get("/health").status, 200u);

  // Every socket and state file the daemon holds: the Unix and TCP listeners, the connection,
  // the state lock.
  const fs::path fd_dir = "/proc/" + std::to_string(daemon.pid()) + "/fd";
  size_t sockets = 0, state_files = 0;
  for (const auto& entry : fs::directory_iterator(fd_dir)) {
    std::error_code ec;
    const std::string target = fs::read_symlink(entry.path(), ec).string();
    const bool socket = target.rfind("socket:", 0) == 0;
    const bool state_file = target.rfind(dirs.state().string() + "/", 0) == 0;
    if (ec || (!socket && !state_file))
      continue;
    sockets += socket;
    state_files += state_file;
    const std::string fd = entry.path().filename().string();
    const std::string info = read_file("/proc/" + std::to_string(daemon.pid()) + "/fdinfo/" + fd);
    const size_t flags_at = info.find("flags:");
    ASSERT_NE(flags_at, std::string::npos) << info;
    const unsigned long flags = std::stoul(info.substr(flags_at + 6), nullptr, 8);
    EXPECT_NE(flags & O_CLOEXEC, 0u) << "fd " << fd << " (" << target << ") is inheritable";
  }
  EXPECT_GE(sockets, 3u);
  EXPECT_GE(state_files, 1u); // daemon.lock
}

} // namespace
} // namespace keval::test::daemon
