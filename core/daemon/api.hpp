// The HTTP API of the V2 contract, and keval's additions: what each route answers. Transport-free:
// the HTTP layer hands over a complete request and writes back whatever `reply` receives.
//
//   POST /evaluate, POST /compare      run a job: synchronous (the V2 response), or with
//                                      "async": true, 202 and a job_id at once
//   GET /jobs/{id}, GET /job/{id}      the job's status and the phases it finished (500
//                                      "record_refused" when its record on disk is not ours)
//   DELETE /jobs/{id}                  cancel it (kills its worker)
//   GET /health, /stats, /plugins      JSON
//   GET /metrics                       Prometheus text
#pragma once

#include "daemon/device_discovery.hpp"
#include "daemon/device_pool.hpp"
#include "daemon/job_manager.hpp"
#include "registry/registry.hpp"
#include "request/parse.hpp"

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json/object.hpp>

namespace keval::daemon {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;
using Reply = std::function<void(HttpResponse)>;

struct ApiConfig {
  request::Limits limits;                // request parsing (sizes, depths, trials, timeouts)
  uint64_t max_body_bytes = 64ull << 20; // the HTTP layer's body limit, for the 413 message
  std::chrono::seconds retry_after{5};   // sent with 503 when the queue is full
  // What GET /stats and /metrics report of the HTTP connections; none when not set.
  std::function<ConnectionStats()> connection_stats;
  // What GET /health reports as "driver" (DriverHold::status); none when not set.
  std::function<boost::json::object()> driver_status;
  // What GET /health reports as "device_verifiers" (DeviceVerifiers::status); none when not set.
  std::function<boost::json::object()> verifier_status;
};

class Api {
public:
  // Everything passed must outlive the Api.
  Api(JobManager& jobs, const registry::Registry& registry, const DevicePool& devices,
      DeviceDiscovery discovery, ApiConfig config);

  // Answers one request. `reply` runs exactly once, maybe later and on another thread: a
  // synchronous /evaluate answers when its job has finished.
  void handle(HttpRequest request, Reply reply);

  // Answers for what the HTTP layer rejects before a request is complete; the connection closes.
  HttpResponse payload_too_large();
  HttpResponse malformed_http(const std::string& what);
  // A request the HTTP layer will not serve (detail/request_gate.hpp: a job's process, a missing
  // token, an Origin, a body that is not JSON; the connection limit): `status` with the usual
  // error body, `error.class` = `error_class`. 401 carries `WWW-Authenticate: Bearer`, 503
  // `Retry-After`.
  HttpResponse refused(boost::beast::http::status status, const std::string& error_class,
                       const std::string& message);

private:
  using Respond = std::function<void(HttpResponse)>;
  void route(const HttpRequest& request, const Respond& respond);
  void submit(const HttpRequest& request, request::EvalRequest::Mode mode, const Respond& respond);
  void job(const HttpRequest& request, const std::string& id, const Respond& respond);
  HttpResponse health() const;
  HttpResponse stats() const;
  HttpResponse plugins() const;
  HttpResponse metrics() const;
  HttpResponse result_response(const boost::json::object& record) const;
  StatsSnapshot snapshot() const;
  void count(unsigned status);

  JobManager& jobs_;
  const registry::Registry& registry_;
  const DevicePool& devices_;
  const DeviceDiscovery discovery_;
  const ApiConfig config_;
  mutable std::mutex counters_mutex_;
  std::map<int, uint64_t> responses_; // by status code
};

} // namespace keval::daemon
