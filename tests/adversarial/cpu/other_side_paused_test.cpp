// While the reference is timed the candidate's processes stand still (worker/isolation/pause.hpp):
// a candidate's helper that keeps the machine busy would otherwise slow the reference's samples,
// and the candidate would gain what the reference lost. The reference here watches a counter the
// candidate's helper process advances as fast as it can: the helper runs between the reference's
// timed calls, never during one, and each stop covers two consecutive samples of the reference.
#include "adversarial_support.hpp"

#include <fstream>
#include <regex>

namespace keval::test::adversarial {
namespace {

using OtherSidePaused = TorchAttack;

constexpr int64_t kTrials = 20;

TEST_F(OtherSidePaused, ACandidatesHelperNeverRunsWhileTheReferenceIsTimed) {
  TempDir tmp;
  const std::string page = (fs::path("/dev/shm") / unique_id("keval-heartbeat")).string();
  const Substitutions page_of{{"PAGE", page}};
  const auto run =
      run_cli(compare_request(kernel("torch", source("reference_matmul_heartbeat.py", page_of)),
                              kernel("torch", source("heartbeat_helper.py", page_of)),
                              unique_id("paused"), kTrials),
              tmp.path() / "state");
  std::vector<std::string> lines;
  {
    std::ifstream log(page + ".log");
    for (std::string text; std::getline(log, text);)
      lines.push_back(text);
  }
  std::error_code ignored;
  fs::remove(page, ignored);
  fs::remove(page + ".log", ignored);
  ASSERT_FALSE(run.body.empty()) << describe(run);
  EXPECT_TRUE(correctness(run.body)) << describe(run);
  ASSERT_FALSE(marker_lines(json::value(run.body), "KEVAL_HEARTBEAT helper").empty())
      << "the helper never started: " << describe(run);
  // One line per call of the reference's; the last kTrials are its timed samples (validation
  // and warm-up calls come first, with the candidate's processes running).
  std::vector<std::pair<int, int>> calls; // (during, since)
  const std::regex line(R"(KEVAL_HEARTBEAT call (\d+) during=(\d) since=(\d))");
  for (const auto& text : lines) {
    std::smatch m;
    if (std::regex_search(text, m, line))
      calls.emplace_back(std::stoi(m[2]), std::stoi(m[3]));
  }
  ASSERT_GE(calls.size(), static_cast<size_t>(kTrials))
      << "the reference logged " << calls.size() << " calls to " << page
      << ".log: " << describe(run);
  int ran_between = 0;
  for (size_t i = calls.size() - kTrials; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].first, 0) << "the helper ran during timed call " << i + 1 << " of "
                                 << calls.size() << ": " << describe(run);
    ran_between += calls[i].second;
  }
  // The helper was alive and running all along, only not while the reference was timed.
  EXPECT_GT(ran_between, 0) << describe(run);
  const json::object& paused = exec_result(run.body)
                                   .at("metadata")
                                   .at("profiling")
                                   .at("sampling")
                                   .at("other_side_paused")
                                   .as_object();
  // The reference's samples stopped the candidate's runner and its helper. The candidate's
  // samples stop nothing: the reference is the grader's code, idle between calls.
  EXPECT_GE(paused.at("ref").at("processes_most").to_number<int64_t>(), 2) << shown(paused);
  EXPECT_EQ(paused.if_contains("custom"), nullptr) << shown(paused);
  // A stop lasts over two consecutive samples of the reference (ABBA) and over all of its
  // warm-up runs: one per pair of its samples, one for the first, one for the warm-ups. Not one
  // per sample (kTrials + 1), and none for the candidate's.
  const int64_t stops = paused.at("ref").at("stops").to_number<int64_t>();
  EXPECT_GE(stops, kTrials / 2) << shown(paused);
  EXPECT_LE(stops, kTrials / 2 + 2) << shown(paused);
}

} // namespace
} // namespace keval::test::adversarial
