#include "support/test_env.hpp"

#include "job/job_runner.hpp"
#include "request/parse.hpp"
#include "supervisor/sandbox_setup.hpp"

#include <cstdlib>
#include <fstream>
#include <random>

#include <boost/json/parse.hpp>

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

namespace keval::test {

namespace fs = std::filesystem;
namespace json = boost::json;

fs::path bin_dir() {
  return KEVAL_TEST_BIN_DIR;
}
fs::path worker_exe() {
  return bin_dir() / "keval-worker";
}
fs::path keval_exe() {
  return bin_dir() / "keval";
}
fs::path plugin_dir() {
  return KEVAL_TEST_PLUGIN_DIR;
}
fs::path test_plugin_dir() {
  return KEVAL_TEST_FAULT_PLUGIN_DIR;
}

TempDir::TempDir() {
  std::random_device rd;
  path_ = fs::temp_directory_path() / ("keval-test-" + std::to_string(rd()) + std::to_string(rd()));
  fs::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

json::object scale_io(int64_t n) {
  return json::parse(R"({"args": [
      {"name": "x", "type": "tensor", "role": "input",
       "tensor_spec": {"shape": [)" +
                     std::to_string(n) + R"(], "dtype": "float32",
                       "init": {"kind": "randn", "seed": 7}}},
      {"name": "y", "type": "tensor", "role": "output",
       "tensor_spec": {"shape": [)" +
                     std::to_string(n) + R"(], "dtype": "float32"}}]})")
      .as_object();
}

json::object fault_evaluate(json::object metadata, double timeout_s, int64_t num_trials) {
  json::object kernel;
  kernel["source_code"] = "// fault injection";
  kernel["kernel_type"] = "fault";
  kernel["metadata"] = std::move(metadata);
  kernel["io"] = scale_io();
  json::object request;
  request["kernel"] = std::move(kernel);
  request["num_trials"] = num_trials;
  request["timeout"] = timeout_s;
  return request;
}

json::object fault_compare(json::object ref_metadata, json::object custom_metadata,
                           double timeout_s) {
  auto side = [](json::object metadata) {
    json::object k;
    k["source_code"] = "// fault injection";
    k["kernel_type"] = "fault";
    k["metadata"] = std::move(metadata);
    k["io"] = scale_io();
    return k;
  };
  json::object request;
  request["ref_kernel"] = side(std::move(ref_metadata));
  request["custom_kernel"] = side(std::move(custom_metadata));
  request["num_trials"] = 5;
  request["timeout"] = timeout_s;
  return request;
}

const registry::Registry& fault_registry() {
  static const registry::Registry registry =
      registry::Registry::discover({test_plugin_dir()}, worker_exe());
  return registry;
}

const registry::Registry& built_registry() {
  static const registry::Registry registry =
      registry::Registry::discover({plugin_dir()}, worker_exe());
  return registry;
}

result::Response run_request(const json::object& request, bool compare,
                             const registry::Registry& registry, const fs::path& state_dir) {
  const auto mode =
      compare ? request::EvalRequest::Mode::compare : request::EvalRequest::Mode::evaluate;
  const auto parsed = request::parse_request(request, mode);
  job::check_against_registry(parsed, registry);
  TempDir temporary;
  const fs::path state = state_dir.empty() ? temporary.path() : state_dir;
  const store::JobStore store(state / "jobs");
  job::RunOptions options;
  options.worker_exe = worker_exe();
  options.work_root = state / "work";
  options.sandbox = supervisor::prepare_host_sandbox({}, state);
  options.grant_device = [](const json::array& types, auto grant) {
    grant(json::object{{"device", json::object{{"type", types.front()}, {"index", 0}}}});
  };
  return job::run_job(parsed, registry, store, options);
}

supervisor::CommandResult run_keval(const std::vector<std::string>& args,
                                    std::vector<std::string> env) {
  // Environment variables go through /usr/bin/env so the child sees exactly these additions.
  std::vector<std::string> argv = std::move(env);
  argv.push_back(keval_exe().string());
  argv.insert(argv.end(), args.begin(), args.end());
  return supervisor::run_command("/usr/bin/env", argv, std::chrono::seconds(120));
}

fs::path write_request(const fs::path& dir, const std::string& name, const json::object& request) {
  const fs::path p = dir / name;
  std::ofstream(p) << json::serialize(request);
  return p;
}

} // namespace keval::test
