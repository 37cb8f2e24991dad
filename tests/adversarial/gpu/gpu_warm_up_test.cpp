// Issue 17: a prestarted worker warms its GPU up before its job comes (SDK 1.4 warm_device:
// torch's set-up on the device and its common kernels' first launches, which a job would
// otherwise pay while it holds the GPU), and only while no job is timed on that GPU: the GPU's
// timing turn (worker/engine/device_turn.hpp) is held by each job from its first timed sample to
// its stop, and by each warm-up. Torch compares go through one daemon from several clients at
// once: every runner's warm-up that ran lies outside every job's timed window, some warm-up did
// run and warmed torch, and every honest compare passes. Windows on different GPUs of one host do
// not count against each other. Skipped, with the reason,
// without a usable CUDA device or torch.
#include "adversarial_support.hpp"
#include "support/cuda_device.hpp"
#include "support/scoped_env.hpp"

#include <thread>

namespace keval::test::adversarial {
namespace {

// A window on the host's clock, in ms since the epoch.
struct Window {
  std::string what;
  double from = 0, to = 0;
  std::string gpu; // its PCI bus id: a warm-up on another GPU is not the job's concern
};

// The warm-up of the worker that ran the job, when it has one.
const json::object* warm_up_of(const json::object& body) {
  const auto& worker = exec_result(body).at("metadata").at("worker").as_object();
  const json::value* prewarm = worker.if_contains("prewarm");
  if (prewarm == nullptr || !prewarm->as_object().contains("device_warm_up"))
    return nullptr;
  return &prewarm->at("device_warm_up").as_object();
}

// Each runner's warm-up that ran: its hold on the GPU's timing turn.
std::vector<Window> warm_up_windows(const json::object& body, const std::string& job) {
  std::vector<Window> windows;
  if (const json::object* warm_up = warm_up_of(body); warm_up && warm_up->contains("sides"))
    for (const auto& [side, one] : warm_up->at("sides").as_object())
      windows.push_back(
          Window{"the " + std::string(side) + " runner's warm-up of " + job + "'s worker",
                 one.at("from_unix_ms").to_number<double>(),
                 one.at("to_unix_ms").to_number<double>(), text(warm_up->at("gpu"))});
  return windows;
}

// The job's timed window: from its timing turn to its stop (the turn's release). The timeline
// counts from the worker's receipt of the job (after its warm-up when the job came while a runner
// warmed up: the worker reads it then), on the clock the warm-ups are stamped with.
std::optional<Window> timed_window(const json::object& body) {
  const auto& worker = exec_result(body).at("metadata").at("worker").as_object();
  const auto& timeline = worker.at("timeline_ms").as_object();
  if (!timeline.contains("timing_turn") || !timeline.contains("stopping"))
    return std::nullopt;
  const std::string job = "job " + text(body.at("job_id"));
  const double origin = worker.at("timeline_origin_unix_ms").to_number<double>();
  return Window{job, origin + timeline.at("timing_turn").to_number<double>(),
                origin + timeline.at("stopping").to_number<double>(),
                text(exec_result(body).at("metadata").at("device").at("pci_bus_id"))};
}

class GpuWarmUp : public ::testing::Test {
protected:
  void SetUp() override {
    KEVAL_SKIP_WITHOUT_CUDA_DEVICE();
    if (!torch_problem().empty())
      GTEST_SKIP() << torch_problem();
  }
};

TEST_F(GpuWarmUp, NoWarmUpRunsWhileAJobIsTimedAndTheWarmedWorkersJudgeHonestly) {
  // Warm-ups wait for a GPU idle a while (250 ms) by default, which a test's jobs back to back
  // seldom leave: here they start as soon as no job holds the GPU, the closest they come to the
  // jobs' timed samples.
  const ScopedEnv no_idle("KEVAL_DEVICE_WARM_UP_IDLE_MS", "0");
  Daemon daemon({"--max-workers", "6", "--warm-workers", "2"});
  ASSERT_TRUE(daemon.ready()) << daemon.log();
  const auto relu = [] {
    return compare_request(kernel("torch", source("reference_relu.py")),
                           kernel("torch", source("reference_relu.py")), unique_id("warm-up"), 40);
  };
  // The first compare teaches the daemon the prewarm set; the later ones take workers started
  // ahead, which warm up whenever no job is timed.
  std::vector<json::object> bodies{body_of(daemon.post("/compare", relu()))};
  ASSERT_TRUE(correctness(bodies[0])) << shown(bodies[0]);
  constexpr int kClients = 3, kEach = 3;
  std::vector<std::vector<json::object>> per_client(kClients);
  std::vector<std::string> errors(kClients);
  {
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c)
      clients.emplace_back([&, c] {
        try {
          for (int i = 0; i < kEach; ++i)
            per_client[c].push_back(body_of(daemon.post("/compare", relu())));
        } catch (const std::exception& e) {
          errors[c] = e.what();
        }
      });
    for (auto& client : clients)
      client.join();
  }
  for (int c = 0; c < kClients; ++c) {
    ASSERT_TRUE(errors[c].empty()) << errors[c] << "\n" << daemon.log();
    bodies.insert(bodies.end(), per_client[c].begin(), per_client[c].end());
  }
  std::vector<Window> timed, warm_ups;
  for (const json::object& body : bodies) {
    ASSERT_TRUE(correctness(body)) << shown(body);
    const std::optional<Window> window = timed_window(body);
    ASSERT_TRUE(window) << "a CUDA job that was timed says when it held its timing turn\n"
                        << shown(body);
    timed.push_back(*window);
    for (const Window& warm_up : warm_up_windows(body, window->what))
      warm_ups.push_back(warm_up);
    if (const json::object* warm_up = warm_up_of(body); warm_up && warm_up->contains("sides")) {
      EXPECT_FALSE(warm_up->contains("errors")) << shown(*warm_up);
      for (const auto& [side, one] : warm_up->at("sides").as_object()) {
        const auto& warmed = one.at("warmed").as_array();
        EXPECT_NE(std::find(warmed.begin(), warmed.end(), json::value("torch")), warmed.end())
            << side << ": " << shown(*warm_up);
      }
    }
  }
  // Else this proved nothing: some worker warmed its GPU up before its job came.
  ASSERT_FALSE(warm_ups.empty()) << daemon.log();
  // A timeline's origin is read by the worker a moment after it: its times are early by that
  // moment, which a couple of milliseconds cover.
  constexpr double kClockSlackMs = 2;
  for (const Window& warm_up : warm_ups)
    for (const Window& job : timed)
      EXPECT_FALSE(warm_up.gpu == job.gpu && warm_up.from < job.to - kClockSlackMs &&
                   job.from < warm_up.to - kClockSlackMs)
          << warm_up.what << " ran from " << warm_up.from << " to " << warm_up.to << " while "
          << job.what << " was timed from " << job.from << " to " << job.to;
}

} // namespace
} // namespace keval::test::adversarial
