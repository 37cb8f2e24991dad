#include "cli/conformance.hpp"

#include "daemon/device_discovery.hpp"
#include "supervisor/process.hpp"

#include <keval/plugin.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace keval::cli {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

constexpr auto kAbiTimeout = std::chrono::minutes(5);  // interpreters, compilers
constexpr auto kJobTimeout = std::chrono::minutes(10); // a whole sample job
constexpr size_t kShownBytes = 2000;                   // of a failed job's answer
constexpr int kDefaultArch = 90;                       // sm_90 where no GPU says otherwise

struct Check {
  std::string name, status, detail;
};

// What keval-worker --conformance found: its checks, and the capabilities the manifest declares.
struct AbiReport {
  std::vector<Check> checks;
  std::vector<std::string> capabilities;
};

std::string tail(const std::string& text, size_t bytes = kShownBytes) {
  return text.size() <= bytes ? text : "..." + text.substr(text.size() - bytes);
}

std::string how_it_ended(const supervisor::CommandResult& r) {
  if (r.timed_out)
    return "timed out";
  if (r.signal)
    return "was killed by " + supervisor::describe_signal(*r.signal);
  return "exited with code " + std::to_string(r.exit_code.value_or(-1));
}

// The table's checks, from keval-worker --conformance; a check whose line is missing is the one
// that ended the process.
AbiReport abi_checks(const ConformanceOptions& options, int cuda_arch) {
  std::vector<std::string> args{"--conformance", fs::absolute(options.plugin).string(),
                                "--cuda-arch", std::to_string(cuda_arch)};
  if (options.request) {
    args.emplace_back("--request");
    args.push_back(fs::absolute(*options.request).string());
  }
  const auto r = supervisor::run_command(options.worker_exe, args, kAbiTimeout);
  std::vector<std::string> order;
  AbiReport report;
  std::vector<Check>& checks = report.checks;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    boost::system::error_code ec;
    const json::value v = json::parse(line, ec);
    if (ec || !v.is_object())
      continue; // the plugin's own output on stdout
    const json::object& o = v.as_object();
    if (const auto* names = o.if_contains("checks"); names && names->is_array()) {
      for (const auto& name : names->as_array())
        order.emplace_back(name.as_string());
    } else if (o.contains("check") && o.contains("status")) {
      if (const auto* caps = o.if_contains("capabilities"); caps && caps->is_array())
        for (const auto& cap : caps->as_array())
          if (cap.is_string())
            report.capabilities.emplace_back(cap.as_string());
      checks.push_back({std::string(o.at("check").as_string()),
                        std::string(o.at("status").as_string()),
                        o.contains("detail") ? std::string(o.at("detail").as_string()) : ""});
    }
  }
  if (order.empty()) {
    checks = {
        {"loads", "fail",
         "keval-worker --conformance " + how_it_ended(r) + " before any check: " + tail(r.err)}};
    return report;
  }
  for (size_t i = checks.size(); i < order.size(); ++i)
    checks.push_back({order[i], "fail",
                      i == checks.size()
                          ? "the process " + how_it_ended(r) + " during this check: " + tail(r.err)
                          : "not run: an earlier check ended the process"});
  return report;
}

// The sample request through keval's job path, the plugin first on the search path.
Check sample_job(const ConformanceOptions& options, bool cpu,
                 const daemon::DeviceDiscovery& devices) {
  Check check{"end_to_end", "pass", ""};
  if (!options.request) {
    check.status = "skip";
    check.detail = "no sample request (--request FILE)";
    return check;
  }
  if (!cpu) {
    if (devices.gpus.empty()) {
      const char* require = std::getenv("KEVAL_REQUIRE_GPU");
      check.status = require != nullptr && std::string(require) == "1" ? "fail" : "skip";
      check.detail =
          "the plugin runs on CUDA devices and this machine has none (" + devices.reason + ")";
      return check;
    }
  }
  std::string text;
  {
    std::ifstream in(*options.request, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  boost::system::error_code ec;
  const json::value request = json::parse(text, ec);
  const bool compare = !ec && request.is_object() && request.as_object().contains("ref_kernel");
  const char* old_path = std::getenv("KEVAL_PLUGIN_PATH");
  const std::string plugin_path =
      "KEVAL_PLUGIN_PATH=" + fs::absolute(options.plugin).parent_path().string() +
      (old_path != nullptr && *old_path ? ":" + std::string(old_path) : std::string());
  const auto r = supervisor::run_command("/usr/bin/env",
                                         {plugin_path, options.keval_exe.string(), "--log-level",
                                          "warn", compare ? "compare" : "evaluate",
                                          fs::absolute(*options.request).string()},
                                         kJobTimeout);
  const json::value answer = json::parse(r.out, ec);
  if (ec || !answer.is_object()) {
    check.status = "fail";
    check.detail = "keval " + how_it_ended(r) + " without an answer: " + tail(r.err);
    return check;
  }
  const json::object& body = answer.as_object();
  const json::object* exec =
      body.contains("kernel_exec_result") && body.at("kernel_exec_result").is_object()
          ? &body.at("kernel_exec_result").as_object()
          : nullptr;
  const bool correct = exec != nullptr && exec->contains("correctness") &&
                       exec->at("correctness").is_bool() && exec->at("correctness").as_bool();
  if (r.exit_code != 0 || !correct) {
    check.status = "fail";
    check.detail = "the sample must compile, run and be correct; keval answered: " +
                   tail(json::serialize(body));
    return check;
  }
  check.detail = std::string(compare ? "compare" : "evaluate") + ": correct";
  if (const auto* speedup = body.if_contains("speedup"); speedup && speedup->is_number())
    check.detail += ", speedup " + std::to_string(speedup->to_number<double>());
  return check;
}

} // namespace

int run_conformance(const ConformanceOptions& options) {
  std::error_code ec;
  if (!fs::is_regular_file(options.plugin, ec)) {
    std::cerr << "keval conformance: " << options.plugin.string() << " is not a file\n";
    return 2;
  }
  if (options.request && !fs::is_regular_file(*options.request, ec)) {
    std::cerr << "keval conformance: --request " << options.request->string() << " is not a file\n";
    return 2;
  }
  // CUDA types compile for this machine's first GPU, else for kDefaultArch (compiling needs no
  // device: the host passes the arch before the grant).
  const auto devices = daemon::discover_devices(options.worker_exe);
  const int cuda_arch = devices.gpus.empty() ? kDefaultArch : devices.gpus.front().arch;
  AbiReport abi = abi_checks(options, cuda_arch);
  std::vector<Check>& checks = abi.checks;
  const bool loaded = !checks.empty() && checks.front().status == "pass";
  // A whole-program type runs its sample wherever it can: the job itself says "skipped" when its
  // problem needs a GPU this machine lacks.
  const auto has = [&](const char* name) {
    return std::find(abi.capabilities.begin(), abi.capabilities.end(), name) !=
           abi.capabilities.end();
  };
  const bool cpu = has("cpu") || has("program");
  if (loaded)
    checks.push_back(sample_job(options, cpu, devices));
  else
    checks.push_back({"end_to_end", "skip", "the plugin did not load"});
  bool failed = false;
  for (const auto& c : checks)
    failed |= c.status == "fail";

  if (options.as_json) {
    json::array listed;
    for (const auto& c : checks)
      listed.push_back(json::object{{"check", c.name}, {"status", c.status}, {"detail", c.detail}});
    std::cout << json::serialize(json::object{{"plugin", options.plugin.string()},
                                              {"passed", !failed},
                                              {"checks", std::move(listed)}})
              << std::endl;
  } else {
    std::cout << "conformance of " << options.plugin.string() << " (SDK " << KEVAL_PLUGIN_API_MAJOR
              << "." << KEVAL_PLUGIN_API_MINOR << ")\n";
    for (const auto& c : checks)
      std::cout << "  " << c.status << std::string(6 - std::min<size_t>(6, c.status.size()), ' ')
                << c.name << std::string(16 - std::min<size_t>(16, c.name.size()), ' ') << c.detail
                << "\n";
    std::cout << (failed ? "FAILED" : "passed") << std::endl;
  }
  return failed ? 1 : 0;
}

} // namespace keval::cli
