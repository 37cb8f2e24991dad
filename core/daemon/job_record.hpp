// A daemon job's stored record (job::record_json plus the daemon's fields: submitted_at,
// started_at, finished_at in Unix seconds, stage, device, http_status, interrupted) and what
// clients see of it.
#pragma once

#include <string>

#include <boost/json/object.hpp>

namespace keval::daemon {

// GET /jobs/{id}: the V2 contract's JobState (job_id, status, compilation_result,
// validation_result, profiling_result, result) plus mode, stage, timestamps, device, http_status,
// interrupted. The request is left out: clients have it, and it can be large.
boost::json::object job_view(const boost::json::object& record);

// The V2 response of a finished job, and the HTTP status it is served with.
const boost::json::object& record_response(const boost::json::object& record);
int record_http_status(const boost::json::object& record);

// The type of the device the job ran on ("H100", "cpu"), empty when it was granted none.
std::string record_gpu_type(const boost::json::object& record);

} // namespace keval::daemon
