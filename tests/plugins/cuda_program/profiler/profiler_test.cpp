// keval_program_profiler (plugins/cuda_program/profiler) injected into profiler_probe, a CUDA
// program with known work: what the report says must be exactly that work. The tests that launch
// kernels skip, with the reason, without a CUDA device (KEVAL_REQUIRE_GPU=1 makes that a
// failure); the ones whose program makes no CUDA call run anywhere.

#include "support/cuda_device.hpp"

#include <boost/json.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

extern char** environ;

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

constexpr int kBenchLaunches = 7;
constexpr uint64_t kBytes = (1u << 18) * sizeof(float); // profiler_probe.cu's kBytes

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct ProbeRun {
  int exit_code = -1; // -1: did not exit normally
  std::string out, err;
};

// Runs the probe in `dir` with the injection environment (when `inject`), as keval's launcher
// does; KEVAL_PROFILE_OUTPUT is set only when `output` is not empty.
ProbeRun run_probe(const fs::path& dir, std::vector<std::string> args, bool inject,
                   const fs::path& output = {}) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (name != "CUDA_INJECTION64_PATH" && name != "NVTX_INJECTION64_PATH" &&
        name != "KEVAL_PROFILE_OUTPUT")
      env.push_back(entry);
  }
  if (inject) {
    env.push_back(std::string("CUDA_INJECTION64_PATH=") + KEVAL_PROFILER_LIB);
    env.push_back(std::string("NVTX_INJECTION64_PATH=") + KEVAL_PROFILER_LIB);
  }
  if (!output.empty())
    env.push_back("KEVAL_PROFILE_OUTPUT=" + output.string());
  args.insert(args.begin(), KEVAL_PROFILER_PROBE);

  std::vector<char*> argv, envp;
  for (std::string& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env)
    envp.push_back(e.data());
  envp.push_back(nullptr);

  const fs::path out_path = dir / "probe.stdout", err_path = dir / "probe.stderr";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  pid_t pid = -1;
  ProbeRun run;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    run.err = std::string("posix_spawn failed: ") + std::strerror(rc);
    return run;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status))
    run.exit_code = WEXITSTATUS(status);
  run.out = read_file(out_path);
  run.err = read_file(err_path);
  return run;
}

class ProfilerTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "keval-profiler-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  json::object load(const fs::path& path) {
    const std::string text = read_file(path);
    boost::system::error_code ec;
    json::value v = json::parse(text, ec);
    EXPECT_FALSE(ec) << "report is not JSON (" << ec.message() << "):\n" << text;
    if (ec || !v.is_object())
      return {};
    return v.as_object();
  }

  fs::path dir_;
};

double num(const json::value& v) {
  return v.to_number<double>();
}
uint64_t count(const json::value& v) {
  return v.to_number<uint64_t>();
}

const json::object* kernel_named(const json::object& report, const std::string& name) {
  for (const json::value& k : report.at("kernels").as_array())
    if (k.as_object().at("name").as_string() == name)
      return &k.as_object();
  return nullptr;
}

TEST_F(ProfilerTest, RecordsKernelsCopiesAndRangesOfTheProgram) {
  KEVAL_SKIP_WITHOUT_CUDA_DEVICE();
  const fs::path report_path = dir_ / "report.json";
  const ProbeRun run = run_probe(dir_, {std::to_string(kBenchLaunches)}, true, report_path);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("probe ok"), std::string::npos) << run.out;
  ASSERT_TRUE(fs::exists(report_path)) << "no report written; probe stderr:\n" << run.err;
  const json::object report = load(report_path);
  ASSERT_FALSE(report.empty());
  SCOPED_TRACE(json::serialize(report));

  EXPECT_TRUE(report.at("errors").as_array().empty());
  EXPECT_EQ(count(report.at("records_dropped")), 0u);

  // Kernels: names as ComputeEval shows them (demangled, without the parameter list).
  const json::array& kernels = report.at("kernels").as_array();
  EXPECT_EQ(kernels.size(), 2u);
  const json::object* scale = kernel_named(report, "scale_kernel");
  const json::object* axpy = kernel_named(report, "void axpy_kernel<float>");
  ASSERT_NE(scale, nullptr);
  ASSERT_NE(axpy, nullptr);
  EXPECT_EQ(count(scale->at("invocations")), 4u);
  EXPECT_EQ(count(axpy->at("invocations")), static_cast<uint64_t>(kBenchLaunches));
  double kernel_ms = 0;
  uint64_t invocations = 0;
  for (const json::value& kv : kernels) {
    const json::object& k = kv.as_object();
    const double total = num(k.at("total_duration_ms")), avg = num(k.at("avg_duration_ms"));
    EXPECT_GT(total, 0.0);
    EXPECT_GT(avg, 0.0);
    EXPECT_NEAR(avg * static_cast<double>(count(k.at("invocations"))), total, 1e-5 + total * 1e-6);
    kernel_ms += total;
    invocations += count(k.at("invocations"));
  }

  // Copies: exactly one of B bytes each way.
  const json::object& copies = report.at("memory_transfers").as_object();
  EXPECT_EQ(copies.size(), 2u);
  for (const char* kind : {"HtoD", "DtoH"}) {
    ASSERT_TRUE(copies.contains(kind)) << kind;
    const json::object& c = copies.at(kind).as_object();
    EXPECT_EQ(count(c.at("count")), 1u) << kind;
    EXPECT_EQ(count(c.at("total_bytes")), kBytes) << kind;
    EXPECT_GT(num(c.at("total_time_ms")), 0.0) << kind;
    EXPECT_GT(num(c.at("bandwidth_gbps")), 0.0) << kind;
  }
  const json::object& htod_nvtx = copies.at("HtoD").as_object().at("nvtx").as_object();
  for (const char* range : {"process_wide", "setup", "upload"})
    EXPECT_EQ(count(htod_nvtx.at(range).as_object().at("bytes")), kBytes) << range;
  EXPECT_EQ(htod_nvtx.size(), 3u);
  const json::object& dtoh_nvtx = copies.at("DtoH").as_object().at("nvtx").as_object();
  EXPECT_EQ(count(dtoh_nvtx.at("download").as_object().at("bytes")), kBytes);
  EXPECT_EQ(dtoh_nvtx.size(), 1u);

  // Ranges: each gets what was launched on its thread while it was open; nested ones each get it;
  // start/end ranges get what any thread launched.
  const json::object& ranges = report.at("nvtx_ranges").as_object();
  struct Want {
    const char* name;
    uint64_t kernels, copies, bytes;
  };
  const Want wants[] = {{"process_wide", kBenchLaunches + 3u, 1, kBytes},
                        {"setup", 2, 1, kBytes},
                        {"upload", 0, 1, kBytes},
                        {"bench", static_cast<uint64_t>(kBenchLaunches), 0, 0},
                        {"scoped", 1, 0, 0},
                        {"download", 0, 1, kBytes}};
  EXPECT_EQ(ranges.size(), std::size(wants));
  for (const Want& want : wants) {
    SCOPED_TRACE(want.name);
    ASSERT_TRUE(ranges.contains(want.name));
    const json::object& r = ranges.at(want.name).as_object();
    const double wall = num(r.at("wall_clock_time_ms"));
    EXPECT_GT(wall, 0.0);
    EXPECT_EQ(count(r.at("kernel_invocations")), want.kernels);
    EXPECT_EQ(count(r.at("memcpy_count")), want.copies);
    EXPECT_EQ(count(r.at("memcpy_bytes")), want.bytes);
    if (want.kernels > 0) {
      EXPECT_GT(num(r.at("kernel_time_ms")), 0.0);
      EXPECT_LE(num(r.at("kernel_time_ms")), wall); // every range synchronizes before it ends
    } else {
      EXPECT_EQ(num(r.at("kernel_time_ms")), 0.0);
    }
  }
  // bench's kernel time is exactly its axpy launches.
  EXPECT_NEAR(num(ranges.at("bench").as_object().at("kernel_time_ms")),
              num(axpy->at("total_duration_ms")), 1e-5);

  const json::object& summary = report.at("summary").as_object();
  EXPECT_EQ(count(summary.at("total_kernels")), 2u);
  EXPECT_EQ(count(summary.at("total_kernel_invocations")), invocations);
  EXPECT_EQ(invocations, kBenchLaunches + 4u);
  EXPECT_NEAR(num(summary.at("total_kernel_time_ms")), kernel_ms, 1e-5);
  EXPECT_EQ(count(summary.at("total_memory_transfers")), 2u);
  EXPECT_GE(num(summary.at("application_duration_ms")), kernel_ms);
  EXPECT_GE(num(summary.at("application_duration_ms")),
            num(ranges.at("process_wide").as_object().at("wall_clock_time_ms")));

  const json::object& profiler = report.at("profiler").as_object();
  EXPECT_TRUE(profiler.at("api_tracing").as_bool());
  EXPECT_TRUE(profiler.at("per_thread_ranges").as_bool());
  EXPECT_EQ(count(profiler.at("unattributed_records")), 0u);
  EXPECT_EQ(count(profiler.at("incomplete_records")), 0u);
}

TEST_F(ProfilerTest, LeavesTheExitCodeAndOutputOfTheProgramAlone) {
  KEVAL_SKIP_WITHOUT_CUDA_DEVICE();
  const ProbeRun plain = run_probe(dir_, {"3", "--exit-code", "3"}, false);
  ASSERT_EQ(plain.exit_code, 3) << plain.out << plain.err;
  EXPECT_FALSE(fs::exists(dir_ / "profile.json"));

  const fs::path report_path = dir_ / "report.json";
  const ProbeRun profiled = run_probe(dir_, {"3", "--exit-code", "3"}, true, report_path);
  EXPECT_EQ(profiled.exit_code, 3) << profiled.err;
  EXPECT_EQ(profiled.out, plain.out);
  EXPECT_EQ(profiled.err.find("keval-profiler:"), std::string::npos) << profiled.err;
  ASSERT_TRUE(fs::exists(report_path)) << profiled.err;
  const json::object report = load(report_path);
  ASSERT_FALSE(report.empty());
  EXPECT_EQ(count(report.at("summary").as_object().at("total_kernel_invocations")), 3u + 4u);
  // The temporary file of the atomic write is gone.
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename().string().find("report.json.tmp"), std::string::npos);
}

// CUDA loads the library at cuInit: a program that never calls CUDA (nor NVTX) never loads it,
// and no report is written. keval reports "no profile written" for such a run.
TEST_F(ProfilerTest, ProgramWithoutCudaOrNvtxGetsNoReport) {
  const ProbeRun run = run_probe(dir_, {"--no-cuda"}, true);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_FALSE(fs::exists(dir_ / "profile.json"));
  EXPECT_EQ(run.err, "");
}

// NVTX loads the library at the first NVTX call: a program with NVTX ranges and no CUDA gets a
// report with no kernels, its ranges' wall clock, at the default path (./profile.json).
TEST_F(ProfilerTest, ProgramWithNvtxButNoCudaGetsReportWithZeroKernels) {
  const ProbeRun run = run_probe(dir_, {"--nvtx-only", "30"}, true);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const fs::path report_path = dir_ / "profile.json";
  ASSERT_TRUE(fs::exists(report_path)) << run.err;
  const json::object report = load(report_path);
  ASSERT_FALSE(report.empty());
  SCOPED_TRACE(json::serialize(report));
  EXPECT_TRUE(report.at("errors").as_array().empty());
  EXPECT_TRUE(report.at("kernels").as_array().empty());
  EXPECT_TRUE(report.at("memory_transfers").as_object().empty());
  const json::object& summary = report.at("summary").as_object();
  EXPECT_EQ(count(summary.at("total_kernels")), 0u);
  EXPECT_EQ(count(summary.at("total_kernel_invocations")), 0u);
  EXPECT_EQ(num(summary.at("total_kernel_time_ms")), 0.0);
  const json::object& cpu = report.at("nvtx_ranges").as_object().at("cpu").as_object();
  EXPECT_GE(num(cpu.at("wall_clock_time_ms")), 30.0);
  EXPECT_EQ(count(cpu.at("kernel_invocations")), 0u);
  EXPECT_GE(num(summary.at("application_duration_ms")), num(cpu.at("wall_clock_time_ms")));
  // The profiler did not pull the CUDA driver into a program that never used CUDA.
  EXPECT_NE(run.out.find("driver loaded: no"), std::string::npos) << run.out;
}

} // namespace
