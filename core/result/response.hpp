// Turning what a job produced (phase results + how its worker ended) into the V2
// response, and classifying it into the three failure classes of the V2 contract.
#pragma once

#include "request/model.hpp"
#include "supervisor/worker_session.hpp"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

namespace keval::result {

// The V2 contract's classes: the kernel is wrong (HTTP 200), the request is wrong (400), keval or
// the machine failed (500). `success` is a kernel that compiled and passed.
enum class Verdict { success, kernel_failed, bad_request, infrastructure };

const char* verdict_name(Verdict verdict);
// CLI exit codes: 0 success, 1 kernel failed, 2 bad request, 3 infrastructure failure.
int exit_code(Verdict verdict);
int http_status(Verdict verdict);

// Everything known about a job, as it accumulates.
struct JobRecord {
  std::string job_id;
  std::string mode; // "evaluate" | "compare"
  std::vector<std::string> warnings;
  // The request's `strict`: flags that make the result incorrect.
  std::vector<std::string> strict_flags;
  // The sides ("custom", "ref") whose device metrics the request asked for: each gets
  // device_metrics in the response, with the reason when the job produced none.
  std::vector<std::string> device_metrics_sides;
  std::map<std::string, boost::json::object> phases; // "compiled", "validated", "profiled"
  std::optional<supervisor::SessionOutcome> outcome;
};

struct Response {
  boost::json::object body;
  Verdict verdict = Verdict::success;
};

Response build_response(const JobRecord& record);

// The sides of `request` that asked for device metrics (JobRecord::device_metrics_sides).
std::vector<std::string> device_metrics_sides(const request::EvalRequest& request);

// The body for a rejected request: {"status": "failed", "error": {...}} with the JSON path.
boost::json::object bad_request_body(const std::string& path, const std::string& message);

} // namespace keval::result
