// One daemon drives every GPU of its host (issue 17), tested without GPUs: the daemon is given a
// worker (KEVAL_WORKER) that reports two fake GPUs, an H100 and an A100 (two H100s for
// DaemonTwoGpus), and answers jobs by script, recording the device each job was granted.
// Everything else the daemon asks of a worker (plugin descriptions, the sandbox probe) goes to
// the real keval-worker.
#include "support/daemon_harness.hpp"

#include <csignal>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace keval::test::daemon {
namespace {

// A job's worker: hello, then the job; compiled; need_device; the grant. When the request's
// kernel.metadata asks for a `barrier` of N, it waits (at most 20 s) until N jobs hold a device
// at once before it goes on, and fails the job (fatal) if they never do: a daemon that served
// its GPUs one job at a time cannot pass it.
constexpr const char* kFakeWorkerStart = R"(#!/usr/bin/env python3
import json, os, struct, sys, time
args = sys.argv[1:]
if "--devices" in args:
    gib = 1 << 30
    print(json.dumps({"devices": [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "gpu_type": "H100", "arch": 90,
         "memory_bytes": 80 * gib},
        {"index": 1, "name": "NVIDIA A100-SXM4-80GB", "gpu_type": "A100", "arch": 80,
         "memory_bytes": 80 * gib}]}))
    sys.exit(0)
if "--hold-driver" in args:  # held until the daemon closes our input; then it says so
    print(json.dumps({"held": True, "init_ms": 7.5}), flush=True)
    sys.stdin.read()
    with open(os.path.join(os.environ["FAKE_DRIVER_DIR"], "released"), "w") as f:
        f.write(str(os.getpid()))
    sys.exit(0)
if "--protocol-fd" not in args or "--prewarm" in args:
    real = os.environ["KEVAL_REAL_WORKER"]
    os.execv(real, [real] + args)
)";

// Its job, after kScriptedWorkerProtocol.
constexpr const char* kFakeWorkerJob = R"(
send({"type": "hello", "worker_version": "fake", "pid": os.getpid()})
job = receive()
metadata = job["request"].get("kernel", {}).get("metadata", {})
grant = compiled_then_granted(metadata.get("opened_cuda"))
def log(event):  # written beside the directory, then renamed in: a reader never sees half of it
    name = "%d-%s" % (os.getpid(), event)
    partial = os.path.join(os.environ["FAKE_LOG_DIR"] + ".partial", name)
    with open(partial, "w") as f:
        f.write(json.dumps({"at": time.time(), "job": metadata.get("name", ""), "grant": grant}))
    os.rename(partial, os.path.join(os.environ["FAKE_LOG_DIR"], name))
def logged(suffix):
    return [name for name in os.listdir(os.environ["FAKE_LOG_DIR"]) if name.endswith(suffix)]
log("granted")
if grant.get("quiet", True) is False:  # the GPU's last job is still ending: time nothing yet
    quiet = receive()
    if quiet.get("type") != "device_quiet":
        send({"type": "fatal", "message": "expected device_quiet, got " + json.dumps(quiet)})
        sys.exit(1)
    log("quiet")
holding = os.path.join(os.environ["FAKE_GPU_DIR"], "holding-%d" % os.getpid())
open(holding, "w").write(json.dumps(grant["device"]))
deadline = time.monotonic() + 20
while len(os.listdir(os.environ["FAKE_GPU_DIR"])) < metadata.get("barrier", 1):
    if time.monotonic() > deadline:
        send({"type": "fatal", "message": "the other jobs never held a device at the same time"})
        sys.exit(1)
    time.sleep(0.01)
validated_and_profiled()
if metadata.get("handover_ms"):  # its processes stopped for good: the GPU may go on; it ends later
    send({"type": "device_handover"})
    log("handed_over")
    # It ends only once the next job holds the GPU (however slowly that one's worker started), so
    # the grant provably came while this job was ending; then a while longer, so quiet can be late.
    deadline = time.monotonic() + 20
    while len(logged("-granted")) < 2:
        if time.monotonic() > deadline:
            send({"type": "fatal", "message": "the next job was never granted the GPU"})
            sys.exit(1)
        time.sleep(0.01)
    time.sleep(metadata["handover_ms"] / 1000)
    log("exiting")
send({"type": "done"})
)";

// The start of a worker that reports two GPUs of one type, so that every job fits both.
constexpr const char* kTwoH100Start = R"(#!/usr/bin/env python3
import json, os, struct, sys, time
args = sys.argv[1:]
if "--devices" in args:
    gpu = {"name": "NVIDIA H100 80GB HBM3", "gpu_type": "H100", "arch": 90, "memory_bytes": 1 << 36}
    print(json.dumps({"devices": [dict(gpu, index=0), dict(gpu, index=1)]}))
    sys.exit(0)
if "--protocol-fd" not in args or "--prewarm" in args:
    real = os.environ["KEVAL_REAL_WORKER"]
    os.execv(real, [real] + args)
)";

// A daemon whose worker (KEVAL_WORKER) is `start` then kFakeWorkerJob.
class ScriptedGpus : public ::testing::Test {
protected:
  explicit ScriptedGpus(const char* start) {
    const fs::path worker = write_scripted_worker(scratch_.path(), start, kFakeWorkerJob);
    fs::create_directories(holding());
    fs::create_directories(events());
    fs::create_directories(events().string() + ".partial");
    daemon_.emplace(dirs_.state(), dirs_.socket(),
                    std::vector<std::string>{"--warm-workers", "0", "--max-workers", "4"},
                    std::vector<std::string>{"KEVAL_WORKER=" + worker.string(),
                                             "KEVAL_REAL_WORKER=" + worker_exe().string(),
                                             "FAKE_GPU_DIR=" + holding().string(),
                                             "FAKE_LOG_DIR=" + events().string(),
                                             "FAKE_DRIVER_DIR=" + scratch_.path().string()});
  }
  void SetUp() override { ASSERT_TRUE(daemon_->wait_ready()) << daemon_->log_tail(); }

  fs::path holding() const { return scratch_.path() / "holding"; }
  fs::path events() const { return scratch_.path() / "events"; } // "<pid>-<event>": {at, job}

  // Each job's events by the name its request gave it: event -> (time, grant).
  std::map<std::string, std::map<std::string, json::object>> events_by_job() const {
    std::map<std::string, std::map<std::string, json::object>> out;
    for (const auto& entry : fs::directory_iterator(events())) {
      const std::string name = entry.path().filename().string();
      const json::object event = json::parse(read_file(entry.path())).as_object();
      out[std::string(event.at("job").as_string())][name.substr(name.find('-') + 1)] = event;
    }
    return out;
  }
  fs::path socket() const { return dirs_.socket(); }

  TempDir scratch_;
  DaemonDirs dirs_;
  std::optional<DaemonProcess> daemon_;
};

class DaemonMultiGpu : public ScriptedGpus {
protected:
  DaemonMultiGpu() : ScriptedGpus(kFakeWorkerStart) {}
};

class DaemonTwoGpus : public ScriptedGpus {
protected:
  DaemonTwoGpus() : ScriptedGpus(kTwoH100Start) {}
};

TEST_F(DaemonMultiGpu, HealthListsEveryGpu) {
  const auto health = HttpClient(socket()).get("/health").json_body();
  const auto& gpus = health.at("gpus").as_array();
  ASSERT_EQ(gpus.size(), 2u) << json::serialize(health);
  EXPECT_EQ(gpus[0].at("type"), "H100");
  EXPECT_EQ(gpus[1].at("type"), "A100");
}

// The daemon keeps the driver initialised in one process of its own (daemon/driver_hold.hpp) from
// its start to its stop: the orphan reaper, which kills every child that is not the daemon's own
// as each job ends, leaves it alone, and an orderly stop ends it through its input, then reaps it.
TEST_F(DaemonMultiGpu, OneProcessHoldsTheDriverFromStartToStop) {
  const auto driver = [&] {
    return HttpClient(socket()).get("/health").json_body().at("driver").as_object();
  };
  const json::object at_start = driver();
  ASSERT_EQ(at_start.at("held"), true) << json::serialize(at_start) << daemon_->log_tail();
  EXPECT_EQ(at_start.at("init_ms"), 7.5);
  const auto holder = static_cast<pid_t>(at_start.at("pid").as_int64());
  EXPECT_EQ(::kill(holder, 0), 0);
  const auto r = HttpClient(socket()).post("/evaluate", fault_evaluate(json::object{}));
  ASSERT_EQ(r.status, 200u) << r.body() << daemon_->log_tail();
  EXPECT_EQ(driver(), at_start) << daemon_->log_tail();
  daemon_->signal(SIGTERM);
  ASSERT_TRUE(daemon_->wait_exit(std::chrono::seconds(60))) << daemon_->log_tail();
  EXPECT_EQ(read_file(scratch_.path() / "released"), std::to_string(holder));
  EXPECT_NE(::kill(holder, 0), 0) << "the holder outlived the daemon";
}

TEST_F(DaemonMultiGpu, JobsHoldEveryGpuAtOnce) {
  std::vector<std::string> ids;
  for (int k = 0; k < 2; ++k) {
    const auto r = HttpClient(socket()).post(
        "/evaluate", with_async(fault_evaluate(json::object{{"barrier", 2}})));
    ASSERT_EQ(r.status, 202u) << r.body();
    ids.emplace_back(r.json_body().at("job_id").as_string());
  }
  std::set<int64_t> indices;
  for (const auto& id : ids) {
    const auto view = wait_finished(socket(), id, std::chrono::seconds(60));
    EXPECT_EQ(view.at("status"), "completed") << json::serialize(view) << daemon_->log_tail();
    indices.insert(view.at("device").at("index").as_int64());
  }
  EXPECT_EQ(indices, (std::set<int64_t>{0, 1}));
  const auto stats = HttpClient(socket()).get("/stats").json_body();
  for (const auto& gpu : stats.at("gpus").as_array()) {
    EXPECT_EQ(gpu.at("grants_total"), 1) << json::serialize(gpu);
    EXPECT_EQ(gpu.at("jobs_holding"), 0) << json::serialize(gpu);
  }
}

// A job that hands its GPU over (device_handover) lets the next job have it at once, told it is
// not quiet; that job hears device_quiet only once the one handing over has exited. Both ask for
// the H100, so they queue for one GPU. The first exits only after the second is granted (a daemon
// that granted only after the exit fails the first job), whatever the second's start costs. The
// wait for quiet is not the second job's time: the first ends 2.5 s after that grant, and the
// second's whole timeout is 2 s.
TEST_F(DaemonMultiGpu, AHandedOverGpuGoesOnAtOnceAndIsQuietOnlyOnceTheLastJobHasExited) {
  const auto submit = [&](json::object metadata, double timeout_s) {
    const auto r = HttpClient(socket()).post(
        "/evaluate", with_async(fault_evaluate(metadata, timeout_s)), {{"X-GPU-Type", "H100"}});
    EXPECT_EQ(r.status, 202u) << r.body();
    return std::string(r.json_body().at("job_id").as_string());
  };
  const std::string first = submit(json::object{{"name", "first"}, {"handover_ms", 2500}}, 60);
  // The second asks only once the first holds the GPU, so it waits for that GPU.
  ASSERT_TRUE(eventually([&] { return events_by_job()["first"].contains("granted"); },
                         std::chrono::seconds(30)))
      << daemon_->log_tail();
  const std::string second = submit(json::object{{"name", "second"}}, 2);
  for (const auto& id : {first, second}) {
    const auto view = wait_finished(socket(), id, std::chrono::seconds(60));
    EXPECT_EQ(view.at("status"), "completed") << json::serialize(view) << daemon_->log_tail();
  }
  auto events = events_by_job();
  auto& a = events["first"];
  auto& b = events["second"];
  ASSERT_TRUE(a.contains("handed_over") && a.contains("exiting")) << daemon_->log_tail();
  ASSERT_TRUE(a.contains("granted") && b.contains("granted")) << daemon_->log_tail();
  const auto at = [](const json::object& event) { return event.at("at").to_number<double>(); };
  EXPECT_EQ(a.at("granted").at("grant").at("handover"), true);
  EXPECT_FALSE(a.at("granted").at("grant").as_object().contains("quiet"));
  // Granted while the first was ending, not after it.
  EXPECT_EQ(b.at("granted").at("grant").at("quiet"), false) << json::serialize(b.at("granted"));
  EXPECT_GE(at(b.at("granted")), at(a.at("handed_over")));
  EXPECT_LT(at(b.at("granted")), at(a.at("exiting")));
  // Quiet only once the first had gone.
  ASSERT_TRUE(b.contains("quiet")) << daemon_->log_tail();
  EXPECT_GE(at(b.at("quiet")), at(a.at("exiting")));
  const auto stats = HttpClient(socket()).get("/stats").json_body();
  EXPECT_EQ(stats.at("gpus").at(0).at("jobs_handing_over"), 0) << json::serialize(stats);
}

TEST_F(DaemonMultiGpu, AJobAskingForAGpuTypeGetsThatGpu) {
  for (const char* type : {"A100", "H100", "A100"}) {
    const auto r = HttpClient(socket()).post("/evaluate", fault_evaluate(json::object{}),
                                             {{"X-GPU-Type", type}});
    ASSERT_EQ(r.status, 200u) << r.body() << daemon_->log_tail();
    EXPECT_EQ(r.header("X-GPU-Type"), type);
    const auto view =
        HttpClient(socket()).get("/jobs/" + std::string(r.json_body().at("job_id").as_string()));
    EXPECT_EQ(view.json_body().at("device").at("gpu_type"), type) << view.body();
    EXPECT_EQ(view.json_body().at("device").at("index"), std::string(type) == "A100" ? 1 : 0);
  }
  // A type this host does not have is refused before any worker starts.
  const auto r = HttpClient(socket()).post("/evaluate", fault_evaluate(json::object{}),
                                           {{"X-GPU-Type", "H200"}});
  EXPECT_EQ(r.status, 400u) << r.body();
}

// A job whose worker opened one GPU ahead (its need_device says which) is granted that one,
// though the other is as idle (daemon/device_pool.hpp).
TEST_F(DaemonTwoGpus, AJobIsGrantedTheGpuItsWorkerOpenedAhead) {
  for (const int opened : {1, 0, 1}) {
    const auto r = HttpClient(socket()).post("/evaluate",
                                             fault_evaluate(json::object{{"opened_cuda", opened}}));
    ASSERT_EQ(r.status, 200u) << r.body() << daemon_->log_tail();
    const auto view = HttpClient(socket())
                          .get("/jobs/" + std::string(r.json_body().at("job_id").as_string()))
                          .json_body();
    EXPECT_EQ(view.at("device").at("index"), opened) << json::serialize(view);
  }
}

} // namespace
} // namespace keval::test::daemon
