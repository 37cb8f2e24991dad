// A candidate that puts a relay of its own between its runner and the trusted worker: it moves the
// runner's channel behind a socketpair, passes every frame on and divides each timed sample's
// "ms" by a million. Its kernel is an honest ReLU, so a relay that worked would go unnoticed by
// every check: correct, with a speedup near a million. The channel layer keeps the runner's
// descriptor where keval put it (no close, dup2, dup3, close_range over it, no new seccomp filter
// or syscall dispatch), in every sandbox mode: the takeover fails with EPERM, and the candidate,
// left an honest ReLU, is timed as one.
#include "adversarial_support.hpp"

namespace keval::test::adversarial {
namespace {

using ChannelTakeover = TorchAttack;

// An honest ReLU against the same ReLU: far from the million a working relay reports.
constexpr double kNoForgedSpeedup = 50.0;

void expect_takeover_refused(const CliRun& run, const std::string& mode) {
  ASSERT_FALSE(run.body.empty()) << describe(run);
  EXPECT_EQ(run.exit_code, 0) << describe(run);
  EXPECT_TRUE(correctness(run.body)) << describe(run);
  const auto lines = marker_lines(json::value(run.body), "KEVAL_TAKEOVER ");
  ASSERT_FALSE(lines.empty()) << "the candidate said nothing of its takeover: " << describe(run);
  for (const auto& line : lines)
    EXPECT_EQ(line.rfind(mode + " failed: [Errno 1]", 0), 0u) << line;
  const std::optional<double> s = speedup(run.body);
  ASSERT_TRUE(s.has_value()) << describe(run);
  EXPECT_LT(*s, kNoForgedSpeedup) << "a relayed time reached the result: " << describe(run);
  EXPECT_EQ(flag_named(run.body, "excessive_speedup"), nullptr) << describe(run);
}

TEST_F(ChannelTakeover, Dup2OntoTheChannelIsRefusedAndNoTimeIsRewritten) {
  TempDir tmp;
  const auto run = run_cli(relu_compare(source("channel_mitm_timing.py", {{"MODE", "dup2"}}),
                                        unique_id("takeover-dup2")),
                           tmp.path() / "state");
  expect_takeover_refused(run, "dup2");
}

TEST_F(ChannelTakeover, ClosingTheChannelToReuseItsNumberIsRefused) {
  TempDir tmp;
  const auto run = run_cli(relu_compare(source("channel_mitm_timing.py", {{"MODE", "close"}}),
                                        unique_id("takeover-close")),
                           tmp.path() / "state");
  expect_takeover_refused(run, "close");
}

TEST_F(ChannelTakeover, TheGuardHoldsWithTheSandboxOff) {
  TempDir tmp;
  const auto run = run_cli(
      relu_compare(source("channel_mitm_timing.py", {{"MODE", "dup2"}}), unique_id("takeover-off")),
      tmp.path() / "state", {"--sandbox", "off"});
  expect_takeover_refused(run, "dup2");
}

} // namespace
} // namespace keval::test::adversarial
