// cuda_program jobs through keval's CLI on our own CPU problems (tests/compute_eval/problems,
// compute_capability null): the harness compiled once and reused with verdicts identical to the
// plain build command, problems this machine cannot run reported skipped, solutions that would
// end the harness's process themselves failed, and the registry's checks of a program request.
#include "job/job_runner.hpp"
#include "request/parse.hpp"
#include "support/program_problems.hpp"
#include "support/test_env.hpp"

#include <gmock/gmock.h>

#include <map>
#include <string>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace keval::test {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using ::testing::HasSubstr;

struct Outcome {
  int exit_code = -1;
  json::object body;
  const json::object& program() const {
    return body.at("kernel_exec_result").at("metadata").at("program").as_object();
  }
  bool passed() const {
    return body.at("kernel_exec_result").at("compiled").as_bool() &&
           body.at("kernel_exec_result").at("correctness").as_bool();
  }
};

class ProgramJob : public ::testing::Test {
protected:
  void SetUp() override {
    if (built_registry().find("cuda_program") == nullptr)
      GTEST_FAIL() << "the cuda_program plugin was not built";
  }
  Outcome evaluate(const json::object& r) {
    const fs::path file = write_request(state_.path(), "request.json", r);
    const auto result =
        run_keval({"evaluate", file.string(), "--state-dir", (state_.path() / "state").string()});
    Outcome o;
    o.exit_code = result.exit_code.value_or(-1);
    try {
      o.body = json::parse(result.out).as_object();
    } catch (const std::exception&) {
      ADD_FAILURE() << "not JSON: " << result.out << "\nstderr: " << result.err;
    }
    return o;
  }
  TempDir state_; // one state directory: the harness cache is shared by the test's jobs
};

bool have_nvcc() {
  return fs::exists("/usr/local/cuda/bin/nvcc") || std::system("command -v nvcc >/dev/null") == 0;
}

TEST_F(ProgramJob, TheHarnessIsBuiltOnceAndReusedWithTheVerdictsOfThePlainCommand) {
  if (!have_nvcc())
    GTEST_SKIP() << "no nvcc on this machine: nvcc_host_sum's build command needs it";
  const json::object problem = load_problem("nvcc_host_sum");
  std::map<std::string, bool> reused_verdicts, plain_verdicts;
  bool first = true;
  for (const std::string variant : {"pass", "wrong", "build_error"}) {
    const Outcome reused = evaluate(program_request(problem, variant));
    const json::object& harness = reused.program().at("build").at("harness").as_object();
    EXPECT_FALSE(harness.contains("unavailable")) << json::serialize(harness);
    // The first job builds the harness; every later one finds it in the cache.
    EXPECT_EQ(harness.at("reused").as_bool(), !first)
        << variant << ": " << json::serialize(harness);
    first = false;
    reused_verdicts[variant] = reused.passed();

    const Outcome plain = evaluate(program_request(problem, variant, {{"harness_reuse", false}}));
    EXPECT_THAT(
        std::string(plain.program().at("build").at("harness").at("unavailable").as_string()),
        HasSubstr("turned off by the request"));
    plain_verdicts[variant] = plain.passed();
    EXPECT_EQ(reused.exit_code, plain.exit_code) << variant;
  }
  EXPECT_EQ(reused_verdicts, plain_verdicts);
  EXPECT_EQ(reused_verdicts, (std::map<std::string, bool>{
                                 {"pass", true}, {"wrong", false}, {"build_error", false}}));
}

TEST_F(ProgramJob, ACommandThatCannotBeSplitBuildsAsWrittenAndSaysWhy) {
  const Outcome o = evaluate(program_request(load_problem("host_saxpy"), "pass"));
  ASSERT_TRUE(o.passed()) << json::serialize(o.body);
  EXPECT_THAT(std::string(o.program().at("build").at("harness").at("unavailable").as_string()),
              HasSubstr("compiler is g++"));
}

TEST_F(ProgramJob, AProblemThisMachineCannotRunIsSkippedWithTheReason) {
  json::object problem = load_problem("host_saxpy");
  problem["compute_capability"] = "99.0";
  Outcome o = evaluate(program_request(problem, "pass"));
  EXPECT_EQ(o.body.at("status").as_string(), "skipped");
  EXPECT_THAT(std::string(o.program().at("skipped").as_string()),
              HasSubstr("compute capability 99.0"));
  EXPECT_TRUE(o.program().at("build").is_null()); // nothing was built

  problem = load_problem("host_saxpy");
  problem["min_cuda_toolkit"] = "99.0";
  o = evaluate(program_request(problem, "pass"));
  EXPECT_EQ(o.body.at("status").as_string(), "skipped");
  EXPECT_THAT(std::string(o.program().at("skipped").as_string()), HasSubstr("CUDA toolkit 99.0"));
}

TEST_F(ProgramJob, AHeaderOrLibraryTheProblemNeedsAndTheMachineLacksIsSkippedNotFailed) {
  json::object problem = load_problem("host_saxpy");
  json::object& harness = problem["test_files"].as_array()[0].as_object();
  harness["content"] =
      "#include <keval_absent_library.h>\n" + std::string(harness["content"].as_string());
  Outcome o = evaluate(program_request(problem, "pass"));
  EXPECT_EQ(o.body.at("status").as_string(), "skipped") << json::serialize(o.body);
  EXPECT_THAT(std::string(o.program().at("skipped").as_string()),
              HasSubstr("needs keval_absent_library.h"));

  problem = load_problem("host_saxpy");
  problem["build_command"] =
      std::string(problem["build_command"].as_string()) + " -lkeval_absent_library";
  o = evaluate(program_request(problem, "pass"));
  EXPECT_EQ(o.body.at("status").as_string(), "skipped") << json::serialize(o.body);
  EXPECT_THAT(std::string(o.program().at("skipped").as_string()),
              HasSubstr("the library keval_absent_library"));

  // What only the solution includes is the solution's own failure.
  json::object r = program_request(load_problem("host_saxpy"), "pass");
  json::object& file = r["kernel"]
                           .as_object()["metadata"]
                           .as_object()["solution"]
                           .as_object()["files"]
                           .as_array()[0]
                           .as_object();
  file["content"] =
      "#include <keval_absent_library.h>\n" + std::string(file["content"].as_string());
  o = evaluate(r);
  EXPECT_EQ(o.body.at("status").as_string(), "success");
  EXPECT_FALSE(o.body.at("kernel_exec_result").at("compiled").as_bool());
}

TEST_F(ProgramJob, ASolutionThatWouldEndTheHarnessProcessFails) {
  // exit(0) before the harness compares anything would pass any test by its exit status.
  Outcome o = evaluate(program_request(load_problem("host_saxpy"), "exit_early"));
  EXPECT_FALSE(o.passed());
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_THAT(std::string(o.body.at("compilation_error").as_string()),
              HasSubstr("may not decide its own verdict"));
  // Its neighbours: an exit hook, _exit through a function pointer, an exec; each named.
  const json::object problem = load_problem("host_saxpy");
  const std::string header =
      "#include \"saxpy.h\"\n#include <algorithm>\n#include <cstdlib>\n"
      "#include <unistd.h>\n"
      "void fill_value(int n, float v, float* y) { std::fill(y, y + n, v); }\n";
  const std::map<std::string, std::string> cheats{
      {"atexit", "static void ok() { _Exit(0); }\nvoid saxpy(int n, float a, const float* x, "
                 "float* y) { std::atexit(ok); std::transform(x, x + n, y, y, [](float, float) "
                 "{ return 0.f; }); }\n"},
      {"_exit", "void saxpy(int, float, const float*, float*) { auto f = &_exit; f(0); "
                "std::transform((int*)0, (int*)0, (int*)0, [](int v) { return v; }); }\n"},
      {"execv", "void saxpy(int, float, const float*, float*) { char* argv[] = {nullptr}; "
                "execv(\"/bin/true\", argv); std::transform((int*)0, (int*)0, (int*)0, "
                "[](int v) { return v; }); }\n"},
      {"__attribute__ ( ( destructor",
       "__attribute__((destructor)) static void fin() { std::quick_exit(0); }\n"
       "void saxpy(int, float, const float*, float*) { std::transform((int*)0, (int*)0, "
       "(int*)0, [](int v) { return v; }); }\n"},
  };
  for (const auto& [name, body] : cheats) {
    json::object r = program_request(problem, "pass");
    r["kernel"].as_object()["metadata"].as_object()["solution"].as_object()["files"] =
        json::array{json::object{{"path", "solution.cpp"}, {"content", header + body}}};
    o = evaluate(r);
    EXPECT_FALSE(o.passed()) << name;
    EXPECT_THAT(std::string(o.program().at("process_control").as_string()), HasSubstr(name));
  }
  // A CUDA_CHECK-style exit(EXIT_FAILURE) or a comment naming exit(0) is an honest solution's.
  json::object honest = program_request(problem, "pass");
  json::object& file = honest["kernel"]
                           .as_object()["metadata"]
                           .as_object()["solution"]
                           .as_object()["files"]
                           .as_array()[0]
                           .as_object();
  file["content"] = std::string(file["content"].as_string()) +
                    "// never exit(0) here\nstatic void die() { std::exit(EXIT_FAILURE); }\n"
                    "static const char* why = \"_exit\";\n";
  o = evaluate(honest);
  EXPECT_TRUE(o.passed()) << json::serialize(o.body);
}

// A program's device metrics come from one more run of its benchmark command, counting the
// kernels its timing mode selects (the GPU side: tests/gpu/program_device_metrics_test.cpp).
// Wherever none can be counted each side says why, and the verdict and the times stand.
TEST_F(ProgramJob, DeviceMetricsOfAProgramSayWhyWhereNoKernelCanBeCounted) {
  json::object problem = load_problem("host_saxpy");
  problem["benchmark_command"] = "./test.out";
  const auto reasons = [&](const json::object& r) {
    const Outcome o = evaluate(r);
    EXPECT_TRUE(o.passed()) << json::serialize(o.body);
    const json::object& metadata = o.body.at("kernel_exec_result").at("metadata").as_object();
    std::vector<std::string> out;
    for (const char* side : {"device_metrics", "ref_device_metrics"}) {
      const json::value* m = metadata.if_contains(side);
      if (m == nullptr) {
        out.push_back(std::string(side) + " missing");
        continue;
      }
      EXPECT_FALSE(m->at("available").as_bool()) << json::serialize(*m);
      out.push_back(std::string(m->at("reason").as_string()));
    }
    return out;
  };

  // Process wall clock: no kernel is timed, so none is counted; the speedup is still there.
  json::object r = program_request(problem, "pass", {{"benchmark", true}});
  r["device_metrics"] = true;
  for (const auto& why : reasons(r))
    EXPECT_THAT(why, HasSubstr("timing mode 'process' times no kernels")) << why;

  // Another run of the benchmark must fit in what is left of the job's timeout (here 9 s, of
  // which the job used some and 5 s are kept back): otherwise it is not started, and the job,
  // which fits, is not ended by it.
  json::object tight = r;
  tight["timeout"] = 9;
  for (const auto& why : reasons(tight))
    EXPECT_THAT(why, HasSubstr("too little of the job's timeout was left")) << why;

  // A timing mode that names kernels, on a program that launches none: the benchmark itself
  // fails (no profile), and the metrics say so rather than run it again.
  problem["timing_mode"] = json::object{{"type", "kernels"}};
  r = program_request(problem, "pass", {{"benchmark", true}});
  r["device_metrics"] = json::array{"memory"};
  const Outcome failed = evaluate(r);
  const json::object& metadata = failed.body.at("kernel_exec_result").at("metadata").as_object();
  EXPECT_THAT(std::string(metadata.at("device_metrics").at("reason").as_string()),
              HasSubstr("not collected: the benchmark failed"))
      << json::serialize(metadata);

  // Without performance mode there is no benchmark run to count: the candidate's side says so.
  r = program_request(problem, "pass");
  r["device_metrics"] = true;
  const Outcome plain = evaluate(r);
  EXPECT_TRUE(plain.passed()) << json::serialize(plain.body);
  EXPECT_THAT(std::string(plain.body.at("kernel_exec_result")
                              .at("metadata")
                              .at("device_metrics")
                              .at("reason")
                              .as_string()),
              HasSubstr("come from its benchmark runs"));
}

TEST_F(ProgramJob, TheRegistryRefusesAProgramTypeWithoutAProblemOrInACompare) {
  const auto check = [](const json::object& r, request::EvalRequest::Mode mode) {
    try {
      job::check_against_registry(request::parse_request(json::value(r), mode), built_registry());
    } catch (const request::RequestError& e) {
      return e.path() + ": " + e.message();
    }
    return std::string("(accepted)");
  };
  const json::object no_problem{
      {"kernel", json::object{{"kernel_type", "cuda_program"}, {"source_code", "int main() {}"}}}};
  EXPECT_THAT(check(no_problem, request::EvalRequest::Mode::evaluate),
              HasSubstr("kernel.metadata.problem: is required for kernel type 'cuda_program'"));
  json::object r = program_request(load_problem("host_saxpy"), "pass");
  json::object compare{{"ref_kernel", r.at("kernel")}, {"custom_kernel", r.at("kernel")}};
  EXPECT_THAT(check(compare, request::EvalRequest::Mode::compare),
              HasSubstr("custom_kernel.kernel_type: 'cuda_program' is evaluate-only"));
  r["kernel"].as_object()["metadata"].as_object()["solution"].as_object()["files"] =
      json::array{json::object{{"path", "../../escape.cpp"}, {"content", "x"}}};
  EXPECT_THAT(check(r, request::EvalRequest::Mode::evaluate),
              HasSubstr("kernel.metadata.solution.files[0].path: must not contain '..'"));
}

} // namespace
} // namespace keval::test
