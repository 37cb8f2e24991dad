// `keval serve --device-verifier` through the daemon, without a GPU: the worker is a script
// (KEVAL_WORKER) that reports one fake GPU, answers `--device-verifier 0` as a verifier would
// (its token read from standard input, a socket named, then serving until its input ends), and,
// as a job's worker, writes down the job frame's and the grant's verifier fields for the test.
// What must hold: the verifier is started per GPU and reported by /health without its token; a
// CUDA grant names the verifier's socket and token outside the `device` the runners are given;
// the job frame says a verifier will be named; a verifier that ends is started again with a new
// token; and a daemon not asked for verifiers names none. On a GPU, DaemonDeviceVerifier runs the
// real verifier.
#include "support/daemon_harness.hpp"

#include <csignal>
#include <fstream>
#include <string>
#include <vector>

#include <boost/json/parse.hpp>
#include <gtest/gtest.h>

namespace keval::test::daemon {
namespace {

constexpr const char* kVerifierWorkerStart = R"(#!/usr/bin/env python3
import json, os, struct, sys, time
args = sys.argv[1:]
if "--devices" in args:
    print(json.dumps({"devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3",
                                   "gpu_type": "H100", "arch": 90, "memory_bytes": 80 << 30}]}))
    sys.exit(0)
if "--device-verifier" in args:
    token = sys.stdin.readline().strip()
    with open(os.environ["FAKE_TOKENS"], "a") as f:
        f.write(token + "\n")
    print(json.dumps({"ready": True, "socket": "@keval-verifier-fake", "open_ms": 1.5}), flush=True)
    sys.stdin.read()  # serves until the daemon closes its input
    sys.exit(0)
if "--protocol-fd" not in args:
    real = os.environ["KEVAL_REAL_WORKER"]
    os.execv(real, [real] + args)
)";

constexpr const char* kRecordingJob = R"(
send({"type": "hello", "worker_version": "fake", "pid": os.getpid()})
job = receive()
if job.get("type") == "taken":
    job = receive()
grant = compiled_then_granted()
with open(os.environ["FAKE_GRANTS"], "a") as f:
    f.write(json.dumps({"job_says": job.get("device_verifier"), "grant": grant}) + "\n")
validated_and_profiled()
send({"type": "done"})
)";

class DaemonDeviceVerifier : public ::testing::Test {
protected:
  void start(std::vector<std::string> args, const std::string& verifier_env = "0") {
    const fs::path worker =
        write_scripted_worker(scratch_.path(), kVerifierWorkerStart, kRecordingJob);
    args.insert(args.end(), {"--warm-workers", "0"});
    daemon_.emplace(dirs_.state(), dirs_.socket(), args,
                    std::vector<std::string>{"KEVAL_WORKER=" + worker.string(),
                                             "KEVAL_REAL_WORKER=" + worker_exe().string(),
                                             "FAKE_GRANTS=" + grants_file().string(),
                                             "FAKE_TOKENS=" + tokens_file().string(),
                                             "KEVAL_DEVICE_VERIFIER=" + verifier_env});
    ASSERT_TRUE(daemon_->wait_ready()) << daemon_->log_tail();
  }

  fs::path grants_file() const { return scratch_.path() / "grants"; }
  fs::path tokens_file() const { return scratch_.path() / "tokens"; }
  std::vector<std::string> lines(const fs::path& file) const {
    std::vector<std::string> out;
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);)
      out.push_back(line);
    return out;
  }
  // The job frame's and the grant's verifier fields, as the last job's worker saw them.
  json::object run_job() {
    const auto r = HttpClient(dirs_.socket()).post("/evaluate", fault_evaluate({}));
    EXPECT_EQ(r.status, 200u) << r.body() << daemon_->log_tail();
    const std::vector<std::string> seen = lines(grants_file());
    if (seen.empty())
      return {};
    return json::parse(seen.back()).as_object();
  }
  json::object verifiers() const {
    return HttpClient(dirs_.socket()).get("/health").json_body().at("device_verifiers").as_object();
  }

  TempDir scratch_;
  DaemonDirs dirs_;
  std::optional<DaemonProcess> daemon_;
};

TEST_F(DaemonDeviceVerifier, TheGrantNamesItsGpusVerifierAndOnlyTheTrustedWorkerSeesTheToken) {
  start({"--device-verifier"});
  const json::object status = verifiers();
  ASSERT_EQ(status.at("enabled"), true) << json::serialize(status);
  const json::object& gpu = status.at("gpus").at("0").as_object();
  EXPECT_EQ(gpu.at("ready"), true);
  EXPECT_EQ(gpu.at("socket"), "@keval-verifier-fake");
  EXPECT_EQ(gpu.at("starts"), 1);
  const std::vector<std::string> tokens = lines(tokens_file());
  ASSERT_EQ(tokens.size(), 1u);
  EXPECT_EQ(tokens[0].size(), 64u);
  EXPECT_EQ(tokens[0].find_first_not_of("0123456789abcdef"), std::string::npos) << tokens[0];
  EXPECT_EQ(json::serialize(status).find(tokens[0]), std::string::npos) << "/health shows it";

  const json::object seen = run_job();
  EXPECT_EQ(seen.at("job_says"), true) << json::serialize(seen);
  const json::object& grant = seen.at("grant").as_object();
  EXPECT_EQ(grant.at("verifier"),
            (json::object{{"socket", "@keval-verifier-fake"}, {"token", tokens[0]}}));
  // What the runners are handed (the grant's `device`) holds neither.
  const std::string device = json::serialize(grant.at("device"));
  EXPECT_EQ(device.find(tokens[0]), std::string::npos) << device;
  EXPECT_EQ(device.find("verifier"), std::string::npos) << device;
}

TEST_F(DaemonDeviceVerifier, OneThatEndsIsStartedAgainWithANewToken) {
  start({"--device-verifier"});
  const auto pid = static_cast<pid_t>(verifiers().at("gpus").at("0").at("pid").as_int64());
  const std::string first_token = lines(tokens_file()).at(0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  // A job meanwhile is granted the GPU with the new verifier or with none (its worker then opens
  // a context of its own), never with the dead one's token.
  const json::object meanwhile = run_job();
  if (const json::value* named = meanwhile.at("grant").as_object().if_contains("verifier"))
    EXPECT_NE(named->at("token"), json::value(first_token)) << json::serialize(meanwhile);
  // The daemon watches its verifiers: this one is started again without another job.
  json::object gpu;
  ASSERT_TRUE(eventually(
      [&] {
        gpu = verifiers().at("gpus").at("0").as_object();
        return gpu.at("ready") == true && gpu.at("starts").as_int64() == 2;
      },
      std::chrono::seconds(20)))
      << json::serialize(gpu) << daemon_->log_tail();
  EXPECT_NE(gpu.at("pid").as_int64(), pid);
  const std::vector<std::string> tokens = lines(tokens_file());
  ASSERT_EQ(tokens.size(), 2u);
  EXPECT_NE(tokens[0], tokens[1]);
  const json::object after = run_job();
  EXPECT_EQ(after.at("grant").at("verifier").at("token"), json::value(tokens[1]))
      << json::serialize(after);
}

TEST_F(DaemonDeviceVerifier, TheEnvironmentCanTurnItOnByDefault) {
  start({}, "1");
  EXPECT_EQ(verifiers().at("gpus").at("0").at("ready"), true);
  EXPECT_EQ(run_job().at("grant").at("verifier").at("socket"), "@keval-verifier-fake");
}

TEST_F(DaemonDeviceVerifier, NoneIsStartedOrNamedUnlessAskedFor) {
  start({});
  EXPECT_EQ(verifiers(),
            (json::object{{"enabled", false}, {"reason", "not asked for (--device-verifier)"}}));
  EXPECT_TRUE(lines(tokens_file()).empty());
  const json::object seen = run_job();
  EXPECT_TRUE(seen.at("job_says").is_null()) << json::serialize(seen);
  EXPECT_FALSE(seen.at("grant").as_object().contains("verifier")) << json::serialize(seen);
}

} // namespace
} // namespace keval::test::daemon
