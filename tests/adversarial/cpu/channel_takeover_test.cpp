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

// Beside each side's times, the wall time keval measured around every sample from outside its
// process: never shorter than what the side's process reported, and the speedup floor it gives
// (the reference's median over the candidate's median wall) is positive and never above the
// speedup.
void expect_walls_bound_the_times(const json::object& body) {
  const json::object& metadata = exec_result(body).at("metadata").as_object();
  const json::object& profiling = metadata.at("profiling").as_object();
  const json::object& walls = profiling.at("sampling").as_object().at("wall_ms").as_object();
  const auto wall_median = [&](const char* side) {
    return number_at(walls.at(side).as_object(), "median").value_or(-1);
  };
  const auto reported = number_at(exec_result(body).at("runtime_stats").as_object(), "median");
  const auto ref_reported = number_at(body.at("ref_runtime").as_object(), "median");
  ASSERT_TRUE(reported && ref_reported) << shown(body);
  EXPECT_GE(wall_median("custom"), *reported) << shown(walls);
  EXPECT_GE(wall_median("ref"), *ref_reported) << shown(walls);
  const auto floor = number_at(profiling, "speedup_floor");
  ASSERT_TRUE(floor.has_value()) << shown(profiling);
  EXPECT_GT(*floor, 0);
  EXPECT_LE(*floor, speedup(body).value_or(0));
  EXPECT_DOUBLE_EQ(*floor, *ref_reported / wall_median("custom"));
}

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
  expect_walls_bound_the_times(run.body);
}

// The relaying candidate, taking the channel over by `mode`, run through the CLI.
CliRun run_takeover(const std::string& mode, const std::vector<std::string>& keval_args = {}) {
  TempDir tmp;
  return run_cli(relu_compare(source("channel_mitm_timing.py", {{"MODE", mode}}),
                              unique_id("takeover-" + mode)),
                 tmp.path() / "state", keval_args);
}

TEST_F(ChannelTakeover, Dup2OntoTheChannelIsRefusedAndNoTimeIsRewritten) {
  expect_takeover_refused(run_takeover("dup2"), "dup2");
}

TEST_F(ChannelTakeover, ClosingTheChannelToReuseItsNumberIsRefused) {
  expect_takeover_refused(run_takeover("close"), "close");
}

TEST_F(ChannelTakeover, TheGuardHoldsWithTheSandboxOff) {
  expect_takeover_refused(run_takeover("dup2", {"--sandbox", "off"}), "dup2");
}

// The guard follows the runner's descendants, which may use any descriptor but the channel's:
// subprocess with close_fds, a shell redirecting descriptor 3, closerange over everything and a
// fork pool run as they would anywhere.
TEST_F(ChannelTakeover, AnHonestKernelStartsProcessesAsItWouldAnywhere) {
  TempDir tmp;
  const auto run = run_cli(relu_compare(source("honest_subprocesses.py"), unique_id("subprocs")),
                           tmp.path() / "state");
  ASSERT_FALSE(run.body.empty()) << describe(run);
  EXPECT_EQ(run.exit_code, 0) << describe(run);
  EXPECT_TRUE(correctness(run.body)) << describe(run);
  EXPECT_EQ(marker_lines(json::value(run.body), "KEVAL_SUBPROCESSES ").size(), 1u) << describe(run);
}

} // namespace
} // namespace keval::test::adversarial
