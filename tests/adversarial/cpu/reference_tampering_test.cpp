// The reference is out of the candidate's reach: a candidate that finds the reference's model
// through the garbage collector, replaces the reference's forward through sys.modules and the
// callers' frames, or monkeypatches torch to slow the reference down changes nothing the
// reference computes or how long it takes.
#include "adversarial_support.hpp"

namespace keval::test::adversarial {
namespace {

using ReferenceTampering = TorchAttack;

TEST_F(ReferenceTampering, ModelFoundThroughTheGarbageCollectorIsNotTheReference) {
  TempDir tmp;
  const auto run = run_cli(relu_compare(source("gc_reference.py"), unique_id("gc-reference")),
                           tmp.path() / "state");
  ASSERT_FALSE(run.body.empty()) << describe(run);
  expect_cli_kernel_failure(run, "the candidate returns its input");
}

TEST_F(ReferenceTampering, ReplacedModelForwardDoesNotReachTheReference) {
  TempDir tmp;
  const auto run =
      run_cli(relu_compare(source("patch_reference_class.py"), unique_id("patch-reference")),
              tmp.path() / "state");
  ASSERT_FALSE(run.body.empty()) << describe(run);
  expect_cli_kernel_failure(run, "the candidate returns zeros");
}

TEST_F(ReferenceTampering, MonkeypatchedTorchDoesNotSlowTheReference) {
  TempDir tmp;
  const auto run = run_cli(relu_compare(source("slow_reference.py"), unique_id("slow-reference")),
                           tmp.path() / "state");
  ASSERT_FALSE(run.body.empty()) << describe(run);
  // The candidate itself is honest: correct, and profiled.
  ASSERT_EQ(run.exit_code, 0) << describe(run);
  ASSERT_TRUE(correctness(run.body)) << describe(run);
  const auto* ref_runtime = run.body.if_contains("ref_runtime");
  ASSERT_TRUE(ref_runtime != nullptr && ref_runtime->is_object()) << shown(run.body);
  const auto median = number_at(ref_runtime->as_object(), "median");
  ASSERT_TRUE(median.has_value()) << shown(*ref_runtime);
  // The patch sleeps 50 ms per call; a ReLU of 4096 values takes microseconds. The only timing
  // threshold of the suite, and it is 2x below the sleep.
  EXPECT_LT(*median, 25.0) << "the reference ran " << *median
                           << " ms per call: the candidate's monkeypatch reached it (speedup "
                           << speedup(run.body).value_or(-1) << ")";
}

} // namespace
} // namespace keval::test::adversarial
