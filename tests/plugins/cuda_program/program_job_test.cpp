// cuda_program jobs through keval's CLI on our own CPU problems (tests/compute_eval/problems,
// compute_capability null): the harness compiled once and reused with verdicts identical to the
// plain build command, problems this machine cannot run reported skipped, solutions that would
// end the harness's process themselves failed, and the registry's checks of a program request.
#include "job/job_runner.hpp"
#include "request/parse.hpp"
#include "support/program_problems.hpp"
#include "support/test_env.hpp"

#include <gmock/gmock.h>

#include <fstream>
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
  TempDir state_; // one state directory: the harness and build caches are shared by its jobs
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

const json::object& cache_of(const Outcome& o) {
  return o.program().at("build").at("cache").as_object();
}

// The kept builds' directory under the test's state directory.
fs::path build_cache_root(const fs::path& state) {
  for (const auto& e : fs::recursive_directory_iterator(state))
    if (e.is_directory() && e.path().filename() == "program-build")
      return e.path();
  return {};
}

// A copy of `request` whose solution has `text` appended to its first file.
json::object with_appended(json::object request, const std::string& text) {
  json::object& file =
      request.at("kernel").at("metadata").at("solution").at("files").as_array().at(0).as_object();
  file["content"] = std::string(file.at("content").as_string()) + text;
  return request;
}

// pass@k samples and resubmissions repeat: a solution whose files were built before runs that
// program, with the verdict and the compiler output of a build of its own. Another byte, a failed
// build, the plain command or a damaged entry build afresh.
TEST_F(ProgramJob, AnIdenticalSolutionRunsTheProgramBuiltBeforeWithTheSameVerdict) {
  if (!have_nvcc())
    GTEST_SKIP() << "no nvcc on this machine: nvcc_host_sum's build command needs it";
  const json::object problem = load_problem("nvcc_host_sum");
  for (const std::string variant : {"pass", "wrong"}) {
    const Outcome first = evaluate(program_request(problem, variant));
    const Outcome again = evaluate(program_request(problem, variant));
    EXPECT_FALSE(cache_of(first).at("reused").as_bool()) << json::serialize(cache_of(first));
    EXPECT_TRUE(cache_of(again).at("reused").as_bool()) << json::serialize(cache_of(again));
    EXPECT_EQ(cache_of(first).at("key"), cache_of(again).at("key"));
    EXPECT_EQ(first.passed(), variant == "pass") << variant;
    EXPECT_EQ(again.passed(), first.passed()) << variant;
    EXPECT_EQ(again.exit_code, first.exit_code) << variant;
    EXPECT_EQ(again.program().at("build").at("output"), first.program().at("build").at("output"));
    EXPECT_EQ(again.program().at("test").at("stdout"), first.program().at("test").at("stdout"));
  }

  // One more byte is another solution: built, not reused.
  const Outcome changed =
      evaluate(with_appended(program_request(problem, "pass"), "\n// sample 2\n"));
  EXPECT_FALSE(cache_of(changed).at("reused").as_bool());
  EXPECT_TRUE(changed.passed());

  // A failed build is never kept: each attempt compiles and fails with the compiler's output.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const Outcome broken = evaluate(program_request(problem, "build_error"));
    EXPECT_FALSE(cache_of(broken).at("reused").as_bool()) << attempt;
    EXPECT_FALSE(broken.body.at("kernel_exec_result").at("compiled").as_bool()) << attempt;
    EXPECT_THAT(std::string(broken.program().at("build").at("output").as_string()),
                HasSubstr("error"))
        << attempt;
  }

  // The plain command keeps nothing, and says why.
  const Outcome plain = evaluate(program_request(problem, "pass", {{"harness_reuse", false}}));
  EXPECT_FALSE(cache_of(plain).at("reused").as_bool());
  EXPECT_THAT(std::string(cache_of(plain).at("unavailable").as_string()),
              HasSubstr("plain command"));

  // A damaged entry (every kept file's bytes changed) is found out, rebuilt and replaced.
  const fs::path root = build_cache_root(state_.path());
  ASSERT_FALSE(root.empty()) << "no program-build cache under " << state_.path();
  size_t damaged = 0;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file() && e.path().extension() == ".bin") {
      fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
      std::ofstream(e.path(), std::ios::binary | std::ios::trunc) << "damaged";
      ++damaged;
    }
  EXPECT_GT(damaged, 0u);
  const Outcome rebuilt = evaluate(program_request(problem, "pass"));
  EXPECT_FALSE(cache_of(rebuilt).at("reused").as_bool());
  EXPECT_TRUE(rebuilt.passed());
  const Outcome after = evaluate(program_request(problem, "pass"));
  EXPECT_TRUE(cache_of(after).at("reused").as_bool());
  EXPECT_TRUE(after.passed());
}

// A hostile solution that knows keval's layout tries to overwrite, replace and add to the builds
// other jobs kept, from its test program. The cache lies in the state directory, which the
// sandbox's filesystem layer keeps out of reach: the kept build is unchanged and the next
// identical solution still runs the honest program.
TEST_F(ProgramJob, ASolutionCannotChangeABuildAnotherJobKept) {
  if (!have_nvcc())
    GTEST_SKIP() << "no nvcc on this machine: nvcc_host_sum's build command needs it";
  const json::object problem = load_problem("nvcc_host_sum");
  const Outcome victim = evaluate(program_request(problem, "pass"));
  ASSERT_TRUE(victim.passed());
  const json::object& layers =
      victim.body.at("kernel_exec_result").at("metadata").at("sandbox").at("layers").as_object();
  if (!layers.contains("filesystem") || !layers.at("filesystem").at("active").as_bool())
    GTEST_SKIP() << "the filesystem layer is not applied here: "
                 << json::serialize(layers.if_contains("filesystem") != nullptr
                                        ? layers.at("filesystem")
                                        : json::value("not reported"));
  const fs::path root = build_cache_root(state_.path());
  ASSERT_FALSE(root.empty());
  std::map<fs::path, std::string> kept;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file())
      kept[e.path()] = read_text(e.path());
  ASSERT_FALSE(kept.empty());

  const std::string attacker = R"(#include "host_sum.h"
#include <dirent.h>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

static void tamper(const std::string& dir) {
  ::close(::open((dir + "/planted.bin").c_str(), O_CREAT | O_WRONLY, 0644));
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr)
    return;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..")
      continue;
    const std::string path = dir + "/" + name;
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      tamper(path);
      continue;
    }
    ::chmod(path.c_str(), 0666);
    const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC);
    if (fd >= 0) {
      (void)!::write(fd, "pwned", 5);
      ::close(fd);
    }
    ::rename(path.c_str(), (path + ".moved").c_str());
  }
  ::closedir(d);
}

long long host_sum(const int* values, int n) {
  tamper(")" + root.string() + R"(");
  long long total = 0;
  for (int i = 0; i < n; ++i)
    total += values[i];
  return total;
}
)";
  json::object request = program_request(problem, "pass");
  request.at("kernel")
      .at("metadata")
      .at("solution")
      .at("files")
      .as_array()
      .at(0)
      .as_object()["content"] = attacker;
  const Outcome attack = evaluate(request);
  EXPECT_FALSE(cache_of(attack).at("reused").as_bool());

  for (const auto& [path, bytes] : kept)
    EXPECT_EQ(read_text(path), bytes) << path;
  for (const auto& e : fs::recursive_directory_iterator(root))
    EXPECT_EQ(e.path().string().find("planted"), std::string::npos) << e.path();
  const Outcome again = evaluate(program_request(problem, "pass"));
  EXPECT_TRUE(cache_of(again).at("reused").as_bool());
  EXPECT_TRUE(again.passed());
}

TEST_F(ProgramJob, ACommandThatCannotBeSplitBuildsAsWrittenAndSaysWhy) {
  const Outcome o = evaluate(program_request(load_problem("host_saxpy"), "pass"));
  ASSERT_TRUE(o.passed()) << json::serialize(o.body);
  EXPECT_THAT(std::string(o.program().at("build").at("harness").at("unavailable").as_string()),
              HasSubstr("compiler is g++"));
}

// A program's build waits in the background like a runner's compile (its steps at nice 10
// while the job has no device), and its test runs in the foreground once the job is granted
// its device: what each step's own `nice` prints.
TEST_F(ProgramJob, BuildStepsWaitInTheBackgroundAndTheTestRunsInTheForeground) {
  json::object problem = load_problem("host_saxpy");
  problem["build_command"] =
      std::string(problem["build_command"].as_string()) + " && echo KEVAL_BUILD_NICE=$(nice)";
  problem["test_command"] = "echo KEVAL_TEST_NICE=$(nice) && ./test.out";
  const Outcome o = evaluate(program_request(problem, "pass"));
  ASSERT_TRUE(o.passed()) << json::serialize(o.body);
  const std::string said(o.program().at("cpu_priority").as_string());
  const std::string shown = json::serialize(o.program());
  EXPECT_THAT(shown, HasSubstr("KEVAL_TEST_NICE=0")) << said;
  if (said.find("at nice 10") == std::string::npos) {
    EXPECT_THAT(shown, HasSubstr("KEVAL_BUILD_NICE=0")) << said;
    GTEST_SKIP() << "steps are not sent to the background here: " << said;
  }
  EXPECT_THAT(shown, HasSubstr("KEVAL_BUILD_NICE=10")) << said;
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
