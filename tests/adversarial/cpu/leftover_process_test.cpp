// Nothing of a job outlives it: a candidate that leaves a child in its own session (setsid) and a
// daemonised grandchild (double fork) behind, each rewriting the job's record as a success for up
// to 30 s, finds both gone by the time the result is reported, and the record that is kept and
// served is the genuine one (the candidate returns its input: a failure).
#include "adversarial_support.hpp"

namespace keval::test::adversarial {
namespace {

using LeftoverProcesses = TorchAttack;

// The candidate either recorded the processes it left, or says it could not fork at all.
void expect_attempted(const std::vector<pid_t>& pids, const json::value& result) {
  if (pids.size() >= 2)
    return;
  EXPECT_FALSE(marker_lines(result, "KEVAL_FORK_FAILED ").empty())
      << "the candidate recorded " << pids.size()
      << " of its 2 processes and did not report a failed fork: " << shown(result);
}

TEST_F(LeftoverProcesses, DieWithTheCliJobAndLeaveItsRecordAlone) {
  TempDir tmp;
  const DropBox drop;
  const auto pid_dir = drop.path();
  const auto state = tmp.path() / "state";
  const std::string id = unique_id("leftover-cli");
  const auto record_path = state / "jobs" / (id + ".json");
  const auto candidate = source("leftover_processes.py", {{"PID_DIR", pid_dir.string()},
                                                          {"RECORD_PATH", record_path.string()}});
  const auto run = run_cli(relu_compare(candidate, id), state);
  // First, at once: the job has been reported, so nothing of it may run any more.
  const auto pids = recorded_pids(pid_dir, run.body);
  const auto alive = still_alive(pids);
  kill_leftovers(pids);

  ASSERT_FALSE(run.body.empty()) << describe(run);
  expect_attempted(pids, run.body);
  EXPECT_TRUE(alive.empty()) << alive.size() << " of the job's " << pids.size()
                             << " leftover processes still ran after its result was reported";
  expect_cli_kernel_failure(run, "the candidate returns its input");

  // The record kept is the result the CLI printed, not a rewritten one.
  std::ifstream in(record_path);
  ASSERT_TRUE(in) << "no record at " << record_path;
  std::stringstream ss;
  ss << in.rdbuf();
  const auto record = parse_lenient(ss.str());
  ASSERT_TRUE(record.is_object()) << ss.str();
  EXPECT_FALSE(has_key(record, "forged")) << "the record was rewritten: " << shown(record);
  const auto* response = record.as_object().if_contains("response");
  ASSERT_TRUE(response != nullptr && response->is_object()) << shown(record);
  expect_genuine_failure(response->as_object());
}

TEST_F(LeftoverProcesses, DieWithTheDaemonJobAndGetJobsServesTheGenuineResult) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ready()) << daemon.log();
  const DropBox drop;
  const auto pid_dir = drop.path();
  const std::string id = unique_id("leftover-daemon");
  const auto record_path = daemon.state() / "jobs" / (id + ".json");
  const auto candidate = source("leftover_processes.py", {{"PID_DIR", pid_dir.string()},
                                                          {"RECORD_PATH", record_path.string()}});
  const auto r = daemon.post("/compare", relu_compare(candidate, id));
  const json::value result = parse_lenient(r.body());
  const auto pids = recorded_pids(pid_dir, result);
  const auto alive = still_alive(pids);

  EXPECT_TRUE(alive.empty()) << alive.size() << " of the job's " << pids.size()
                             << " leftover processes still ran after its result was reported";
  ASSERT_EQ(r.status, 200u) << r.body();
  ASSERT_TRUE(result.is_object()) << r.body();
  expect_attempted(pids, result);
  EXPECT_EQ(text(result.at("job_id")), id) << r.body();
  expect_genuine_failure(result.as_object());

  // What GET /jobs serves now is the genuine result. (Were a leftover still running, it would
  // have had every chance to rewrite the record during the poll above.)
  const auto view = daemon.job_view(id);
  kill_leftovers(pids);
  ASSERT_TRUE(view.has_value()) << "GET /jobs/" << id << " did not answer with the job";
  EXPECT_FALSE(has_key(*view, "forged")) << "the record was rewritten: " << shown(*view);
  EXPECT_EQ(text(view->at("status")), "completed") << shown(*view);
  ASSERT_TRUE(view->at("result").is_object()) << shown(*view);
  expect_genuine_failure(view->at("result").as_object());
  std::string health;
  EXPECT_TRUE(daemon.serves_health(&health)) << health;
}

} // namespace
} // namespace keval::test::adversarial
