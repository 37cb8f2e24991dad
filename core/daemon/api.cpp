#include "daemon/api.hpp"

#include "common/log.hpp"
#include "common/utf8.hpp"
#include "common/version.hpp"
#include "daemon/job_record.hpp"
#include "daemon/stats_report.hpp"
#include "job/job_runner.hpp"
#include "result/response.hpp"
#include "store/job_store.hpp"

#include <keval/plugin.h>

#include <boost/json/serialize.hpp>

namespace keval::daemon {

namespace http = boost::beast::http;
namespace json = boost::json;

namespace {

constexpr const char* kGpuTypeHeader = "X-GPU-Type";

HttpResponse json_response(http::status status, const json::object& body) {
  HttpResponse res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = json::serialize(body);
  return res;
}

// Errors that are neither a bad request (400, result::bad_request_body) nor a job's result.
// The message may echo the request's bytes (a URL path, a header), which need not be UTF-8.
json::object error_body(const char* error_class, const std::string& message) {
  return json::object{
      {"status", "failed"},
      {"error", json::object{{"class", error_class}, {"message", valid_utf8(message)}}}};
}

HttpResponse method_not_allowed(const char* allowed) {
  auto res = json_response(
      http::status::method_not_allowed,
      error_body("method_not_allowed", std::string("this route accepts ") + allowed + " only"));
  res.set(http::field::allow, allowed);
  return res;
}

HttpResponse not_found(const std::string& message) {
  return json_response(http::status::not_found, error_body("not_found", message));
}

} // namespace

Api::Api(JobManager& jobs, const registry::Registry& registry, const DevicePool& devices,
         DeviceDiscovery discovery, ApiConfig config)
    : jobs_(jobs), registry_(registry), devices_(devices), discovery_(std::move(discovery)),
      config_(std::move(config)) {}

void Api::handle(HttpRequest request, Reply reply) {
  Respond respond = [this, version = request.version(), keep_alive = request.keep_alive(),
                     reply = std::move(reply)](HttpResponse res) {
    res.version(version);
    res.keep_alive(keep_alive);
    res.set(http::field::server, std::string("keval/") + kVersion);
    res.prepare_payload();
    count(res.result_int());
    reply(std::move(res));
  };
  try {
    route(request, respond);
  } catch (const std::exception& e) {
    spdlog::error("{} {}: {}", std::string(request.method_string()), std::string(request.target()),
                  e.what());
    respond(
        json_response(http::status::internal_server_error, error_body("infrastructure", e.what())));
  }
}

void Api::route(const HttpRequest& request, const Respond& respond) {
  const std::string_view target = request.target();
  const std::string path(target.substr(0, target.find('?')));
  const http::verb method = request.method();
  auto only_get = [&](HttpResponse (Api::*answer)() const) {
    respond(method == http::verb::get ? (this->*answer)() : method_not_allowed("GET"));
  };

  if (path == "/evaluate" || path == "/compare") {
    if (method != http::verb::post)
      return respond(method_not_allowed("POST"));
    return submit(request,
                  path == "/compare" ? request::EvalRequest::Mode::compare
                                     : request::EvalRequest::Mode::evaluate,
                  respond);
  }
  for (const std::string prefix : {"/jobs/", "/job/"}) // the V2 contract polls /job/{id}
    if (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
        path.find('/', prefix.size()) == std::string::npos)
      return job(request, path.substr(prefix.size()), respond);
  if (path == "/health")
    return only_get(&Api::health);
  if (path == "/stats")
    return only_get(&Api::stats);
  if (path == "/plugins")
    return only_get(&Api::plugins);
  if (path == "/metrics")
    return only_get(&Api::metrics);
  respond(not_found("no route for " + path));
}

void Api::submit(const HttpRequest& request, request::EvalRequest::Mode mode,
                 const Respond& respond) {
  request::EvalRequest parsed;
  std::optional<std::string> gpu_type;
  try {
    parsed = request::parse_request_text(request.body(), mode, config_.limits);
    job::check_against_registry(parsed, registry_);
    if (auto header = request.find(kGpuTypeHeader);
        header != request.end() && !header->value().empty()) {
      gpu_type = std::string(header->value());
      if (!devices_.has_gpu_type(*gpu_type))
        throw request::RequestError(kGpuTypeHeader,
                                    "header: this host has no GPU of type '" + *gpu_type + "'");
    }
  } catch (const request::RequestError& e) {
    return respond(
        json_response(http::status::bad_request, result::bad_request_body(e.path(), e.message())));
  }

  const bool async = parsed.async;
  JobDone on_done;
  if (!async)
    on_done = [this, respond](const json::object& record) { respond(result_response(record)); };
  std::string id;
  try {
    id = jobs_.submit(std::move(parsed), std::move(gpu_type), std::move(on_done));
  } catch (const SubmitRefused& e) {
    if (e.reason() == SubmitRefused::Reason::duplicate_job_id)
      return respond(json_response(http::status::conflict, error_body("conflict", e.what())));
    auto res =
        json_response(http::status::service_unavailable, error_body("unavailable", e.what()));
    res.set(http::field::retry_after, std::to_string(config_.retry_after.count()));
    return respond(std::move(res));
  }
  if (async) {
    auto res = json_response(
        http::status::accepted,
        json::object{{"job_id", id}, {"status", "submitted"}, {"status_url", "/jobs/" + id}});
    res.set(http::field::location, "/jobs/" + id);
    respond(std::move(res));
  }
}

void Api::job(const HttpRequest& request, const std::string& id, const Respond& respond) {
  if (request.method() == http::verb::get) {
    std::optional<json::object> view;
    try {
      view = jobs_.view(id);
    } catch (const store::RecordRefused& e) {
      // Never the record on disk: it is not the daemon's. Keval's failure, not the kernel's.
      return respond(json_response(http::status::internal_server_error,
                                   error_body("record_refused", e.what())));
    }
    if (!view)
      return respond(not_found("no job '" + id + "' (unknown, or expired after its TTL)"));
    return respond(json_response(http::status::ok, *view));
  }
  if (request.method() != http::verb::delete_)
    return respond(method_not_allowed("GET, DELETE"));
  const auto result = jobs_.cancel(id, [respond](const json::object& record) {
    respond(json_response(http::status::ok, job_view(record)));
  });
  if (result == JobManager::CancelResult::not_found)
    return respond(not_found("no job '" + id + "' (unknown, or expired after its TTL)"));
  if (result == JobManager::CancelResult::already_finished)
    return respond(json_response(http::status::conflict,
                                 error_body("conflict", "job '" + id + "' has already finished")));
  // cancelling: the callback answers once the worker is gone
}

HttpResponse Api::result_response(const json::object& record) const {
  auto res =
      json_response(static_cast<http::status>(record_http_status(record)), record_response(record));
  // The V2 contract names the GPU type in this header; keval names the device the job ran on.
  std::string gpu_type = record_gpu_type(record);
  if (gpu_type.empty())
    gpu_type = devices_.uniform_gpu_type();
  if (!gpu_type.empty())
    res.set(kGpuTypeHeader, gpu_type);
  return res;
}

HttpResponse Api::health() const {
  const bool stopping = jobs_.shutting_down();
  json::object body;
  body["status"] = stopping ? "shutting_down" : "ok";
  body["version"] = kVersion;
  body["plugin_api"] =
      std::to_string(KEVAL_PLUGIN_API_MAJOR) + "." + std::to_string(KEVAL_PLUGIN_API_MINOR);
  json::array plugins;
  for (const auto& type : registry_.kernel_types())
    plugins.emplace_back(type);
  body["plugins"] = std::move(plugins);
  json::array gpus;
  for (const auto& gpu : devices_.snapshot())
    gpus.push_back({{"index", gpu.device.index},
                    {"name", gpu.device.name},
                    {"type", gpu.device.gpu_type},
                    {"arch", gpu.device.arch},
                    {"memory_bytes", gpu.device.memory_bytes},
                    {"state", gpu.holders > 0 ? "busy" : "idle"}});
  body["gpus"] = std::move(gpus);
  if (!discovery_.reason.empty())
    body["gpu_discovery"] = discovery_.reason;
  if (config_.driver_status)
    body["driver"] = config_.driver_status();
  if (config_.verifier_status)
    body["device_verifiers"] = config_.verifier_status();
  body["cpu_device"] = true;
  const StatsSnapshot stats = jobs_.stats();
  // max_active: jobs this daemon runs at once, what a client that wants to keep it busy submits.
  body["jobs"] = {{"active", stats.active},
                  {"max_active", stats.max_active},
                  {"queued", stats.queued},
                  {"queue_capacity", stats.queue_capacity}};
  return json_response(stopping ? http::status::service_unavailable : http::status::ok, body);
}

StatsSnapshot Api::snapshot() const {
  StatsSnapshot stats = jobs_.stats();
  stats.gpus = devices_.snapshot();
  std::lock_guard lock(counters_mutex_);
  stats.http_responses = responses_;
  if (config_.connection_stats)
    stats.connections = config_.connection_stats();
  return stats;
}

HttpResponse Api::stats() const {
  return json_response(http::status::ok, stats_json(snapshot()));
}

HttpResponse Api::plugins() const {
  json::array path;
  for (const auto& dir : registry_.search_path())
    path.emplace_back(dir.string());
  return json_response(http::status::ok, json::object{{"search_path", std::move(path)},
                                                      {"plugins", registry_.to_json()}});
}

HttpResponse Api::metrics() const {
  HttpResponse res{http::status::ok, 11};
  res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  res.body() = prometheus_text(snapshot());
  return res;
}

HttpResponse Api::payload_too_large() {
  auto res = json_response(
      http::status::payload_too_large,
      result::bad_request_body("", "request body exceeds the daemon's limit of " +
                                       std::to_string(config_.max_body_bytes) + " bytes"));
  res.keep_alive(false);
  res.set(http::field::server, std::string("keval/") + kVersion);
  res.prepare_payload();
  count(res.result_int());
  return res;
}

HttpResponse Api::refused(http::status status, const std::string& error_class,
                          const std::string& message) {
  auto res = json_response(status, error_body(error_class.c_str(), message));
  if (status == http::status::unauthorized)
    res.set(http::field::www_authenticate, "Bearer realm=\"keval\"");
  if (status == http::status::service_unavailable)
    res.set(http::field::retry_after, std::to_string(config_.retry_after.count()));
  res.keep_alive(false);
  res.set(http::field::server, std::string("keval/") + kVersion);
  res.prepare_payload();
  count(res.result_int());
  return res;
}

HttpResponse Api::malformed_http(const std::string& what) {
  auto res = json_response(http::status::bad_request,
                           result::bad_request_body("", "malformed HTTP request: " + what));
  res.keep_alive(false);
  res.set(http::field::server, std::string("keval/") + kVersion);
  res.prepare_payload();
  count(res.result_int());
  return res;
}

void Api::count(unsigned status) {
  std::lock_guard lock(counters_mutex_);
  ++responses_[static_cast<int>(status)];
}

} // namespace keval::daemon
