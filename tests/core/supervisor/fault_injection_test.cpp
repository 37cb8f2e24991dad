// Every way a submitted kernel can misbehave, through the real worker process and the host's
// supervisor: each ends with the right verdict, message and partial results, and the next job
// runs normally.
#include "support/test_env.hpp"

#include <chrono>

#include <boost/json/serialize.hpp>
#include <boost/json/value_to.hpp>
#include <gtest/gtest.h>

namespace keval::test {
namespace {

namespace json = boost::json;
using result::Verdict;

json::object meta(const char* fault) {
  return json::object{{"fault", fault}};
}

std::string str(const json::value& v) {
  return v.is_string() ? std::string(v.as_string()) : "";
}

const json::object& exec_result(const result::Response& r) {
  return r.body.at("kernel_exec_result").as_object();
}

bool compiled(const result::Response& r) {
  return exec_result(r).at("compiled").as_bool();
}
bool correct(const result::Response& r) {
  return exec_result(r).at("correctness").as_bool();
}

const json::object& worker(const result::Response& r) {
  return exec_result(r).at("metadata").as_object().at("worker").as_object();
}

void expect_healthy_job_runs() {
  const auto r = run_request(fault_evaluate({}), false);
  EXPECT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
}

TEST(FaultInjection, HealthyKernelEvaluates) {
  const auto r = run_request(fault_evaluate({}, 60, 7), false);
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_TRUE(compiled(r));
  EXPECT_TRUE(correct(r));
  EXPECT_EQ(str(r.body.at("status")), "success");
  const auto& stats = exec_result(r).at("runtime_stats").as_object();
  EXPECT_EQ(stats.at("count").to_number<int64_t>(), 7);
  EXPECT_GE(stats.at("median").to_number<double>(), 0.0);
  EXPECT_EQ(str(stats.at("method")), "cpu_wall_clock");
  EXPECT_EQ(exec_result(r).at("runtime").to_number<double>(), stats.at("mean").to_number<double>());
}

TEST(FaultInjection, CompareOfIdenticalKernelsIsCorrectWithSpeedup) {
  const auto r = run_request(fault_compare({}, {}), true);
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_TRUE(r.body.at("ref_runtime").is_object());
  EXPECT_GT(r.body.at("speedup").to_number<double>(), 0.0);
}

TEST(FaultInjection, WrongResultFailsWithMismatchCount) {
  const auto r = run_request(fault_compare({}, json::object{{"scale", 3}}), true);
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_TRUE(compiled(r));
  EXPECT_FALSE(correct(r));
  const std::string error = str(r.body.at("validation_error"));
  // Tripled values differ beyond the tolerance except where |x| < ~0.005: inputs come from the
  // job's secret seed, so the count is nearly, not exactly, all 64.
  const auto at = error.find(" of 64 elements differ");
  ASSERT_NE(at, std::string::npos) << error;
  const auto count_at = error.rfind(' ', at - 1) + 1;
  EXPECT_GE(std::stoi(error.substr(count_at, at - count_at)), 56) << error;
  EXPECT_TRUE(exec_result(r).at("runtime_stats").as_object().empty()) << "no profiling when wrong";
}

TEST(FaultInjection, UnwrittenOutputsFailBecauseTheyArePoisoned) {
  const auto r = run_request(fault_compare({}, meta("skip_half_outputs")), true);
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  const std::string error = str(r.body.at("validation_error"));
  EXPECT_NE(error.find("32 of 64"), std::string::npos) << error;
}

TEST(FaultInjection, ModifiedInputIsCaught) {
  const auto r = run_request(fault_compare({}, meta("modify_input")), true);
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_NE(str(r.body.at("validation_error")).find("modified its input argument 'x'"),
            std::string::npos)
      << json::serialize(r.body);
}

TEST(FaultInjection, CompileErrorKeepsTheFullLog) {
  const auto r = run_request(fault_evaluate(meta("compile_error")), false);
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_FALSE(compiled(r));
  const std::string error = str(r.body.at("compilation_error"));
  EXPECT_NE(error.find("injected compile error"), std::string::npos);
  EXPECT_NE(error.find("identifier \"undefined_thing\" is undefined"), std::string::npos) << error;
  expect_healthy_job_runs();
}

TEST(FaultInjection, ExceptionInLaunchIsAKernelFailure) {
  const auto r = run_request(fault_evaluate(meta("throw_in_launch")), false);
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_TRUE(compiled(r));
  EXPECT_NE(str(r.body.at("validation_error")).find("injected failure in launch"),
            std::string::npos);
}

TEST(FaultInjection, SegfaultKeepsCompileResultAndNamesTheSignal) {
  const auto r = run_request(fault_evaluate(meta("segfault_in_launch")), false);
  EXPECT_EQ(r.verdict, Verdict::kernel_failed) << json::serialize(r.body);
  EXPECT_TRUE(compiled(r));
  EXPECT_FALSE(correct(r));
  const std::string error = str(r.body.at("validation_error"));
  EXPECT_NE(error.find("SIGSEGV"), std::string::npos) << error;
  EXPECT_NE(error.find("while launching"), std::string::npos) << error;
  // The kernel crashed its own runner process; the trusted worker reported it and exited.
  const auto& validation = exec_result(r).at("metadata").as_object().at("validation").as_object();
  EXPECT_EQ(str(validation.at("failed_side")), "custom");
  EXPECT_EQ(worker(r).at("exit_code").to_number<int>(), 0);
  expect_healthy_job_runs();
}

TEST(FaultInjection, AbortIsReported) {
  const auto r = run_request(fault_evaluate(meta("abort_in_launch")), false);
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_NE(str(r.body.at("validation_error")).find("SIGABRT"), std::string::npos);
}

TEST(FaultInjection, HangAfterCompileTimesOutQuicklyKeepingCompileResult) {
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_request(fault_evaluate(meta("hang_after_compile"), 2), false);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Bounded by the request's 2 s, not the default job timeout of minutes; the slack is for a loaded
  // sanitizer run, where spawning and reaping alone can take seconds.
  EXPECT_LT(seconds, 30.0);
  EXPECT_EQ(r.verdict, Verdict::infrastructure);
  EXPECT_EQ(str(r.body.at("status")), "failed");
  EXPECT_TRUE(compiled(r)) << "the compile phase must survive the timeout";
  const std::string message = str(r.body.at("error").as_object().at("message"));
  EXPECT_NE(message.find("timeout of 2"), std::string::npos) << message;
  expect_healthy_job_runs();
}

TEST(FaultInjection, HangInLaunchTimesOut) {
  const auto r = run_request(fault_evaluate(meta("hang_in_launch"), 1), false);
  EXPECT_EQ(r.verdict, Verdict::infrastructure);
  EXPECT_NE(str(r.body.at("error").as_object().at("message")).find("while validating"),
            std::string::npos);
}

TEST(FaultInjection, ForkedChildrenDieWithTheJob) {
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_request(fault_evaluate(meta("fork_and_hang")), false);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The leftover child holds the stdout pipe; the process-group kill must release it.
  EXPECT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_LT(seconds, 30.0);
}

TEST(FaultInjection, StdoutFloodIsCappedWithAMarker) {
  json::object m = meta("flood_stdout");
  m["flood_bytes"] = 8 << 20;
  const auto r = run_request(fault_evaluate(m), false);
  EXPECT_EQ(r.verdict, Verdict::success) << "flooding stdout is not a failure";
  const auto& w = worker(r);
  EXPECT_GE(w.at("stdout_bytes").to_number<int64_t>(), 8 << 20);
  const std::string out = str(w.at("stdout"));
  EXPECT_LT(out.size(), 100u * 1024);
  EXPECT_NE(out.find("bytes of output truncated"), std::string::npos);
}

TEST(FaultInjection, ExitBetweenPhasesKeepsCompileResult) {
  const auto r = run_request(fault_evaluate(meta("exit_after_compile")), false);
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  EXPECT_TRUE(compiled(r));
  EXPECT_NE(str(r.body.at("validation_error")).find("exited with code 7"), std::string::npos)
      << json::serialize(r.body);
  expect_healthy_job_runs();
}

TEST(FaultInjection, GarbageOnTheProtocolChannelIsCaught) {
  const auto r = run_request(fault_evaluate(meta("garbage_protocol")), false);
  EXPECT_NE(r.verdict, Verdict::success);
  EXPECT_TRUE(compiled(r));
  EXPECT_NE(str(r.body.at("validation_error")).find("sent an invalid message"), std::string::npos)
      << json::serialize(r.body);
  expect_healthy_job_runs();
}

TEST(FaultInjection, FaultOnlyOnTheCustomSideBlamesTheCustomKernel) {
  json::object m = meta("throw_in_launch");
  m["fault_side"] = "custom";
  const auto r = run_request(fault_compare(m, m), true);
  EXPECT_EQ(r.verdict, Verdict::kernel_failed);
  const auto& validation = exec_result(r).at("metadata").as_object().at("validation").as_object();
  EXPECT_EQ(str(validation.at("failed_side")), "custom");
}

} // namespace
} // namespace keval::test
