#include "job/job_runner.hpp"

#include "request/parse.hpp"
#include "request/program.hpp"

#include <keval/plugin.h>

#include <random>

#include <boost/json/array.hpp>

namespace keval::job {

namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

void check_kernel(const request::KernelCode& code, const std::string& path,
                  const registry::Registry& registry) {
  const auto* plugin = registry.find(code.kernel_type);
  if (plugin == nullptr) {
    std::string available;
    for (const auto& type : registry.kernel_types())
      available += (available.empty() ? "" : ", ") + type;
    throw request::RequestError(path + ".kernel_type",
                                "unknown kernel type '" + code.kernel_type + "' (available: " +
                                    (available.empty() ? "none" : available) + ")");
  }
  if (plugin->has(KEVAL_CAP_PROGRAM)) {
    if (!request::is_program(code))
      throw request::RequestError(path + ".metadata.problem",
                                  "is required for kernel type '" + code.kernel_type +
                                      "' (a whole program: docs/cuda_program.md)");
    if (path != "kernel")
      throw request::RequestError(path + ".kernel_type",
                                  "'" + code.kernel_type +
                                      "' is evaluate-only: its baseline is the problem's "
                                      "baseline_solution (POST /evaluate)");
    request::parse_program(code, path);
  }
  if (plugin->has(KEVAL_CAP_REQUIRES_IO_CONTRACT) && !code.io)
    throw request::RequestError(path + ".io", "IOContract is required for kernel type '" +
                                                  code.kernel_type + "'");
}

} // namespace

void check_against_registry(const request::EvalRequest& request,
                            const registry::Registry& registry) {
  const bool compare = request.mode == request::EvalRequest::Mode::compare;
  check_kernel(request.kernel, compare ? "custom_kernel" : "kernel", registry);
  if (request.ref)
    check_kernel(*request.ref, "ref_kernel", registry);
}

std::string new_job_id() {
  std::random_device rd;
  std::uniform_int_distribution<uint64_t> dist;
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(dist(rd)),
                static_cast<unsigned long long>(dist(rd)));
  return buf;
}

uint64_t secret_job_seed() {
  // std::random_device reads the kernel's random source (getrandom) on Linux.
  std::random_device source;
  return (static_cast<uint64_t>(source()) << 32) ^ source();
}

supervisor::JobLaunch make_launch(const request::EvalRequest& request,
                                  const registry::Registry& registry, const std::string& job_id,
                                  const RunOptions& options) {
  supervisor::JobLaunch launch;
  launch.worker_exe = options.worker_exe;
  launch.sandbox = options.sandbox;
  launch.job_id = job_id;
  launch.mode = request.mode == request::EvalRequest::Mode::compare ? "compare" : "evaluate";
  launch.request = request.original;
  for (const auto* code : {&request.kernel, request.ref ? &*request.ref : nullptr})
    if (code != nullptr)
      launch.plugins[code->kernel_type] = registry.find(code->kernel_type)->path;
  launch.work_dir = options.work_root / job_id;
  launch.seed = request.seed ? *request.seed : secret_job_seed();
  launch.timeout = std::chrono::milliseconds(static_cast<int64_t>(request.timeout_s * 1000.0));
  return launch;
}

const char* status_after_phase(const std::string& phase) {
  return phase == "compiled" ? "validating" : "profiling";
}

const char* final_status(result::Verdict verdict) {
  return verdict == result::Verdict::infrastructure ? "failed" : "completed";
}

json::object record_json(const result::JobRecord& record, const json::object& request,
                         const std::string& status) {
  json::object o;
  o["job_id"] = record.job_id;
  o["mode"] = record.mode;
  o["status"] = status;
  o["request"] = request;
  json::object phases;
  for (const auto& [name, result] : record.phases)
    phases[name] = result;
  o["phases"] = std::move(phases);
  if (record.outcome)
    o["response"] = result::build_response(record).body;
  return o;
}

result::Response run_job(const request::EvalRequest& request, const registry::Registry& registry,
                         const store::JobStore& store, const RunOptions& options) {
  result::JobRecord record;
  record.job_id = request.job_id.value_or(new_job_id());
  record.mode = request.mode == request::EvalRequest::Mode::compare ? "compare" : "evaluate";
  record.warnings = request.warnings;
  record.strict_flags = request.strict_flags;
  record.device_metrics_sides = result::device_metrics_sides(request);
  supervisor::JobLaunch launch = make_launch(request, registry, record.job_id, options);
  fs::create_directories(launch.work_dir);
  store.save(record.job_id, record_json(record, request.original, "compiling"));

  supervisor::SessionHandlers handlers;
  handlers.on_phase = [&](const std::string& name, const json::object& result) {
    record.phases[name] = result;
    store.save(record.job_id, record_json(record, request.original, status_after_phase(name)));
  };
  handlers.on_progress = options.on_progress;
  // One job on this host holds no GPU open ahead for another: `opened_cuda` decides nothing here.
  // Without a granter the session answers that none is granted.
  if (options.grant_device)
    handlers.on_need_device =
        [grant_device = options.grant_device](const json::array& types, std::optional<int>,
                                              std::function<void(json::object)> grant) {
          grant_device(types, std::move(grant));
        };
  record.outcome = supervisor::run_session(std::move(launch), std::move(handlers));

  std::error_code ec;
  fs::remove_all(options.work_root / record.job_id, ec);
  result::Response response = result::build_response(record);
  store.save(record.job_id, record_json(record, request.original, final_status(response.verdict)));
  return response;
}

} // namespace keval::job
