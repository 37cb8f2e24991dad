// The daemon's life: its socket (private, never stolen, replaced when stale), restarts that keep
// results and report interrupted jobs, and the two-stage shutdown.
#include "support/daemon_harness.hpp"

#include <sys/stat.h>

#include <gtest/gtest.h>

namespace keval::test::daemon {
namespace {

json::object read_record(const fs::path& state, const std::string& id) {
  std::ifstream in(state / "jobs" / (id + ".json"));
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str()).as_object();
}

std::string async_job(const fs::path& socket, const json::object& request) {
  const auto r = HttpClient(socket).post("/evaluate", with_async(request));
  if (r.status != 202)
    throw std::runtime_error("submission refused: " + r.body());
  return std::string(r.json_body().at("job_id").as_string());
}

int exit_code_of(const std::optional<int>& status) {
  return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

TEST(DaemonLifecycle, RestartServesFinishedResultsAndReportsInterruptedJobs) {
  DaemonDirs dirs;
  std::string done_id, hung_id;
  json::object done_result;
  {
    DaemonProcess first(dirs.state(), dirs.socket());
    ASSERT_TRUE(first.wait_ready()) << first.log();
    const auto done = HttpClient(dirs.socket()).post("/evaluate", fault_evaluate({}));
    ASSERT_EQ(done.status, 200u) << done.body();
    done_result = done.json_body();
    done_id = std::string(done_result.at("job_id").as_string());
    hung_id = async_job(dirs.socket(), hang());
    // Seen once under ASan in CI: still not validating after 120 s (cause unknown; the job
    // view and the daemon's log say where it stood).
    ASSERT_TRUE(wait_status(dirs.socket(), hung_id, "validating"))
        << "job: " << HttpClient(dirs.socket()).get("/jobs/" + hung_id).body() << "\ndaemon log:\n"
        << first.log();
    first.crash(); // SIGKILL: no shutdown, no cleanup
  }
  ASSERT_TRUE(fs::exists(dirs.socket())); // the dead daemon's socket is still there

  DaemonProcess second(dirs.state(), dirs.socket());
  ASSERT_TRUE(second.wait_ready()) << second.log(); // ... and is replaced
  const auto done_view = HttpClient(dirs.socket()).get("/jobs/" + done_id).json_body();
  EXPECT_EQ(done_view.at("status"), "completed");
  EXPECT_EQ(json::serialize(done_view.at("result")), json::serialize(done_result));

  const auto hung_view = HttpClient(dirs.socket()).get("/jobs/" + hung_id).json_body();
  EXPECT_EQ(hung_view.at("status"), "failed");
  EXPECT_TRUE(hung_view.at("interrupted").as_bool());
  EXPECT_EQ(hung_view.at("http_status"), 500);
  EXPECT_TRUE(hung_view.at("compilation_result").at("ok").as_bool());
  EXPECT_NE(hung_view.at("result").at("error").at("message").as_string().find("interrupted"),
            std::string::npos)
      << hung_view;
  EXPECT_EQ(HttpClient(dirs.socket()).get("/stats").json_body().at("jobs").at("interrupted_total"),
            1);
}

TEST(DaemonLifecycle, SocketIsPrivateUnlessAGroupIsNamed) {
  DaemonDirs dirs;
  {
    DaemonProcess daemon(dirs.state(), dirs.socket());
    ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
    struct stat st {};
    ASSERT_EQ(::stat(dirs.socket().c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
  }
  const std::string gid = std::to_string(::getgid());
  DaemonProcess grouped(dirs.state(), dirs.socket(), {"--socket-group", gid});
  ASSERT_TRUE(grouped.wait_ready()) << grouped.log();
  struct stat st {};
  ASSERT_EQ(::stat(dirs.socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, ::getgid());
}

TEST(DaemonLifecycle, ALiveDaemonIsNeverDisplaced) {
  DaemonDirs dirs;
  DaemonProcess first(dirs.state(), dirs.socket());
  ASSERT_TRUE(first.wait_ready()) << first.log();

  TempDir other;
  DaemonProcess same_socket(other.path() / "state", dirs.socket());
  EXPECT_EQ(exit_code_of(same_socket.wait_exit()), 3) << same_socket.log();
  EXPECT_NE(same_socket.log().find("is listening on"), std::string::npos) << same_socket.log();

  DaemonProcess same_state(dirs.state(), other.path() / "other.sock");
  EXPECT_EQ(exit_code_of(same_state.wait_exit()), 3) << same_state.log();
  EXPECT_NE(same_state.log().find("another keval daemon is using the state directory"),
            std::string::npos)
      << same_state.log();

  const fs::path not_a_socket = other.path() / "file.sock";
  std::ofstream(not_a_socket) << "precious";
  DaemonProcess wrong_file(other.path() / "state2", not_a_socket);
  EXPECT_EQ(exit_code_of(wrong_file.wait_exit()), 3) << wrong_file.log();
  EXPECT_NE(wrong_file.log().find("is not a socket"), std::string::npos) << wrong_file.log();
  std::ifstream kept(not_a_socket);
  std::string content;
  kept >> content;
  EXPECT_EQ(content, "precious");

  EXPECT_EQ(HttpClient(dirs.socket()).get("/health").status, 200u); // the first one still serves
}

TEST(DaemonLifecycle, SigtermLetsRunningJobsFinishWithinTheGracePeriodThenCancels) {
  DaemonDirs dirs;
  DaemonProcess daemon(dirs.state(), dirs.socket(), {"--shutdown-grace", "10"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
  // One job ends by itself during the grace period (its 3 s timeout), one would never end.
  const std::string ending = async_job(dirs.socket(), hang("hang_in_launch", 3.0));
  const std::string endless = async_job(dirs.socket(), hang());
  ASSERT_TRUE(wait_status(dirs.socket(), ending, "validating"));
  ASSERT_TRUE(wait_status(dirs.socket(), endless, "validating"))
      << json::serialize(HttpClient(dirs.socket()).get("/jobs/" + endless).json_body()) << "\n"
      << daemon.log();

  daemon.signal(SIGTERM);
  // It stops accepting at once...
  EXPECT_TRUE(eventually([&] { return !fs::exists(dirs.socket()); }));
  EXPECT_THROW(HttpClient(dirs.socket()).get("/health"), std::runtime_error);
  // ... and exits cleanly once both jobs have ended.
  EXPECT_EQ(exit_code_of(daemon.wait_exit()), 0) << daemon.log();

  const auto ended = read_record(dirs.state(), ending);
  EXPECT_EQ(ended.at("status"), "failed");
  EXPECT_NE(ended.at("response").at("error").at("message").as_string().find("exceeded its timeout"),
            std::string::npos)
      << ended.at("response");
  const auto cancelled = read_record(dirs.state(), endless);
  EXPECT_EQ(cancelled.at("status"), "failed");
  EXPECT_NE(cancelled.at("response").at("error").at("message").as_string().find("grace period"),
            std::string::npos)
      << cancelled.at("response");
}

TEST(DaemonLifecycle, ASecondSignalCancelsRunningJobsAtOnce) {
  DaemonDirs dirs;
  DaemonProcess daemon(dirs.state(), dirs.socket(), {"--shutdown-grace", "3600"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
  const std::string endless = async_job(dirs.socket(), hang());
  ASSERT_TRUE(wait_status(dirs.socket(), endless, "validating"))
      << json::serialize(HttpClient(dirs.socket()).get("/jobs/" + endless).json_body()) << "\n"
      << daemon.log();
  daemon.signal(SIGINT);
  ASSERT_TRUE(eventually([&] {
    return daemon.log().find("running jobs have 3600 s to finish") != std::string::npos;
  })) << daemon.log();
  daemon.signal(SIGINT);
  EXPECT_EQ(exit_code_of(daemon.wait_exit()), 0) << daemon.log();
  EXPECT_NE(read_record(dirs.state(), endless)
                .at("response")
                .at("error")
                .at("message")
                .as_string()
                .find("second signal"),
            std::string::npos);
}

} // namespace
} // namespace keval::test::daemon
