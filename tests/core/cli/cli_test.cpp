// The keval command line as a user meets it: exit codes, result on stdout, field paths.
#include "support/test_env.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

namespace keval::test {
namespace {

namespace json = boost::json;

std::vector<std::string> fault_env() {
  return {"KEVAL_PLUGIN_PATH=" + test_plugin_dir().string()};
}

TEST(Cli, VersionAndUsage) {
  auto v = run_keval({"version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_NE(v.out.find("keval 0.1.0 (plugin API 1.4)"), std::string::npos) << v.out;
  auto bad = run_keval({"frobnicate"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("usage: keval"), std::string::npos);
}

TEST(Cli, PluginsListsBuiltPluginsAndLoadErrors) {
  TempDir tmp;
  std::ofstream(tmp.path() / "libbroken.so") << "garbage";
  auto r = run_keval(
      {"plugins"}, {"KEVAL_PLUGIN_PATH=" + test_plugin_dir().string() + ":" + tmp.path().string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("fault  v1.0.0  api 1.1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(not loaded)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not a readable shared library"), std::string::npos) << r.out;
}

TEST(Cli, EvaluateSuccessPrintsSeedResponseAndExitsZero) {
  TempDir tmp;
  const auto path = write_request(tmp.path(), "ok.json", fault_evaluate({}));
  const double before_ms =
      std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  auto r = run_keval({"evaluate", path.string()}, fault_env());
  const double after_ms =
      std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto body = json::parse(r.out).as_object();
  for (const char* key : {"job_id", "status", "kernel_exec_result", "ref_runtime",
                          "compilation_error", "validation_error"})
    EXPECT_TRUE(body.contains(key)) << key;
  const auto& exec = body.at("kernel_exec_result").as_object();
  for (const char* key : {"compiled", "correctness", "runtime", "runtime_stats", "metadata"})
    EXPECT_TRUE(exec.contains(key)) << key;
  for (const char* key :
       {"mean", "std", "min", "max", "median", "percentile_95", "percentile_99", "count"})
    EXPECT_TRUE(exec.at("runtime_stats").as_object().contains(key)) << key;
  // Where the job's time went in the worker, step by step, in order.
  const auto& timeline = exec.at("metadata").at("worker").at("timeline_ms").as_object();
  double last = 0;
  for (const char* step : {"runners_started", "compiled", "granted", "engine_open", "bound",
                           "validated", "profiled", "stopping", "ended"}) {
    ASSERT_TRUE(timeline.contains(step)) << step << " in " << json::serialize(timeline);
    EXPECT_GE(timeline.at(step).to_number<double>(), last) << step;
    last = timeline.at(step).to_number<double>();
  }
  // The timeline's origin on the machine's clock, so that one host's jobs can be lined up: the
  // worker's receipt of the job, after the host sent it.
  const auto& worker = exec.at("metadata").at("worker");
  const double sent = worker.at("job_sent_unix_ms").to_number<double>();
  const double origin = worker.at("timeline_origin_unix_ms").to_number<double>();
  EXPECT_GE(sent, before_ms);
  EXPECT_GE(origin, sent);
  EXPECT_LE(origin + last, after_ms);
}

TEST(Cli, KernelFailureExitsOne) {
  TempDir tmp;
  const auto path = write_request(tmp.path(), "bad.json",
                                  fault_evaluate(json::object{{"fault", "compile_error"}}));
  auto r = run_keval({"evaluate", path.string()}, fault_env());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_FALSE(json::parse(r.out).at("kernel_exec_result").at("compiled").as_bool());
}

TEST(Cli, MalformedRequestExitsTwoNamingTheField) {
  TempDir tmp;
  auto request = fault_evaluate({});
  request["kernel"]
      .as_object()["io"]
      .as_object()["args"]
      .as_array()[0]
      .as_object()["tensor_spec"]
      .as_object()["shape"] = json::array{64, 0};
  const auto path = write_request(tmp.path(), "malformed.json", request);
  auto r = run_keval({"evaluate", path.string()}, fault_env());
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.out.find("kernel.io.args[0].tensor_spec.shape[1]"), std::string::npos) << r.out;
}

TEST(Cli, UnknownKernelTypeIsABadRequestListingTypes) {
  TempDir tmp;
  auto request = fault_evaluate({});
  request["kernel"].as_object()["kernel_type"] = "no_such_type";
  const auto path = write_request(tmp.path(), "unknown.json", request);
  auto r = run_keval({"evaluate", path.string()}, fault_env());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("kernel.kernel_type"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("available: fault"), std::string::npos) << r.out;
}

TEST(Cli, MissingRequiredIoContractIsABadRequest) {
  TempDir tmp;
  auto request = fault_evaluate({});
  request["kernel"].as_object().erase("io");
  const auto path = write_request(tmp.path(), "noio.json", request);
  auto r = run_keval({"evaluate", path.string()}, fault_env());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("IOContract is required"), std::string::npos) << r.out;
}

TEST(Cli, TimeoutExitsThreeAndKeepsCompileResult) {
  TempDir tmp;
  const auto path = write_request(tmp.path(), "hang.json",
                                  fault_evaluate(json::object{{"fault", "hang_after_compile"}}, 2));
  auto r = run_keval({"evaluate", path.string()}, fault_env());
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  const auto body = json::parse(r.out).as_object();
  EXPECT_TRUE(body.at("kernel_exec_result").at("compiled").as_bool());
}

TEST(Cli, CompareReadsStdinRequestFile) {
  TempDir tmp;
  const auto path = write_request(tmp.path(), "cmp.json", fault_compare({}, {}));
  // `-` reads the request from standard input.
  auto r =
      supervisor::run_command("/bin/sh",
                              {"-c", "KEVAL_PLUGIN_PATH=" + test_plugin_dir().string() + " " +
                                         keval_exe().string() + " compare - < " + path.string()},
                              std::chrono::seconds(60));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(json::parse(r.out).at("kernel_exec_result").at("correctness").as_bool());
}

TEST(Cli, KeepRecordLeavesThePersistedJob) {
  TempDir tmp;
  const auto path = write_request(tmp.path(), "ok.json", fault_evaluate({}));
  auto r = run_keval(
      {"evaluate", path.string(), "--keep-record", "--state-dir", (tmp.path() / "state").string()},
      fault_env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string id = std::string(json::parse(r.out).at("job_id").as_string());
  const auto record = tmp.path() / "state" / "jobs" / (id + ".json");
  ASSERT_TRUE(std::filesystem::exists(record));
  std::ifstream in(record);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto stored = json::parse(ss.str()).as_object();
  EXPECT_EQ(stored.at("status"), "completed");
  EXPECT_TRUE(stored.at("phases").as_object().contains("profiled"));
}

TEST(Cli, ConformanceLeavesNothingInTheTemporaryDirectory) {
  // The plugins' work_dir is where they write what they compile (the cuda type its CUBIN, the
  // Python types the source they load): a directory of the run's own, removed with it.
  const auto plugin = plugin_dir() / "libkeval_cuda_plugin.so";
  if (!std::filesystem::exists(plugin))
    GTEST_SKIP() << "keval was built without the cuda plugin (no CUDA toolkit): " << plugin;
  TempDir tmp;
  const auto request =
      std::filesystem::path(KEVAL_TEST_SOURCE_DIR) / "examples" / "cuda_vector_add.json";
  auto r = run_keval({"conformance", plugin.string(), "--request", request.string()},
                     {"TMPDIR=" + tmp.path().string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_NE(r.out.find("compile"), std::string::npos) << r.out;
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(tmp.path()))
    left.push_back(entry.path().string());
  EXPECT_TRUE(left.empty()) << "left behind: " << left.front();
}

TEST(Cli, ConformanceWithoutAWorkDirectoryFailsSayingWhyAndCrashesNothing) {
  const auto plugin = plugin_dir() / "libkeval_cuda_plugin.so";
  if (!std::filesystem::exists(plugin))
    GTEST_SKIP() << "keval was built without the cuda plugin (no CUDA toolkit): " << plugin;
  // The run checked nothing past the manifest: a failure that says why, not a worker that died
  // (which would blame the plugin's check) and not a pass with everything skipped.
  TempDir tmp;
  const auto missing = tmp.path() / "not-there";
  auto r = run_keval({"conformance", plugin.string()}, {"TMPDIR=" + missing.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("cannot create a work directory"), std::string::npos)
      << r.out << r.err;
  EXPECT_EQ((r.out + r.err).find("killed by"), std::string::npos) << r.out << r.err;
}

} // namespace
} // namespace keval::test
