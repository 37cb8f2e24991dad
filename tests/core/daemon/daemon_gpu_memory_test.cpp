// The pools of prestarted workers are bounded by GPU memory (supervisor/gpu_memory.hpp), through
// the daemon: its workers are a script (KEVAL_WORKER) that reports one fake GPU and, in its hello
// (a prestarted worker) and its done, the GPU's memory as a file the test writes says. Everything
// else the daemon asks of a worker (plugin descriptions, the sandbox probe) goes to the real
// keval-worker.
#include "support/daemon_harness.hpp"

#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace keval::test::daemon {
namespace {

// Its job, after kScriptedWorkerProtocol: the GPU's memory in its hello (prestarted) and its done.
constexpr const char* kFakeWorkerJob = R"(
def memory():  # read now: the test changes it between jobs
    with open(os.environ["FAKE_FREE_GIB"]) as f:
        free = int(f.read())
    return {"gpu": "0000:01:00.0", "free_bytes": free << 30, "total_bytes": 80 << 30}
hello = {"type": "hello", "worker_version": "fake", "pid": os.getpid()}
if "--prewarm" in args:  # prestarted: it opened the GPU ahead, and says what was left of it
    hello["device_memory"] = memory()
send(hello)
job = receive()
if job.get("type") == "taken":
    job = receive()
compiled_then_granted()
validated_and_profiled()
send({"type": "done", "device_memory": memory()})
)";

class DaemonGpuMemory : public ::testing::Test {
protected:
  DaemonGpuMemory() {
    const fs::path worker =
        write_scripted_worker(scratch_.path(), kOneFakeGpuWorkerStart, kFakeWorkerJob);
    set_free_gib(20);
    daemon_.emplace(dirs_.state(), dirs_.socket(),
                    std::vector<std::string>{"--warm-workers", "1", "--warm-workers-max", "4"},
                    std::vector<std::string>{"KEVAL_WORKER=" + worker.string(),
                                             "KEVAL_REAL_WORKER=" + worker_exe().string(),
                                             "FAKE_FREE_GIB=" + free_file().string()});
  }
  void SetUp() override { ASSERT_TRUE(daemon_->wait_ready()) << daemon_->log_tail(); }

  fs::path free_file() const { return scratch_.path() / "free_gib"; }
  void set_free_gib(int gib) const { std::ofstream(free_file()) << gib; }

  // One job, to its end; its response.
  json::value run_job() const {
    const auto r = HttpClient(dirs_.socket()).post("/evaluate", fault_evaluate({}));
    EXPECT_EQ(r.status, 200u) << r.body() << daemon_->log_tail();
    return r.json_body();
  }
  json::object warm() const {
    return HttpClient(dirs_.socket()).get("/stats").json_body().at("warm_workers").as_object();
  }

  TempDir scratch_;
  DaemonDirs dirs_;
  std::optional<DaemonProcess> daemon_;
};

// A set's first job readies the pool for a burst (4) while nothing says the GPU is short. Once a
// prestarted worker's job has said its GPU has a quarter free, the pool keeps its size (1) and
// lets the rest go; once a job finds it three-quarters free again, the pool is readied again.
TEST_F(DaemonGpuMemory, APoolKeepsItsSizeWhileItsGpuIsShortAndGrowsBackOnceItIsNot) {
  run_job(); // a fresh worker's: readies 4; its reading alone (no idle worker there yet) holds
             // nothing back
  EXPECT_EQ(warm().at("ready"), 4) << json::serialize(warm());
  const json::value second = run_job(); // a prestarted worker: its GPU is one idle workers hold
  const auto& memory =
      second.at("kernel_exec_result").at("metadata").at("worker").at("device_memory");
  EXPECT_EQ(memory.at("free_bytes").to_number<uint64_t>(), 20ull << 30) << json::serialize(memory);
  EXPECT_EQ(warm().at("ready"), 4) << json::serialize(warm());
  const json::array readings = warm().at("gpu_memory").as_array();
  ASSERT_EQ(readings.size(), 1u) << json::serialize(warm());
  EXPECT_EQ(readings[0].at("gpu"), "0000:01:00.0");
  EXPECT_DOUBLE_EQ(readings[0].at("free_fraction").as_double(), 0.25);
  EXPECT_TRUE(readings[0].at("prestarted_workers_open").as_bool());

  run_job(); // its take sees the GPU short: the pool goes back to its size
  json::object stats = warm();
  EXPECT_EQ(stats.at("ready"), 1) << json::serialize(stats);
  EXPECT_GE(stats.at("held_back_by_gpu_memory_total").to_number<int64_t>(), 1);
  EXPECT_EQ(stats.at("held_back_by_memory_total"), 0);

  set_free_gib(60);
  run_job(); // still short when it starts; its end finds three-quarters free
  EXPECT_EQ(warm().at("ready"), 1) << json::serialize(warm());
  run_job();
  stats = warm();
  EXPECT_EQ(stats.at("ready"), 4) << json::serialize(stats);
  EXPECT_DOUBLE_EQ(stats.at("gpu_memory").at(0).at("free_fraction").as_double(), 0.75);
}

} // namespace
} // namespace keval::test::daemon
