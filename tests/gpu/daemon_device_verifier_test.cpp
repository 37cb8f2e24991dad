// `keval serve --device-verifier` on a GPU (worker/verifier/device_verifier.hpp): one real
// `keval-worker --device-verifier 0` holds the GPU's context for the jobs' trusted workers. Its
// cuda jobs reach the verdicts a daemon without it reaches; a verifier that dies is started again,
// and the jobs meanwhile open contexts of their own and say so; one killed under a running job
// ends that job as keval's failure, never the kernel's. Skipped, with the reason, only when no
// CUDA device is usable.
#include "support/cuda_device.hpp"
#include "support/daemon_harness.hpp"

#include <algorithm>
#include <csignal>
#include <string>

#include <boost/json/parse.hpp>
#include <gtest/gtest.h>

namespace keval::test::daemon {
namespace {

json::object example(const char* name) {
  return json::parse(read_file(fs::path(KEVAL_TEST_SOURCE_DIR) / "examples" / name)).as_object();
}

// The compare example with a candidate that gets one element of a million wrong.
json::object one_element_wrong() {
  json::object request = example("cuda_vector_add_compare.json");
  json::object custom = request.at("ref_kernel").as_object();
  std::string source(custom.at("source_code").as_string());
  const std::string right = "out[i] = x[i] + y[i];";
  source.replace(source.find(right), right.size(),
                 "out[i] = x[i] + y[i] + (i == 77777 ? 1.0f : 0.0f);");
  custom["source_code"] = source;
  request["custom_kernel"] = std::move(custom);
  return request;
}

json::object verifiers_of(const fs::path& socket) {
  return HttpClient(socket).get("/health").json_body().at("device_verifiers").as_object();
}

const json::object& exec_result(const json::object& body) {
  return body.at("kernel_exec_result").as_object();
}

// The job's device, as its result describes it.
const json::object& device_of(const json::object& body) {
  return exec_result(body).at("metadata").at("device").as_object();
}

struct Verdicts {
  bool evaluate = false, compare = false, wrong = false;
};

Verdicts judge(const fs::path& socket, bool verifier_expected) {
  Verdicts v;
  const std::pair<const char*, json::object> jobs[] = {
      {"/evaluate", example("cuda_vector_add.json")},
      {"/compare", example("cuda_vector_add_compare.json")},
      {"/compare", one_element_wrong()}};
  bool* out[] = {&v.evaluate, &v.compare, &v.wrong};
  for (size_t k = 0; k < 3; ++k) {
    const auto r = HttpClient(socket).post(jobs[k].first, jobs[k].second);
    EXPECT_EQ(r.status, 200u) << r.body();
    const json::object body = r.json_body();
    *out[k] = exec_result(body).at("correctness").as_bool();
    const json::value* used = device_of(body).if_contains("device_verifier");
    if (verifier_expected) {
      EXPECT_TRUE(used != nullptr && used->at("used") == true) << json::serialize(device_of(body));
    } else {
      EXPECT_EQ(used, nullptr) << json::serialize(device_of(body));
    }
  }
  return v;
}

TEST(DaemonDeviceVerifier, CudaJobsUseItAndReachTheVerdictsOfADaemonWithout) {
  KEVAL_SKIP_WITHOUT_CUDA_DEVICE();
  Verdicts with, without;
  {
    DaemonDirs dirs;
    DaemonProcess daemon(dirs.state(), dirs.socket(), {"--warm-workers", "0", "--device-verifier"});
    ASSERT_TRUE(daemon.wait_ready()) << daemon.log_tail();
    const json::object verifiers = verifiers_of(dirs.socket());
    ASSERT_EQ(verifiers.at("enabled"), true) << json::serialize(verifiers);
    const json::object& gpu = verifiers.at("gpus").at("0").as_object();
    ASSERT_EQ(gpu.at("ready"), true) << json::serialize(verifiers) << daemon.log_tail();
    EXPECT_EQ(json::serialize(verifiers).find("token"), std::string::npos)
        << "/health shows the verifier's token";
    const auto pid = static_cast<pid_t>(gpu.at("pid").as_int64());
    std::string command = read_file("/proc/" + std::to_string(pid) + "/cmdline");
    std::replace(command.begin(), command.end(), '\0', ' ');
    EXPECT_NE(command.find("keval-worker --device-verifier 0"), std::string::npos) << command;
    with = judge(dirs.socket(), true);
    daemon.signal(SIGTERM);
    ASSERT_TRUE(daemon.wait_exit(std::chrono::seconds(60))) << daemon.log_tail();
    EXPECT_NE(::kill(pid, 0), 0) << "the verifier outlived the daemon";
  }
  {
    DaemonDirs dirs;
    // Without, even where the whole suite runs with KEVAL_DEVICE_VERIFIER=1.
    DaemonProcess daemon(dirs.state(), dirs.socket(), {"--warm-workers", "0"},
                         {"KEVAL_DEVICE_VERIFIER=0"});
    ASSERT_TRUE(daemon.wait_ready()) << daemon.log_tail();
    EXPECT_EQ(verifiers_of(dirs.socket()).at("enabled"), false);
    without = judge(dirs.socket(), false);
  }
  EXPECT_TRUE(with.evaluate);
  EXPECT_TRUE(with.compare);
  EXPECT_FALSE(with.wrong);
  EXPECT_EQ(with.evaluate, without.evaluate);
  EXPECT_EQ(with.compare, without.compare);
  EXPECT_EQ(with.wrong, without.wrong);
}

TEST(DaemonDeviceVerifier, OneThatDiesIsStartedAgainAndJobsMeanwhileStillReachTheirVerdicts) {
  KEVAL_SKIP_WITHOUT_CUDA_DEVICE();
  DaemonDirs dirs;
  DaemonProcess daemon(dirs.state(), dirs.socket(), {"--warm-workers", "0", "--device-verifier"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log_tail();
  const json::object first = verifiers_of(dirs.socket()).at("gpus").at("0").as_object();
  ASSERT_EQ(first.at("ready"), true) << json::serialize(first);
  const auto pid = static_cast<pid_t>(first.at("pid").as_int64());
  ASSERT_EQ(::kill(pid, SIGKILL), 0);

  // A job at once finds it gone (and opens a context of its own, saying why) or started again
  // already (the daemon watches its verifiers); either way its verdict is the same.
  const auto r = HttpClient(dirs.socket()).post("/evaluate", example("cuda_vector_add.json"));
  ASSERT_EQ(r.status, 200u) << r.body();
  const json::object body = r.json_body();
  EXPECT_TRUE(exec_result(body).at("correctness").as_bool()) << r.body();
  const json::object& note = device_of(body).at("device_verifier").as_object();
  if (note.at("used") == false)
    EXPECT_FALSE(note.at("reason").as_string().empty()) << json::serialize(note);

  json::object again;
  ASSERT_TRUE(eventually(
      [&] {
        again = verifiers_of(dirs.socket()).at("gpus").at("0").as_object();
        return again.at("ready") == true && again.at("starts").as_int64() >= 2;
      },
      std::chrono::seconds(30)))
      << json::serialize(again) << daemon.log_tail();
  EXPECT_NE(again.at("pid").as_int64(), pid);
  const auto after = HttpClient(dirs.socket()).post("/evaluate", example("cuda_vector_add.json"));
  ASSERT_EQ(after.status, 200u) << after.body();
  EXPECT_EQ(device_of(after.json_body()).at("device_verifier").at("used"), true) << after.body();
}

TEST(DaemonDeviceVerifier, OneKilledUnderARunningJobEndsItAsKevalsFailureNotTheKernels) {
  KEVAL_SKIP_WITHOUT_CUDA_DEVICE();
  DaemonDirs dirs;
  DaemonProcess daemon(dirs.state(), dirs.socket(), {"--warm-workers", "0", "--device-verifier"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log_tail();
  const auto pid =
      static_cast<pid_t>(verifiers_of(dirs.socket()).at("gpus").at("0").at("pid").as_int64());
  // Many samples of a kernel that takes a while: the job is still profiling when it is killed.
  json::object request = example("cuda_vector_add_compare.json");
  request["num_trials"] = 5000;
  request["timeout"] = 300;
  const auto submitted = HttpClient(dirs.socket()).post("/compare", with_async(request));
  ASSERT_EQ(submitted.status, 202u) << submitted.body();
  const std::string job(submitted.json_body().at("job_id").as_string());
  ASSERT_TRUE(wait_status(dirs.socket(), job, "profiling")) << daemon.log_tail();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  const json::object view = wait_finished(dirs.socket(), job);
  const json::object& result = view.at("result").as_object();
  EXPECT_EQ(result.at("status"), "failed") << json::serialize(result);
  EXPECT_EQ(result.at("error").at("class"), "infrastructure") << json::serialize(result);
  EXPECT_NE(std::string(result.at("error").at("message").as_string()).find("device verifier"),
            std::string::npos)
      << json::serialize(result);
}

} // namespace
} // namespace keval::test::daemon
