// Issue 13 on the GPU: a candidate cannot win by slowing the reference down. The GPU time-slices
// between processes' contexts, so a process of the candidate's that keeps the GPU busy while the
// reference is timed makes the reference's samples wait for its slices. Skipped, with the reason,
// without a usable CUDA device or without torch.
#include "adversarial_support.hpp"
#include "support/cuda_device.hpp"

namespace keval::test::adversarial {
namespace {

class GpuContention : public ::testing::Test {
protected:
  void SetUp() override {
    KEVAL_SKIP_WITHOUT_CUDA_DEVICE();
    if (built_registry().find("torch") == nullptr)
      GTEST_SKIP() << "the torch plugin was not built";
    if (!torch_problem().empty())
      GTEST_SKIP() << torch_problem();
  }
};

// The same matmul on both sides is near 1 (below it: the candidate's forward also talks to its
// helper); on the H100, before the other side was paused, the helper made it 1.66 (the reference
// 2.99 -> 4.96 ms) against 0.96 for the same candidate with an idle helper.
constexpr double kNoStolenSpeedup = 1.3;

CliRun run_hog(const fs::path& state, const std::vector<std::string>& keval_args) {
  return run_cli(compare_request(kernel("torch", source("reference_square_matmul.py")),
                                 kernel("torch", source("gpu_hog_process.py")), unique_id("hog"),
                                 30, 300),
                 state, keval_args);
}

// The sandbox's layers keep the helper from opening the GPU at all (CUDA error 304 in its
// process); with them off it runs, and the pause is what protects the reference.
TEST_F(GpuContention, AHelperProcessKeepingTheGpuBusyDoesNotSlowTheReference) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{}, std::vector<std::string>{"--sandbox", "off"}}) {
    SCOPED_TRACE(args.empty() ? "sandboxed" : "sandbox off");
    TempDir tmp;
    const auto run = run_hog(tmp.path() / "a", args);
    ASSERT_FALSE(run.body.empty()) << describe(run);
    if (!args.empty()) { // unsandboxed, the helper must have worked: else this proves nothing
      EXPECT_TRUE(correctness(run.body)) << describe(run);
    }
    // Either the candidate fails (its helper could not start) or its speedup is honest.
    if (correctness(run.body)) {
      const std::optional<double> s = speedup(run.body);
      ASSERT_TRUE(s.has_value()) << describe(run);
      EXPECT_LT(*s, kNoStolenSpeedup) << "the reference was slowed down: " << describe(run);
    }
  }
}

} // namespace
} // namespace keval::test::adversarial
