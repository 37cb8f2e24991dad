// Issue 17: a job hands its GPU over once every process of its user code is stopped for good,
// so that the next job validates while the driver tears the last one's contexts down; nothing is
// timed on the GPU until the job handing it over is gone. Several cuda compares go through one
// daemon at once, and no job's timed samples overlap another job's hold on the GPU (from its
// grant until its processes are all gone), while some job did validate beside another's end. On a
// host with several GPUs, jobs on different GPUs are not each other's concern.
// Skipped, with the reason, without a usable CUDA device.
#include "adversarial_support.hpp"
#include "support/cuda_device.hpp"

#include <thread>

namespace keval::test::adversarial {
namespace {

// A job's hold on its GPU and its timed window, on the host's clock (ms since the epoch).
struct Hold {
  std::string id;
  std::string gpu;                     // its PCI bus id: on a host with several, jobs share none
  double granted = 0, ended = 0;       // its grant, and its processes all gone
  double timed_from = 0, timed_to = 0; // its first timed run (after device_quiet) to its last
  bool handed_over = false, waited_quiet = false;
};

Hold hold_of(const json::object& body) {
  const auto& worker = exec_result(body).at("metadata").at("worker").as_object();
  const auto& timeline = worker.at("timeline_ms").as_object();
  // The worker's receipt of the job, on the clock it shares with the other jobs' workers. (The
  // host's send of it is earlier by a moment that varies from job to job, more than the margins
  // here on a busy machine.)
  const double origin = worker.at("timeline_origin_unix_ms").to_number<double>();
  const auto at = [&](const char* step) { return origin + timeline.at(step).to_number<double>(); };
  Hold h;
  h.id = std::string(body.at("job_id").as_string());
  h.gpu = text(exec_result(body).at("metadata").at("device").at("pci_bus_id"));
  h.granted = at("granted");
  h.ended = at("ended");
  h.waited_quiet = timeline.contains("quiet");
  h.timed_from = h.waited_quiet ? at("quiet") : at("validated");
  h.timed_to = at("profiled");
  h.handed_over = timeline.contains("handed_over");
  return h;
}

class GpuHandover : public ::testing::Test {
protected:
  void SetUp() override {
    KEVAL_SKIP_WITHOUT_CUDA_DEVICE();
    if (built_registry().find("cuda") == nullptr)
      GTEST_SKIP() << "the cuda plugin was not built";
  }
};

TEST_F(GpuHandover, NoJobIsTimedWhileAnotherHoldsTheGpuAndTheNextValidatesBesideTheLastsEnd) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ready()) << daemon.log();
  constexpr int kJobs = 6;
  const json::value io = vector_add_io_of(1 << 20);
  std::vector<json::object> bodies(kJobs);
  std::vector<std::string> errors(kJobs);
  {
    std::vector<std::thread> clients;
    for (int i = 0; i < kJobs; ++i)
      clients.emplace_back([&, i] {
        try {
          bodies[i] = body_of(daemon.post(
              "/compare", compare_request(kernel("cuda", source("reference_vector_add.cu"), io),
                                          kernel("cuda", source("reference_vector_add.cu"), io),
                                          unique_id("handover"), 30)));
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    for (auto& client : clients)
      client.join();
  }
  std::vector<Hold> holds;
  for (int i = 0; i < kJobs; ++i) {
    ASSERT_TRUE(errors[i].empty()) << errors[i] << "\n" << daemon.log();
    ASSERT_TRUE(correctness(bodies[i])) << shown(bodies[i]);
    holds.push_back(hold_of(bodies[i]));
  }
  // Every time here is a step its worker took on one machine's clock, in the order the protocol
  // imposes (a job's last sample, its handover, the next one's grant), so no margin is needed.
  for (const Hold& timed : holds)
    for (const Hold& other : holds) {
      if (&timed == &other || timed.gpu != other.gpu)
        continue;
      EXPECT_FALSE(timed.timed_from < other.ended && other.granted < timed.timed_to)
          << timed.id << " was timed from " << timed.timed_from << " to " << timed.timed_to
          << " while " << other.id << " held the GPU from " << other.granted << " to "
          << other.ended;
    }
  // Else this proved nothing about a handover: some job handed the GPU over, and some job was
  // granted it meanwhile and waited to be told it was quiet.
  const auto any = [&](auto pred) { return std::any_of(holds.begin(), holds.end(), pred); };
  EXPECT_TRUE(any([](const Hold& h) { return h.handed_over; })) << daemon.log();
  EXPECT_TRUE(any([](const Hold& h) { return h.waited_quiet; })) << daemon.log();
  const auto gpus = body_of(daemon::HttpClient(daemon.socket()).get("/stats")).at("gpus");
  for (const auto& gpu : gpus.as_array())
    EXPECT_EQ(gpu.at("jobs_handing_over"), 0) << shown(gpus);
}

} // namespace
} // namespace keval::test::adversarial
