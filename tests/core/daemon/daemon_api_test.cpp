// The HTTP API as its clients meet it: curl over the Unix socket, a C++ client with keep-alive,
// the V2 contract's request and response shapes, and the status code of every kind of answer.
#include "support/daemon_harness.hpp"

#include <algorithm>
#include <regex>

#include <gtest/gtest.h>

namespace keval::test::daemon {
namespace {

// curl with the arguments; fails (never skips) when curl is missing: scripts/setup installs it.
supervisor::CommandResult curl(std::vector<std::string> args) {
  args.insert(args.begin(), {"curl", "-sS", "--max-time", "150"});
  return supervisor::run_command("/usr/bin/env", args, 180s);
}

class DaemonApi : public ::testing::Test {
protected:
  void start(std::vector<std::string> args = {}) {
    daemon_.emplace(dirs_.state(), dirs_.socket(), std::move(args));
    ASSERT_TRUE(daemon_->wait_ready()) << daemon_->log();
  }
  void SetUp() override { start(); }
  fs::path socket() const { return dirs_.socket(); }
  HttpClient client() { return HttpClient(socket()); }

  DaemonDirs dirs_;
  std::optional<DaemonProcess> daemon_;
};

void expect_seed_response_shape(const json::object& body) {
  for (const char* key : {"job_id", "status", "kernel_exec_result", "ref_runtime",
                          "compilation_error", "validation_error"})
    EXPECT_TRUE(body.contains(key)) << key << " missing in " << json::serialize(body);
  const auto& exec = body.at("kernel_exec_result").as_object();
  for (const char* key : {"compiled", "correctness", "runtime", "runtime_stats", "metadata"})
    EXPECT_TRUE(exec.contains(key)) << key;
}

TEST_F(DaemonApi, SeedCompareWithCurlOverTheSocketGetsTheSeedResponse) {
  const auto request = write_request(dirs_.tmp.path(), "compare.json", fault_compare({}, {}));
  const auto body_path = dirs_.tmp.path() / "body.json";
  const auto headers_path = dirs_.tmp.path() / "headers.txt";
  const auto r =
      curl({"--unix-socket", socket().string(), "-o", body_path.string(), "-D",
            headers_path.string(), "-w", "%{http_code}", "-H", "Content-Type: application/json",
            "--data-binary", "@" + request.string(), "http://localhost/compare"});
  ASSERT_EQ(r.exit_code, 0) << "curl failed (missing? scripts/setup installs it): " << r.err;
  EXPECT_EQ(r.out, "200");
  const auto body = json::parse(read_file(body_path)).as_object();
  expect_seed_response_shape(body);
  EXPECT_EQ(body.at("status"), "success");
  const auto& exec = body.at("kernel_exec_result").as_object();
  EXPECT_TRUE(exec.at("compiled").as_bool());
  EXPECT_TRUE(exec.at("correctness").as_bool());
  EXPECT_GT(exec.at("runtime").to_number<double>(), 0.0);
  for (const char* key :
       {"mean", "std", "min", "max", "median", "percentile_95", "percentile_99", "count"})
    EXPECT_TRUE(exec.at("runtime_stats").as_object().contains(key)) << key;
  EXPECT_TRUE(body.at("ref_runtime").is_object());
  EXPECT_NE(read_file(headers_path).find("X-GPU-Type: cpu"), std::string::npos)
      << read_file(headers_path);
}

TEST_F(DaemonApi, HealthStatsPluginsAndMetricsAnswerCurl) {
  auto get = [&](const std::string& route) {
    const auto r = curl(
        {"--unix-socket", socket().string(), "-w", "\n%{http_code}", "http://localhost" + route});
    EXPECT_EQ(r.exit_code, 0) << "curl failed (missing? scripts/setup installs it): " << r.err;
    const size_t split = r.out.rfind('\n');
    EXPECT_NE(split, std::string::npos) << r.out;
    EXPECT_EQ(r.out.substr(split + 1), "200") << route;
    return r.out.substr(0, split);
  };
  const auto health = json::parse(get("/health")).as_object();
  EXPECT_EQ(health.at("status"), "ok");
  EXPECT_EQ(health.at("version"), "0.1.0");
  const auto& types = health.at("plugins").as_array(); // fault, and whatever the build has
  EXPECT_NE(std::find(types.begin(), types.end(), json::value("fault")), types.end()) << types;
  EXPECT_TRUE(health.at("gpus").is_array());
  EXPECT_TRUE(health.contains("gpu_discovery") || !health.at("gpus").as_array().empty());
  // The CUDA driver is held only where there is a GPU (daemon/driver_hold.hpp).
  if (health.at("gpus").as_array().empty())
    EXPECT_EQ(health.at("driver"), (json::object{{"held", false}, {"reason", "no GPU"}}));
  else
    EXPECT_TRUE(health.at("driver").at("held").is_bool()) << json::serialize(health);

  const auto stats = json::parse(get("/stats")).as_object();
  for (const char* key :
       {"jobs", "compilation", "validation", "profiling", "throughput", "gpus", "http_responses"})
    EXPECT_TRUE(stats.contains(key)) << key;
  for (const char* status :
       {"submitted", "compiling", "validating", "profiling", "completed", "failed"})
    EXPECT_TRUE(stats.at("jobs").at("by_status").as_object().contains(status)) << status;

  const auto plugins = json::parse(get("/plugins")).as_object();
  const auto& found = plugins.at("plugins").as_array();
  EXPECT_TRUE(std::any_of(found.begin(), found.end(), [](const json::value& p) {
    return p.at("kernel_type") == "fault" && p.at("usable").as_bool();
  })) << found;
  EXPECT_EQ(plugins.at("search_path").as_array().at(0).as_string(), test_plugin_dir().string());

  const std::string metrics = get("/metrics");
  EXPECT_NE(metrics.find("# TYPE keval_jobs_submitted_total counter"), std::string::npos);
  EXPECT_NE(metrics.find("keval_jobs{status=\"completed\"} 0"), std::string::npos) << metrics;
  // Every sample line is `name{labels} value` or `name value` (Prometheus text format 0.0.4).
  const std::regex sample(R"(^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [-+0-9.eE]+$)");
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] != '#') {
      EXPECT_TRUE(std::regex_match(line, sample)) << line;
    }
  }
}

TEST_F(DaemonApi, EvaluateSynchronouslyAndAsynchronouslyOnOneKeptAliveConnection) {
  HttpClient c = client();
  const auto sync = c.post("/evaluate", fault_evaluate({}));
  ASSERT_EQ(sync.status, 200u) << sync.body();
  expect_seed_response_shape(sync.json_body());
  EXPECT_TRUE(sync.json_body().at("kernel_exec_result").at("correctness").as_bool());
  EXPECT_EQ(sync.header("X-GPU-Type"), "cpu");

  auto request = with_async(fault_evaluate({}));
  request["job_id"] = "my-job-1";
  const auto accepted = c.post("/evaluate", request);
  ASSERT_EQ(accepted.status, 202u) << accepted.body();
  EXPECT_EQ(accepted.json_body().at("job_id"), "my-job-1");
  EXPECT_EQ(accepted.header("Location"), "/jobs/my-job-1");

  const auto view = wait_finished(socket(), "my-job-1");
  EXPECT_EQ(view.at("status"), "completed");
  EXPECT_EQ(view.at("http_status"), 200);
  EXPECT_TRUE(view.at("compilation_result").at("ok").as_bool());
  EXPECT_TRUE(view.at("validation_result").at("ok").as_bool());
  EXPECT_TRUE(view.at("profiling_result").at("ok").as_bool());
  expect_seed_response_shape(view.at("result").as_object());
  EXPECT_EQ(view.at("device").at("gpu_type"), "cpu");

  // The V2 contract's clients poll /job/{id}.
  const auto seed_path = c.get("/job/my-job-1");
  EXPECT_EQ(seed_path.status, 200u);
  EXPECT_EQ(seed_path.json_body().at("status"), "completed");

  // The same client-chosen id again is a conflict, not a second job.
  EXPECT_EQ(c.post("/evaluate", request).status, 409u);
}

TEST_F(DaemonApi, KernelFailuresAre200WithFlags) {
  const auto r =
      client().post("/evaluate", fault_evaluate(json::object{{"fault", "compile_error"}}));
  ASSERT_EQ(r.status, 200u) << r.body();
  const auto body = r.json_body();
  EXPECT_FALSE(body.at("kernel_exec_result").at("compiled").as_bool());
  EXPECT_TRUE(body.at("compilation_error").is_string());

  const auto crash =
      client().post("/evaluate", fault_evaluate(json::object{{"fault", "segfault_in_launch"}}));
  ASSERT_EQ(crash.status, 200u) << crash.body();
  EXPECT_TRUE(crash.json_body().at("kernel_exec_result").at("compiled").as_bool());
  EXPECT_FALSE(crash.json_body().at("kernel_exec_result").at("correctness").as_bool());
}

std::string error_path(const HttpResult& r) {
  return std::string(r.json_body().at("error").at("path").as_string());
}

TEST_F(DaemonApi, MalformedRequestsAre400NamingTheField) {
  HttpClient c = client();
  const auto bad_json = c.request("POST", "/evaluate", "{\"kernel\": ");
  ASSERT_EQ(bad_json.status, 400u) << bad_json.body();
  EXPECT_NE(bad_json.json_body().at("error").at("message").as_string().find("invalid JSON"),
            std::string::npos);

  auto wrong_type = fault_evaluate({});
  wrong_type["num_trials"] = "ten";
  const auto r1 = c.post("/evaluate", wrong_type);
  ASSERT_EQ(r1.status, 400u) << r1.body();
  EXPECT_EQ(error_path(r1), "num_trials");

  auto unknown_type = fault_evaluate({});
  unknown_type["kernel"].as_object()["kernel_type"] = "cobol";
  const auto r2 = c.post("/evaluate", unknown_type);
  ASSERT_EQ(r2.status, 400u) << r2.body();
  EXPECT_EQ(error_path(r2), "kernel.kernel_type");
  EXPECT_TRUE(std::regex_search(r2.body(), std::regex("available: [^)]*fault"))) << r2.body();

  auto no_contract = fault_compare({}, {});
  no_contract["custom_kernel"].as_object().erase("io");
  const auto r3 = c.post("/compare", no_contract);
  ASSERT_EQ(r3.status, 400u) << r3.body();
  EXPECT_EQ(error_path(r3), "custom_kernel.io");

  auto bad_shape = fault_evaluate({});
  bad_shape["kernel"]
      .as_object()["io"]
      .as_object()["args"]
      .as_array()[1]
      .as_object()["tensor_spec"]
      .as_object()["shape"] = json::array{-4};
  const auto r4 = c.post("/evaluate", bad_shape);
  ASSERT_EQ(r4.status, 400u) << r4.body();
  EXPECT_EQ(error_path(r4), "kernel.io.args[1].tensor_spec.shape[0]");

  const auto r5 =
      c.post("/evaluate", json::object{{"kernel", json::object{{"kernel_type", "fault"}}}});
  ASSERT_EQ(r5.status, 400u) << r5.body();
  EXPECT_EQ(error_path(r5), "kernel.source_code");

  // A type no host has (a real name such as H100 would be accepted on a GPU machine).
  const auto r6 = c.post("/evaluate", fault_evaluate({}), {{"X-GPU-Type", "NoSuchGPU"}});
  ASSERT_EQ(r6.status, 400u) << r6.body();
  EXPECT_EQ(error_path(r6), "X-GPU-Type");

  // 400s are answers, not broken connections: the kept-alive connection still works.
  EXPECT_EQ(c.get("/health").status, 200u);
  EXPECT_EQ(HttpClient(socket()).get("/stats").json_body().at("jobs").at("submitted_total"), 0);
}

TEST_F(DaemonApi, OversizedBodiesAre413) {
  daemon_.reset();
  start({"--max-body-bytes", "65536"});
  auto request = fault_evaluate({});
  request["kernel"].as_object()["source_code"] = std::string(100 * 1024, 'x');
  const auto r = client().post("/evaluate", request);
  ASSERT_EQ(r.status, 413u) << r.body();
  EXPECT_NE(r.json_body().at("error").at("message").as_string().find("65536"), std::string::npos);
  EXPECT_EQ(client().post("/evaluate", fault_evaluate({})).status, 200u);
}

TEST_F(DaemonApi, ExpectContinueIsAnsweredBeforeTheBody) {
  const auto [interim, response] =
      client().post_expecting_continue("/evaluate", fault_evaluate({}));
  EXPECT_EQ(interim, 100u);
  EXPECT_EQ(response.status, 200u) << response.body();
}

TEST_F(DaemonApi, UnknownRoutesJobsAndMethods) {
  HttpClient c = client();
  EXPECT_EQ(c.get("/nowhere").status, 404u);
  EXPECT_EQ(c.get("/jobs/no-such-job").status, 404u);
  EXPECT_EQ(c.request("DELETE", "/jobs/no-such-job").status, 404u);
  const auto wrong = c.request("GET", "/evaluate");
  EXPECT_EQ(wrong.status, 405u);
  EXPECT_EQ(wrong.header("Allow"), "POST");
  EXPECT_EQ(c.request("POST", "/health", "{}").status, 405u);
  EXPECT_EQ(c.request("PUT", "/jobs/x").status, 405u);

  const auto done = c.post("/evaluate", fault_evaluate({}));
  ASSERT_EQ(done.status, 200u);
  const std::string id(done.json_body().at("job_id").as_string());
  EXPECT_EQ(c.request("DELETE", "/jobs/" + id).status, 409u);
}

TEST_F(DaemonApi, AFullQueueAnswers503WithRetryAfter) {
  daemon_.reset();
  start({"--max-workers", "1", "--max-queued", "1"});
  HttpClient c = client();
  const auto running = c.post("/evaluate", with_async(hang()));
  ASSERT_EQ(running.status, 202u) << running.body();
  const std::string running_id(running.json_body().at("job_id").as_string());
  ASSERT_TRUE(wait_status(socket(), running_id, "validating"));
  const auto queued = c.post("/evaluate", with_async(hang()));
  ASSERT_EQ(queued.status, 202u) << queued.body();
  const std::string queued_id(queued.json_body().at("job_id").as_string());
  EXPECT_EQ(c.get("/jobs/" + queued_id).json_body().at("status"), "submitted");

  const auto refused = c.post("/evaluate", fault_evaluate({}));
  EXPECT_EQ(refused.status, 503u) << refused.body();
  EXPECT_EQ(refused.header("Retry-After"), "5");

  // Cancelling the queued job frees its place.
  const auto cancelled = c.request("DELETE", "/jobs/" + queued_id);
  ASSERT_EQ(cancelled.status, 200u) << cancelled.body();
  EXPECT_EQ(cancelled.json_body().at("status"), "failed");
  EXPECT_EQ(cancelled.json_body().at("compilation_result"), nullptr); // it never started
  EXPECT_NE(cancelled.body().find("cancelled by the client before it started"), std::string::npos);
  EXPECT_EQ(c.post("/evaluate", with_async(fault_evaluate({}))).status, 202u);
  EXPECT_EQ(c.request("DELETE", "/jobs/" + running_id).status, 200u);
}

TEST(DaemonTcp, TcpIsOptInAndLoopbackOnly) {
  DaemonDirs dirs;
  {
    DaemonProcess refused(dirs.state(), dirs.socket(), {"--listen", "0.0.0.0:0"});
    const auto status = refused.wait_exit();
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(WEXITSTATUS(*status), 2) << refused.log();
    EXPECT_NE(refused.log().find("--allow-remote"), std::string::npos) << refused.log();
  }
  DaemonProcess daemon(dirs.state(), dirs.socket(), {"--listen", "127.0.0.1:0"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
  std::smatch port;
  const std::string log = daemon.log();
  ASSERT_TRUE(std::regex_search(log, port, std::regex(R"(tcp:127\.0\.0\.1:([0-9]+))"))) << log;
  // TCP wants the bearer token (daemon_hardening_test.cpp has the refusals).
  const std::string token = read_file(dirs.state() / "keys" / "tcp.token");
  const auto r = curl({"-w", "\n%{http_code}", "-H",
                       "Authorization: Bearer " + token.substr(0, token.find('\n')),
                       "http://127.0.0.1:" + port[1].str() + "/health"});
  ASSERT_EQ(r.exit_code, 0) << "curl failed (missing? scripts/setup installs it): " << r.err;
  EXPECT_NE(r.out.find("\"status\":\"ok\""), std::string::npos) << r.out;
  EXPECT_EQ(r.out.substr(r.out.rfind('\n') + 1), "200");
}

} // namespace
} // namespace keval::test::daemon
