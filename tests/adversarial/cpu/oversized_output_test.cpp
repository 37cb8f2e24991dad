// What a candidate returns is copied into the process that judges it only within a bound: twice
// the bytes of the reference's outputs. Anything larger fails the candidate before a byte is
// copied, so no candidate can make that process run out of memory (which would read as keval's
// failure, an infrastructure verdict reward loops drop instead of scoring).
#include "adversarial_support.hpp"

namespace keval::test::adversarial {
namespace {

using OversizedOutput = TorchAttack;

TEST_F(OversizedOutput, FailsTheCandidateBeforeAnythingIsCopied) {
  TempDir tmp;
  const auto run = run_cli(relu_compare(source("oversized_output.py"), unique_id("oversized")),
                           tmp.path() / "state");
  ASSERT_FALSE(run.body.empty()) << describe(run);
  EXPECT_EQ(run.exit_code, 1) << describe(run); // the kernel's failure, not keval's
  const auto* error = run.body.if_contains("validation_error");
  ASSERT_TRUE(error != nullptr && error->is_string()) << describe(run);
  EXPECT_NE(std::string(error->as_string()).find("its outputs may take"), std::string::npos)
      << describe(run);
}

} // namespace
} // namespace keval::test::adversarial
