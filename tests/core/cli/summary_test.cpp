// The summary `keval evaluate|compare` prints on a terminal (result/summary.hpp): what a person
// needs to act on, from every shape of response, and nothing that breaks on a missing field.
#include "result/summary.hpp"

#include <string>

#include <boost/json/parse.hpp>
#include <gtest/gtest.h>

namespace keval::result {
namespace {

namespace json = boost::json;

json::object parse(const char* text) {
  return json::parse(text).as_object();
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Summary, CorrectCompareShowsSpeedupBothSidesMethodsFlagsAndWhereTheResultIs) {
  const auto body = parse(R"({"job_id": "j1", "status": "success", "speedup": 1.734,
    "kernel_exec_result": {"compiled": true, "correctness": true,
      "runtime_stats": {"mean": 0.0123, "median": 0.0121, "percentile_95": 0.0131, "count": 100,
                        "method": "cuda_graph_replay"},
      "metadata": {"device": {"type": "cuda", "name": "NVIDIA H100"},
                   "flags": [{"name": "precision", "reason": "passes 1e-2 but not 1e-4"}],
                   "warnings": ["kernel.extra: unknown field, ignored"]}},
    "ref_runtime": {"mean": 0.0210, "median": 0.0209, "percentile_95": 0.0230, "count": 100,
                    "method": "cuda_events"}})");
  const std::string s = summarize(body, {"/state/results/j1.json", false});
  EXPECT_TRUE(has(s, "CORRECT  speedup 1.73x")) << s;
  EXPECT_TRUE(has(s, "job        j1  on cuda (NVIDIA H100)")) << s;
  EXPECT_TRUE(has(s, "candidate  median 0.012100 ms  p95 0.013100 ms  mean 0.012300 ms  n=100  "
                     "cuda_graph_replay"))
      << s;
  EXPECT_TRUE(has(s, "reference  median 0.020900 ms")) << s;
  EXPECT_TRUE(has(s, "cuda_events")) << s;
  EXPECT_TRUE(has(s, "flag       precision: passes 1e-2 but not 1e-4")) << s;
  EXPECT_TRUE(has(s, "warning    kernel.extra: unknown field, ignored")) << s;
  EXPECT_TRUE(has(s, "full result /state/results/j1.json")) << s;
  EXPECT_FALSE(has(s, "\x1b[")) << "no colour unless asked";
}

TEST(Summary, TheSpeedupFloorFromTheTrustedWallTimesFollowsTheSpeedup) {
  const auto body = parse(R"({"job_id": "j1", "status": "success", "speedup": 1.734,
    "kernel_exec_result": {"compiled": true, "correctness": true,
      "metadata": {"profiling": {"speedup": 1.734, "speedup_floor": 0.912}}}})");
  const std::string s = summarize(body, {"", false});
  EXPECT_TRUE(has(s, "CORRECT  speedup 1.73x (at least 0.91x)\n")) << s;
}

TEST(Summary, ColourOnlyWhenAsked) {
  const auto body = parse(R"({"job_id": "j", "status": "success",
    "kernel_exec_result": {"compiled": true, "correctness": true}})");
  EXPECT_TRUE(has(summarize(body, {"", true}), "\x1b[1;32mCORRECT\x1b[0m"));
}

TEST(Summary, CompileErrorShowsTheLogsFirstLinesAndCountsTheRest) {
  std::string log;
  for (int i = 1; i <= 20; ++i)
    log += "kernel.cu(" + std::to_string(i) + "): error\\n";
  const auto body = json::parse(R"({"job_id": "j2", "status": "success", "compilation_error": ")" +
                                log + R"(", "kernel_exec_result": {"compiled": false,
                                "correctness": false}})")
                        .as_object();
  const std::string s = summarize(body);
  EXPECT_TRUE(has(s, "COMPILE ERROR")) << s;
  EXPECT_TRUE(has(s, "kernel.cu(12): error")) << s;
  EXPECT_FALSE(has(s, "kernel.cu(13): error")) << s;
  EXPECT_TRUE(has(s, "... 8 more lines")) << s;
  EXPECT_FALSE(has(s, "full result")) << "no file was written";
}

TEST(Summary, WrongResultStrictFlagAndLongReasonsAreCut) {
  const std::string reason(400, 'r');
  const auto body = json::parse(R"({"job_id": "j3", "status": "success",
    "validation_error": "trial 0: output 0: 63660 of 65536 elements differ",
    "kernel_exec_result": {"compiled": true, "correctness": false, "runtime_stats": {},
      "metadata": {"flags": [{"name": "excessive_speedup", "strict": true, "reason": ")" +
                                reason + R"("}]}}})")
                        .as_object();
  const std::string s = summarize(body);
  EXPECT_TRUE(has(s, "INCORRECT\n    trial 0: output 0: 63660 of 65536 elements differ")) << s;
  EXPECT_TRUE(has(s, "excessive_speedup (strict: made it incorrect)")) << s;
  EXPECT_TRUE(has(s, "rrr...")) << s;
  EXPECT_FALSE(has(s, reason)) << s;
  EXPECT_FALSE(has(s, "kernel     \n")) << "empty runtime_stats print no timing line: " << s;
}

TEST(Summary, InfrastructureFailureIsNotAVerdictOnTheKernel) {
  const auto body = parse(R"({"job_id": "j4", "status": "failed",
    "error": {"class": "timeout", "message": "the job ran past its 120 s timeout"},
    "kernel_exec_result": {"compiled": true, "correctness": false}})");
  const std::string s = summarize(body);
  EXPECT_TRUE(has(s, "FAILED  keval or the machine failed (timeout), not a verdict")) << s;
  EXPECT_TRUE(has(s, "the job ran past its 120 s timeout")) << s;
}

TEST(Summary, BadRequestNamesTheField) {
  const auto body = parse(R"({"status": "failed", "error": {"class": "bad_request",
    "path": "kernel.io.args[0].tensor_spec.shape[1]", "message": "must be >= 1"}})");
  EXPECT_TRUE(
      has(summarize(body), "BAD REQUEST  kernel.io.args[0].tensor_spec.shape[1]: must be >= 1"));
}

TEST(Summary, SkippedProgramSaysWhy) {
  const auto body = parse(R"({"job_id": "j5", "status": "skipped",
    "compilation_error": "needs compute capability 10.0; this GPU is 9.0",
    "kernel_exec_result": {"compiled": false, "correctness": false}})");
  const std::string s = summarize(body);
  EXPECT_TRUE(has(s, "SKIPPED")) << s;
  EXPECT_TRUE(has(s, "needs compute capability 10.0")) << s;
}

// What the candidate wrote reaches the summary (a compiler log quotes its source, a flag's reason
// its output): escape sequences there must not move the cursor or repaint the verdict a person
// reads, nor may bidirectional overrides reorder it. They are shown as escapes.
TEST(Summary, TheCandidatesTextCannotRepaintTheTerminal) {
  json::object body;
  body["job_id"] = "j\x1b[2J";
  body["status"] = "success";
  body["compilation_error"] =
      "kernel.cu(1): error\x1b[1A\x1b[2K\r\x1b[1;32mCORRECT\x1b[0m  speedup 45.00x\n"
      "\xc2\x9b"
      "31m C1 CSI\n"
      "evil \xe2\x80\xae"
      "txt.exe \xe2\x81\xa6"
      "isolate\x07\x7f tab\there";
  body["kernel_exec_result"] = json::object{
      {"compiled", false},
      {"correctness", false},
      {"metadata",
       json::object{{"flags", json::array{json::object{{"name", "static"},
                                                       {"reason", "said \x1b]0;title\x07"}}}},
                    {"device", json::object{{"type", "cuda\x1b[H"}, {"name", "H100"}}}}}};
  const std::string s = summarize(body);
  EXPECT_EQ(s.find('\x1b'), std::string::npos) << s;
  EXPECT_EQ(s.find('\r'), std::string::npos) << s;
  EXPECT_EQ(s.find('\x07'), std::string::npos) << s;
  EXPECT_EQ(s.find('\x7f'), std::string::npos) << s;
  EXPECT_EQ(s.find("\xc2\x9b"), std::string::npos) << s;
  EXPECT_EQ(s.find("\xe2\x80\xae"), std::string::npos) << s;
  EXPECT_EQ(s.find("\xe2\x81\xa6"), std::string::npos) << s;
  EXPECT_TRUE(has(s, "COMPILE ERROR\n")) << s;
  EXPECT_TRUE(has(s, "error\\x1b[1A\\x1b[2K\\x0d\\x1b[1;32mCORRECT")) << s;
  EXPECT_TRUE(has(s, "\\u{009b}31m C1 CSI")) << s;
  EXPECT_TRUE(has(s, "evil \\u{202e}txt.exe \\u{2066}isolate\\x07\\x7f tab here")) << s;
  EXPECT_TRUE(has(s, "said \\x1b]0;title\\x07")) << s;
  EXPECT_TRUE(has(s, "job        j\\x1b[2J  on cuda\\x1b[H (H100)")) << s;
  // Ordinary UTF-8 is left alone, and a cut never splits a character.
  json::object accents;
  accents["job_id"] = "j";
  accents["status"] = "success";
  accents["validation_error"] = std::string(155, 'a') + "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9";
  accents["kernel_exec_result"] = json::object{{"compiled", true}, {"correctness", false}};
  const std::string a = summarize(accents);
  EXPECT_TRUE(has(a, std::string(155, 'a') + "\xc3\xa9...")) << a;
}

TEST(Summary, BodiesOfTheWrongShapeDoNotThrow) {
  for (const char* text : {R"({})", R"({"status": 3, "kernel_exec_result": []})",
                           R"({"job_id": 1, "speedup": "x", "kernel_exec_result": {"metadata":
                             {"flags": [1, {"name": 2}], "warnings": [3]}}})"})
    EXPECT_NO_THROW(summarize(parse(text))) << text;
}

} // namespace
} // namespace keval::result
