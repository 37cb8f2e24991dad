// Issue 12: the sandbox of the processes that run user code. One probe candidate
// (sandbox_probe.py) tries, at import time, everything beyond its own process that a hostile
// kernel would: the state directory (records, keys, other jobs), files outside its own directory,
// the network, the trusted worker (ptrace, /proc/PID/mem, signals), and reports what it could do;
// the test checks each against the layers the result says were active. A layer this machine
// cannot apply is reported skipped with its reason, and so is the check that needs it.
// Memory: a candidate that allocates far past --job-memory fails with a result that says so.
#include "adversarial_support.hpp"

#include <cstdlib>
#include <netinet/in.h>
#include <sys/socket.h>

namespace keval::test::adversarial {
namespace {

// A TCP listener on 127.0.0.1 the candidate tries to reach.
class Listener {
public:
  Listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(fd_, 4) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      throw std::runtime_error("cannot listen on 127.0.0.1");
    port_ = ntohs(addr.sin_port);
  }
  ~Listener() { ::close(fd_); }
  int port() const { return port_; }
  // Whether anybody connected (non-blocking accept).
  bool was_reached() const {
    const int client = ::accept(fd_, nullptr, nullptr);
    if (client >= 0)
      ::close(client);
    return client >= 0;
  }

private:
  int fd_ = -1;
  int port_ = 0;
};

// metadata.sandbox of a result, or empty.
json::object sandbox_of(const json::object& body) {
  const json::value* exec = body.if_contains("kernel_exec_result");
  const json::value* metadata =
      exec && exec->is_object() ? exec->as_object().if_contains("metadata") : nullptr;
  const json::value* sandbox =
      metadata && metadata->is_object() ? metadata->as_object().if_contains("sandbox") : nullptr;
  return sandbox && sandbox->is_object() ? sandbox->as_object() : json::object();
}

struct ProbeResult {
  CliRun run;
  json::object probe;   // what the candidate reported
  json::object sandbox; // metadata.sandbox
  fs::path state, open_dir;
  bool listener_reached = false;
};

class Sandbox : public TorchAttack {
protected:
  // The probe job runs once for the suite (a torch job costs seconds).
  static const ProbeResult& probe() {
    static std::unique_ptr<TempDir> tmp;
    static std::unique_ptr<ProbeResult> result;
    if (result)
      return *result;
    tmp = std::make_unique<TempDir>();
    result = std::make_unique<ProbeResult>();
    result->state = tmp->path() / "state";
    fs::create_directories(result->state);
    {
      std::ofstream secret(result->state / "secret.txt");
      secret << "the host's secret";
    }
    fs::permissions(result->state / "secret.txt", fs::perms::owner_read | fs::perms::owner_write |
                                                      fs::perms::group_read |
                                                      fs::perms::others_read);
    result->open_dir = fs::temp_directory_path() / unique_id("keval-open");
    fs::create_directories(result->open_dir);
    fs::permissions(result->open_dir, fs::perms::all, fs::perm_options::replace);
    Listener listener;
    ::setenv("KEVAL_ADVERSARIAL_SECRET", "hunter2", 1);
    result->run =
        run_cli(relu_compare(source("sandbox_probe.py",
                                    {{"STATE_DIR", result->state.string()},
                                     {"SECRET_FILE", (result->state / "secret.txt").string()},
                                     {"OPEN_DIR", result->open_dir.string()},
                                     {"TCP_PORT", std::to_string(listener.port())}}),
                             unique_id("sandbox-probe")),
                result->state);
    ::unsetenv("KEVAL_ADVERSARIAL_SECRET");
    result->listener_reached = listener.was_reached();
    const auto lines = marker_lines(json::value(result->run.body), "KEVAL_PROBE ");
    if (!lines.empty()) {
      const json::value parsed = parse_lenient(lines.front());
      if (parsed.is_object())
        result->probe = parsed.as_object();
    }
    result->sandbox = sandbox_of(result->run.body);
    return *result;
  }

  // Whether the result says `layer` held; `why` gets the reason when it did not.
  static bool active(const std::string& layer, std::string* why = nullptr) {
    const json::object& sandbox = probe().sandbox;
    const json::value* layers = sandbox.if_contains("layers");
    if (layers == nullptr || !layers->is_object() || !layers->as_object().contains(layer)) {
      if (why)
        *why = "the result reports no '" + layer + "' layer";
      return false;
    }
    const json::object& entry = layers->as_object().at(layer).as_object();
    if (why)
      *why = std::string(entry.at("detail").as_string());
    return entry.at("active").as_bool();
  }

  static std::string attempt(const std::string& name) {
    const json::value* v = probe().probe.if_contains(name);
    return v != nullptr && v->is_string() ? std::string(v->as_string()) : "(not reported)";
  }

  void SetUp() override {
    TorchAttack::SetUp();
    if (IsSkipped())
      return;
    ASSERT_FALSE(probe().probe.empty()) << "the probe reported nothing: " << describe(probe().run);
  }
};

bool denied(const std::string& outcome) {
  return outcome.rfind("denied", 0) == 0;
}

TEST_F(Sandbox, AnHonestKernelKeepsItsVerdict) {
  EXPECT_EQ(probe().run.exit_code, 0) << describe(probe().run);
  EXPECT_TRUE(correctness(probe().run.body)) << describe(probe().run);
}

TEST_F(Sandbox, EveryLayerIsReportedActiveOrSkippedWithItsReason) {
  const json::object& sandbox = probe().sandbox;
  ASSERT_FALSE(sandbox.empty()) << describe(probe().run);
  EXPECT_EQ(sandbox.at("mode").as_string(), "standard");
  for (const char* layer :
       {"memory", "processes", "files", "network", "user", "privileges", "filesystem", "tcp",
        "signals", "seccomp", "channel", "environment", "directory"}) {
    std::string why;
    const bool on = active(layer, &why);
    EXPECT_FALSE(why.empty()) << layer << ": no detail";
    if (!on) {
      EXPECT_TRUE(sandbox.at("skipped").as_object().contains(layer)) << layer;
    }
  }
  EXPECT_TRUE(active("privileges")) << "never skipped: it keeps the verdict out of reach";
  EXPECT_TRUE(active("channel")) << "never skipped: it keeps the timings out of reach";
  EXPECT_TRUE(sandbox.contains("ref")) << "the reference's sandbox is reported beside it";
}

TEST_F(Sandbox, TheStateDirectoryCanBeNeitherReadNorWritten) {
  std::string why;
  if (!active("filesystem", &why))
    GTEST_SKIP() << "filesystem layer not applied here: " << why;
  EXPECT_TRUE(denied(attempt("read_state_secret"))) << attempt("read_state_secret");
  EXPECT_TRUE(denied(attempt("list_state_dir"))) << attempt("list_state_dir");
  EXPECT_TRUE(denied(attempt("write_state_dir"))) << attempt("write_state_dir");
  EXPECT_FALSE(fs::exists(probe().state / "planted.json"));
}

TEST_F(Sandbox, WritesGoOnlyToItsOwnDirectory) {
  std::string why;
  if (!active("filesystem", &why))
    GTEST_SKIP() << "filesystem layer not applied here: " << why;
  EXPECT_TRUE(denied(attempt("write_open_dir"))) << attempt("write_open_dir");
  EXPECT_TRUE(denied(attempt("write_tmp"))) << attempt("write_tmp");
  EXPECT_FALSE(fs::exists(probe().open_dir / "planted"));
  EXPECT_EQ(attempt("write_own_dir"), "allowed");
  EXPECT_EQ(attempt("write_tmpdir"), "allowed");
  std::error_code ec;
  fs::remove_all(probe().open_dir, ec);
}

// The torch_cuda build cache is shared by jobs; only reference-side runners write it. A
// candidate may read it (a build the reference side made is reused) but writes nothing another
// job could load.
TEST_F(Sandbox, TheSharedBuildCacheIsReadOnlyToTheCandidate) {
  EXPECT_EQ(attempt("cache_read_only"), "1") << "the candidate's builder was not told";
  std::string why;
  if (!active("filesystem", &why))
    GTEST_SKIP() << "filesystem layer not applied here: " << why;
  const std::string cache = attempt("shared_cache_dir");
  ASSERT_TRUE(fs::is_directory(cache)) << cache;
  EXPECT_TRUE(denied(attempt("write_shared_cache"))) << attempt("write_shared_cache");
  EXPECT_EQ(attempt("read_shared_cache"), "allowed");
  for (const auto& entry : fs::directory_iterator(cache))
    EXPECT_EQ(entry.path().filename().string().rfind("planted-", 0), std::string::npos)
        << entry.path();
  EXPECT_NE(why.find("read-only: " + cache), std::string::npos) << why;
}

TEST_F(Sandbox, NoNetworkIsReachable) {
  std::string network_why, tcp_why, seccomp_why;
  const bool network = active("network", &network_why);
  if (!network && !active("tcp", &tcp_why) && !active("seccomp", &seccomp_why))
    GTEST_SKIP() << "no network layer applied here: " << network_why << "; " << tcp_why << "; "
                 << seccomp_why;
  EXPECT_TRUE(denied(attempt("tcp_connect"))) << attempt("tcp_connect");
  EXPECT_FALSE(probe().listener_reached) << "the candidate connected to 127.0.0.1";
  EXPECT_TRUE(denied(attempt("packet_socket"))) << attempt("packet_socket");
}

TEST_F(Sandbox, TheTrustedWorkerIsOutOfReach) {
  EXPECT_TRUE(denied(attempt("ptrace_trusted"))) << attempt("ptrace_trusted");
  EXPECT_TRUE(denied(attempt("open_trusted_mem"))) << attempt("open_trusted_mem");
  std::string why;
  if (!active("signals", &why))
    GTEST_SKIP() << "signal scoping not applied here: " << why;
  EXPECT_TRUE(denied(attempt("signal_trusted"))) << attempt("signal_trusted");
}

// Where runners share the trusted worker's uid (keval not root), the kernel alone would let a
// candidate renice the reference or the trusted worker, pin them to one busy CPU, make them
// SCHED_IDLE or cut their limits: slower references under a batch's load, a higher speedup.
TEST_F(Sandbox, NoOtherProcessesSchedulingCanBeChanged) {
  std::string why;
  if (!active("seccomp", &why))
    GTEST_SKIP() << "seccomp not applied here: " << why;
  for (const char* name : {"renice_trusted", "affinity_trusted", "policy_trusted", "limit_trusted"})
    EXPECT_EQ(attempt(name), "denied: EPERM") << name;
  // Honest code sets its own.
  for (const char* name : {"renice_own", "affinity_own", "policy_own", "limit_own"})
    EXPECT_EQ(attempt(name), "allowed") << name;
}

// The same where the kernel's own uid check cannot help: root with --runner-uids shared, the
// reference's runner a process of the candidate's uid.
TEST_F(Sandbox, NoOtherProcessesSchedulingCanBeChangedWhereRunnersShareAUid) {
  std::string why;
  if (!active("seccomp", &why))
    GTEST_SKIP() << "seccomp not applied here: " << why;
  if (!active("user", &why))
    GTEST_SKIP() << "user layer not applied here (keval is not root): runners share the worker's "
                    "uid already, which NoOtherProcessesSchedulingCanBeChanged covers: "
                 << why;
  TempDir tmp;
  const fs::path state = tmp.path() / "state";
  fs::create_directories(state);
  const auto run = run_cli(
      relu_compare(source("sandbox_probe.py", {{"STATE_DIR", state.string()},
                                               {"SECRET_FILE", (state / "secret.txt").string()},
                                               {"OPEN_DIR", tmp.path().string()},
                                               {"TCP_PORT", "9"}}),
                   unique_id("sandbox-probe-shared")),
      state, {"--runner-uids", "shared"});
  const auto lines = marker_lines(json::value(run.body), "KEVAL_PROBE ");
  ASSERT_FALSE(lines.empty()) << describe(run);
  const json::value probed = parse_lenient(lines.front());
  ASSERT_TRUE(probed.is_object()) << lines.front();
  for (const char* name : {"renice_peer", "affinity_peer", "policy_peer", "limit_peer"})
    EXPECT_EQ(probed.at(name), "denied: EPERM") << name << ": " << lines.front();
  EXPECT_EQ(run.exit_code, 0) << describe(run);
  EXPECT_TRUE(correctness(run.body)) << describe(run);
}

TEST_F(Sandbox, NoPrivilegesRemain) {
  EXPECT_EQ(probe().probe.at("no_new_privs").as_string(), "1");
  EXPECT_EQ(probe().probe.at("cap_eff").as_string(), "0000000000000000");
  std::string why;
  if (!active("seccomp", &why))
    GTEST_SKIP() << "seccomp not applied here: " << why;
  EXPECT_EQ(probe().probe.at("seccomp").as_string(), "2"); // filter mode
}

TEST_F(Sandbox, UserCodeRunsAsAUidOfItsOwnWithTheJobGroupWhenKevalIsRoot) {
  std::string why;
  if (!active("user", &why))
    GTEST_SKIP() << "user layer not applied here: " << why;
  const json::object& probed = probe().probe;
  EXPECT_EQ(probed.at("gid").to_number<int64_t>(), 65534); // --job-user default: nobody
  if (why.find("its own") == std::string::npos)
    GTEST_SKIP() << "runners share the job uid here: " << why;
  EXPECT_EQ(probed.at("uid").to_number<int64_t>(),
            int64_t{protocol::SandboxPolicy::kDefaultRunnerUidBase} +
                probed.at("pid").to_number<int64_t>())
      << why;
}

TEST_F(Sandbox, TheEnvironmentIsScrubbedAndHomeIsItsOwnDirectory) {
  EXPECT_TRUE(probe().probe.at("secret_variable").is_null())
      << "a variable of keval's environment reached user code";
  // The trusted worker's one hardware work queue (worker/engine/work_queues.hpp) is its own: a
  // Python kernel's streams are not serialised. An operator's own number would be passed on.
  const char* operators = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (operators == nullptr) {
    EXPECT_TRUE(probe().probe.at("work_queues").is_null()) << shown(probe().probe);
  } else {
    EXPECT_EQ(probe().probe.at("work_queues"), json::value(operators)) << shown(probe().probe);
  }
  EXPECT_TRUE(probe().probe.at("work_queue_marker").is_null()) << shown(probe().probe);
  const std::string cwd(probe().probe.at("cwd").as_string());
  EXPECT_EQ(probe().probe.at("home").as_string(), cwd);
  EXPECT_EQ(fs::path(cwd).parent_path(), fs::weakly_canonical(probe().state / "work")) << cwd;
}

TEST_F(Sandbox, AMemoryHogFailsWithAResultThatNamesTheLimit) {
  TempDir tmp;
  const auto run =
      // 4 GiB: torch with CUDA maps GiBs of libraries, which RLIMIT_DATA counts; the hog wants 16.
      run_cli(relu_compare(source("memory_hog.py", {{"GIB", "16"}}), unique_id("memory-hog")),
              tmp.path() / "state", {"--job-memory", "4G"});
  EXPECT_EQ(run.exit_code, 1) << describe(run); // the kernel failed: not keval's failure
  expect_genuine_failure(run.body);
  EXPECT_NE(shown(run.body).find("exceeded its memory limit of 4 GiB"), std::string::npos)
      << describe(run);
}

TEST_F(Sandbox, AForkBombStopsAtTheProcessLimit) {
  std::string why;
  if (!active("processes", &why))
    GTEST_SKIP() << "process limit not applied here: " << why;
  TempDir tmp;
  const auto run =
      run_cli(relu_compare(source("fork_bomb.py", {{"ATTEMPTS", "400"}}), unique_id("fork-bomb")),
              tmp.path() / "state", {"--job-pids", "64"});
  const auto lines = marker_lines(json::value(run.body), "KEVAL_FORKS ");
  ASSERT_FALSE(lines.empty()) << describe(run);
  const json::value report = parse_lenient(lines.front());
  ASSERT_TRUE(report.is_object()) << lines.front();
  // The limit counts the runner's own threads too (and, as RLIMIT_NPROC, every process of the
  // job uid): fewer than 64 children, and the fork that failed said EAGAIN.
  EXPECT_LT(report.at("forked").to_number<int64_t>(), 64) << lines.front();
  EXPECT_EQ(report.at("error"), "EAGAIN") << lines.front();
  EXPECT_EQ(run.exit_code, 0) << describe(run); // it cleaned up after itself: still correct
}

// RLIMIT_NPROC counts every process of a uid: were runners to share one, a reference holding
// threads (or a concurrent job's runners) would spend the candidate's process limit, and an honest
// kernel could fail to start a thread. Runners of uids of their own count only their own.
TEST_F(Sandbox, TheProcessLimitCountsTheRunnersOwnProcessesOnly) {
  std::string why;
  if (!active("processes", &why))
    GTEST_SKIP() << "process limit not applied here: " << why;
  if (why.find("every runner shares") != std::string::npos)
    GTEST_SKIP() << "runners share one uid here, so they share its process count: " << why;
  constexpr int kLimit = 128, kReferenceThreads = 48;
  TempDir tmp;
  const auto run = run_cli(
      compare_request(kernel("torch", source("reference_holding_threads.py",
                                             {{"THREADS", std::to_string(kReferenceThreads)}})),
                      kernel("torch", source("fork_bomb.py", {{"ATTEMPTS", "400"}})),
                      unique_id("own-count")),
      tmp.path() / "state", {"--job-pids", std::to_string(kLimit)});
  const auto lines = marker_lines(json::value(run.body), "KEVAL_FORKS ");
  ASSERT_FALSE(lines.empty()) << describe(run);
  const json::value report = parse_lenient(lines.front());
  ASSERT_TRUE(report.is_object()) << lines.front();
  const int64_t forked = report.at("forked").to_number<int64_t>();
  const int64_t threads = report.at("threads").to_number<int64_t>();
  EXPECT_EQ(report.at("error"), "EAGAIN") << lines.front();
  // Its own threads and children reach the limit (a few threads may come and go meanwhile);
  // counted with the reference's, they would stop it at least kReferenceThreads earlier.
  EXPECT_GE(forked + threads, kLimit - 8) << lines.front();
  EXPECT_EQ(run.exit_code, 0) << describe(run);
}

TEST_F(Sandbox, AStateDirectoryTheJobUidCannotReachRunsAsRootWithoutCapabilities) {
  if (::geteuid() != 0)
    GTEST_SKIP() << "keval does not run as root here: there is no job uid to switch to";
  TempDir tmp;
  const auto closed = tmp.path() / "closed";
  fs::create_directories(closed);
  fs::permissions(closed, fs::perms::owner_all, fs::perm_options::replace); // 0700: root's only
  const auto run = run_cli(relu_compare(source("honest_model_new.py"), unique_id("closed-state")),
                           closed / "state");
  EXPECT_EQ(run.exit_code, 0) << describe(run);
  EXPECT_TRUE(correctness(run.body)) << describe(run);
  const json::object sandbox = sandbox_of(run.body);
  ASSERT_TRUE(sandbox.contains("skipped")) << describe(run);
  const auto& skipped = sandbox.at("skipped").as_object();
  ASSERT_TRUE(skipped.contains("user")) << describe(run);
  EXPECT_NE(std::string(skipped.at("user").as_string()).find("not writable by uid"),
            std::string::npos);
}

TEST_F(Sandbox, StrictRunsOnlyWhereEveryLayerHolds) {
  TempDir tmp;
  const auto run = run_cli(relu_compare(source("honest_model_new.py"), unique_id("strict")),
                           tmp.path() / "state", {"--sandbox", "strict"});
  const auto& skipped = probe().sandbox.at("skipped").as_object();
  if (skipped.empty()) {
    EXPECT_EQ(run.exit_code, 0) << describe(run);
    EXPECT_TRUE(correctness(run.body)) << describe(run);
  } else {
    EXPECT_EQ(run.exit_code, 3) << describe(run); // keval's own failure, not the kernel's
    EXPECT_NE(shown(run.body).find("--sandbox strict"), std::string::npos) << describe(run);
  }
}

TEST_F(Sandbox, OffSaysSoInTheResult) {
  TempDir tmp;
  const auto run = run_cli(relu_compare(source("honest_model_new.py"), unique_id("off")),
                           tmp.path() / "state", {"--sandbox", "off"});
  EXPECT_EQ(run.exit_code, 0) << describe(run);
  const json::object sandbox = sandbox_of(run.body);
  ASSERT_FALSE(sandbox.empty()) << describe(run);
  EXPECT_EQ(sandbox.at("mode").as_string(), "off");
  EXPECT_TRUE(sandbox.contains("warning"));
  // What keeps the verdict and the timings out of user code's reach holds in every mode.
  const json::object& layers = sandbox.at("layers").as_object();
  for (const char* layer : {"privileges", "channel"})
    EXPECT_TRUE(layers.at(layer).as_object().at("active").as_bool())
        << layer << ": " << shown(layers.at(layer));
}

TEST_F(Sandbox, ABadJobUserIsAUsageErrorAndRunsNothing) {
  TempDir tmp;
  const auto request =
      write_request(tmp.path(), "request.json",
                    relu_compare(source("honest_model_new.py"), unique_id("bad-job-user")));
  const auto r =
      run_keval({"compare", request.string(), "--state-dir", (tmp.path() / "state").string(),
                 "--job-user", "no-such-user-anywhere"});
  ASSERT_TRUE(r.exit_code.has_value());
  EXPECT_EQ(*r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--job-user"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

} // namespace
} // namespace keval::test::adversarial
