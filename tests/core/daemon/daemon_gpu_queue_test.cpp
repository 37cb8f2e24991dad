// While jobs queue for the GPU, the pools of prestarted workers grow no further (supervisor/
// warm_pool.hpp, gpus_backlogged), through the daemon: its workers are a script (KEVAL_WORKER)
// that reports one fake GPU and, once granted it, holds it for as long as a file the test writes
// exists. Everything else the daemon asks of a worker (plugin descriptions, the sandbox probe)
// goes to the real keval-worker.
#include "support/daemon_harness.hpp"

#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace keval::test::daemon {
namespace {

// Its job, after kScriptedWorkerProtocol: granted the GPU, it holds it while the hold file exists
// (bounded: a test that fails to remove it does not leave workers behind for long).
constexpr const char* kHoldingWorkerJob = R"(
send({"type": "hello", "worker_version": "fake", "pid": os.getpid()})
job = receive()
if job.get("type") == "taken":
    job = receive()
compiled_then_granted()
deadline = time.monotonic() + 60
while os.path.exists(os.environ["FAKE_HOLD"]) and time.monotonic() < deadline:
    time.sleep(0.005)
validated_and_profiled()
send({"type": "done"})
)";

class DaemonGpuQueue : public ::testing::Test {
protected:
  DaemonGpuQueue() {
    const fs::path worker =
        write_scripted_worker(scratch_.path(), kOneFakeGpuWorkerStart, kHoldingWorkerJob);
    daemon_.emplace(dirs_.state(), dirs_.socket(),
                    std::vector<std::string>{"--warm-workers", "1", "--warm-workers-max", "4"},
                    std::vector<std::string>{"KEVAL_WORKER=" + worker.string(),
                                             "KEVAL_REAL_WORKER=" + worker_exe().string(),
                                             "FAKE_HOLD=" + hold_file().string()});
  }
  void SetUp() override { ASSERT_TRUE(daemon_->wait_ready()) << daemon_->log_tail(); }
  void TearDown() override { fs::remove(hold_file()); }

  fs::path hold_file() const { return scratch_.path() / "hold"; }

  std::string submit() const {
    const auto r = HttpClient(dirs_.socket()).post("/evaluate", with_async(fault_evaluate({})));
    EXPECT_EQ(r.status, 202u) << r.body() << daemon_->log_tail();
    return std::string(r.json_body().at("job_id").as_string());
  }
  json::object stats() const { return HttpClient(dirs_.socket()).get("/stats").json_body(); }
  int64_t waiting_for_device() const {
    return stats().at("jobs").at("waiting_for_device").to_number<int64_t>();
  }

  TempDir scratch_;
  DaemonDirs dirs_;
  std::optional<DaemonProcess> daemon_;
};

// A set's first job readies the pool for a burst (4). With the GPU held and a job waiting for it,
// the next job's take leaves the pool one short of what it was instead of refilling it; the jobs
// all end once the GPU is let go.
TEST_F(DaemonGpuQueue, APoolGrowsNoFurtherWhileAJobWaitsForTheGpu) {
  const auto first = HttpClient(dirs_.socket()).post("/evaluate", fault_evaluate({}));
  ASSERT_EQ(first.status, 200u) << first.body() << daemon_->log_tail();
  ASSERT_EQ(stats().at("warm_workers").at("ready"), 4) << json::serialize(stats());

  std::ofstream(hold_file()) << "held";
  const std::string holder = submit();
  ASSERT_TRUE(eventually([&] {
    return stats().at("gpus").at(0).at("jobs_holding").to_number<int64_t>() == 1;
  })) << json::serialize(stats());
  const std::string queued = submit();
  ASSERT_TRUE(eventually([&] { return waiting_for_device() == 1; })) << json::serialize(stats());
  json::object warm = stats().at("warm_workers").as_object();
  EXPECT_EQ(warm.at("ready"), 4) << "no queue when they came: both takes refilled the pool";
  EXPECT_EQ(warm.at("held_back_by_gpu_queue_total"), 0) << json::serialize(warm);

  const std::string third = submit(); // its take sees one job waiting for the one GPU
  ASSERT_TRUE(eventually([&] { return waiting_for_device() == 2; })) << json::serialize(stats());
  warm = stats().at("warm_workers").as_object();
  EXPECT_EQ(warm.at("ready"), 3) << json::serialize(warm);
  EXPECT_GE(warm.at("held_back_by_gpu_queue_total").to_number<int64_t>(), 1)
      << json::serialize(warm);
  EXPECT_EQ(warm.at("held_back_by_gpu_memory_total"), 0);
  EXPECT_EQ(warm.at("held_back_by_memory_total"), 0);

  fs::remove(hold_file());
  for (const std::string& id : {holder, queued, third})
    EXPECT_EQ(wait_finished(dirs_.socket(), id).at("status"), "completed") << id;
}

} // namespace
} // namespace keval::test::daemon
