#include "daemon/job_record.hpp"

namespace keval::daemon {

namespace json = boost::json;

namespace {

json::value field(const json::object& o, const char* key) {
  const auto* v = o.if_contains(key);
  return v != nullptr ? *v : json::value(nullptr);
}

json::value phase(const json::object& record, const char* name) {
  const auto* phases = record.if_contains("phases");
  return phases != nullptr && phases->is_object() ? field(phases->as_object(), name)
                                                  : json::value(nullptr);
}

} // namespace

json::object job_view(const json::object& record) {
  json::object view;
  for (const char* key :
       {"job_id", "status", "mode", "stage", "submitted_at", "started_at", "finished_at", "device"})
    view[key] = field(record, key);
  view["compilation_result"] = phase(record, "compiled");
  view["validation_result"] = phase(record, "validated");
  view["profiling_result"] = phase(record, "profiled");
  view["result"] = field(record, "response");
  view["http_status"] = field(record, "http_status");
  view["interrupted"] = record.contains("interrupted") && record.at("interrupted").is_bool() &&
                        record.at("interrupted").as_bool();
  return view;
}

const json::object& record_response(const json::object& record) {
  static const json::object none;
  const auto* response = record.if_contains("response");
  return response != nullptr && response->is_object() ? response->as_object() : none;
}

int record_http_status(const json::object& record) {
  const auto* status = record.if_contains("http_status");
  return status != nullptr && status->is_int64() ? static_cast<int>(status->as_int64()) : 500;
}

std::string record_gpu_type(const json::object& record) {
  const auto* device = record.if_contains("device");
  if (device == nullptr || !device->is_object())
    return {};
  const auto* type = device->as_object().if_contains("gpu_type");
  return type != nullptr && type->is_string() ? std::string(type->as_string()) : std::string();
}

} // namespace keval::daemon
