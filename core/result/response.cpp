#include "result/response.hpp"

#include <boost/json/array.hpp>
#include <boost/json/value_to.hpp>

namespace keval::result {

namespace json = boost::json;
using End = supervisor::SessionOutcome::End;

const char* verdict_name(Verdict verdict) {
  switch (verdict) {
  case Verdict::success:
    return "success";
  case Verdict::kernel_failed:
    return "kernel_failed";
  case Verdict::bad_request:
    return "bad_request";
  case Verdict::infrastructure:
    return "infrastructure_failure";
  }
  return "unknown";
}

int exit_code(Verdict verdict) {
  switch (verdict) {
  case Verdict::success:
    return 0;
  case Verdict::kernel_failed:
    return 1;
  case Verdict::bad_request:
    return 2;
  case Verdict::infrastructure:
    return 3;
  }
  return 3;
}

int http_status(Verdict verdict) {
  switch (verdict) {
  case Verdict::success:
  case Verdict::kernel_failed:
    return 200;
  case Verdict::bad_request:
    return 400;
  case Verdict::infrastructure:
    return 500;
  }
  return 500;
}

namespace {

const json::object* phase(const JobRecord& r, const char* name) {
  auto it = r.phases.find(name);
  return it == r.phases.end() ? nullptr : &it->second;
}

const json::object* object_at(const json::object* o, const char* key) {
  if (o == nullptr)
    return nullptr;
  const auto* v = o->if_contains(key);
  return v != nullptr && v->is_object() ? &v->as_object() : nullptr;
}

bool ok_of(const json::object* o) {
  if (o == nullptr)
    return false;
  const auto* v = o->if_contains("ok");
  return v != nullptr && v->is_bool() && v->as_bool();
}

// "message\n\ndetails" — the one string seed-000 clients read, with the full log kept.
std::string error_text(const json::object* error) {
  if (error == nullptr)
    return {};
  std::string text = json::value_to<std::string>(error->at("message"));
  if (const auto* d = error->if_contains("details"); d != nullptr && d->is_string())
    text += "\n\n" + std::string(d->as_string());
  return text;
}

bool is_infrastructure_end(End end) {
  return end == End::timed_out || end == End::fatal || end == End::spawn_failed ||
         end == End::cancelled;
}

json::object worker_json(const supervisor::SessionOutcome& o) {
  json::object w;
  w["stdout"] = o.stdout_text;
  w["stderr"] = o.stderr_text;
  w["stdout_bytes"] = o.stdout_bytes;
  w["stderr_bytes"] = o.stderr_bytes;
  w["wall_ms"] = o.wall_ms;
  if (o.exit_code)
    w["exit_code"] = *o.exit_code;
  if (o.signal)
    w["signal"] = *o.signal;
  w["stage"] = o.stage;
  return w;
}

} // namespace

Response build_response(const JobRecord& record) {
  Response response;
  json::object& body = response.body;
  body["job_id"] = record.job_id;

  const json::object* compiled = phase(record, "compiled");
  const json::object* validated = phase(record, "validated");
  const json::object* profiled = phase(record, "profiled");
  const auto& outcome = record.outcome;
  const bool ended_badly = outcome && outcome->end != End::completed;

  json::object exec;
  json::object metadata;
  const json::object* custom_compile = object_at(compiled, "custom");
  const json::object* ref_compile = object_at(compiled, "ref");
  exec["compiled"] = ok_of(custom_compile);
  exec["correctness"] = ok_of(validated);
  exec["runtime"] = -1.0;
  exec["runtime_stats"] = json::object();
  body["compilation_error"] = nullptr;
  body["validation_error"] = nullptr;
  body["ref_runtime"] = nullptr;

  if (custom_compile && !ok_of(custom_compile))
    body["compilation_error"] = error_text(object_at(custom_compile, "error"));
  if (ref_compile && !ok_of(ref_compile))
    body["validation_error"] =
        "reference kernel failed to compile: " + error_text(object_at(ref_compile, "error"));
  if (validated && !ok_of(validated))
    body["validation_error"] = error_text(object_at(validated, "error"));

  if (profiled && ok_of(profiled)) {
    if (const auto* custom = object_at(profiled, "custom")) {
      exec["runtime"] = custom->at("mean");
      exec["runtime_stats"] = *custom;
    }
    if (const auto* ref = object_at(profiled, "ref"))
      body["ref_runtime"] = *ref;
    if (const auto* speedup = profiled->if_contains("speedup"))
      body["speedup"] = *speedup;
    metadata["timing_method"] = profiled->at("method");
  } else if (profiled) {
    body["profiling_error"] = error_text(object_at(profiled, "error"));
  }

  // A worker that died after compiling: the death is the kernel's failure, reported where the
  // job was (validation or profiling), unless keval itself ended it (timeout, cancel, fatal).
  if (ended_badly && compiled && !is_infrastructure_end(outcome->end)) {
    std::string text = outcome->message;
    if (!outcome->stderr_text.empty())
      text += "\n\nstderr:\n" + outcome->stderr_text;
    if (!validated)
      body["validation_error"] = text;
    else if (!profiled)
      body["profiling_error"] = text;
  }

  if (compiled)
    metadata["compile"] = *compiled;
  if (validated) {
    metadata["validation"] = *validated;
    if (const auto* device = validated->if_contains("device"))
      metadata["device"] = *device;
  }
  if (profiled)
    metadata["profiling"] = *profiled;
  if (outcome)
    metadata["worker"] = worker_json(*outcome);
  if (!record.warnings.empty()) {
    json::array warnings;
    for (const auto& w : record.warnings)
      warnings.emplace_back(w);
    metadata["warnings"] = std::move(warnings);
  }
  exec["metadata"] = std::move(metadata);
  body["kernel_exec_result"] = std::move(exec);

  // Classification. No usable device is the machine's failure, not the kernel's (seed 000: "GPU
  // resource allocation failure" is a 500).
  const json::object* validation_error = object_at(validated, "error");
  const bool no_device = validation_error != nullptr && validation_error->at("type") == "no_device";
  const bool infrastructure =
      no_device || (ended_badly && (is_infrastructure_end(outcome->end) || compiled == nullptr));
  const bool internal_compile_error =
      custom_compile && !ok_of(custom_compile) && object_at(custom_compile, "error") != nullptr &&
      object_at(custom_compile, "error")->at("type") == "internal_error";
  if (infrastructure || internal_compile_error) {
    response.verdict = Verdict::infrastructure;
    body["status"] = "failed";
    json::object error;
    error["class"] = "infrastructure";
    error["message"] = no_device        ? error_text(validation_error)
                       : infrastructure ? outcome->message
                                        : error_text(object_at(custom_compile, "error"));
    body["error"] = std::move(error);
  } else {
    const bool passed = ok_of(custom_compile) && ok_of(validated) &&
                        (profiled == nullptr || ok_of(profiled)) && !ended_badly &&
                        (ref_compile == nullptr || ok_of(ref_compile));
    response.verdict = passed ? Verdict::success : Verdict::kernel_failed;
    body["status"] = "success";
  }
  return response;
}

json::object bad_request_body(const std::string& path, const std::string& message) {
  json::object body;
  body["status"] = "failed";
  json::object error;
  error["class"] = "bad_request";
  error["path"] = path;
  error["message"] = message;
  error["detail"] = path.empty() ? message : path + ": " + message;
  body["error"] = std::move(error);
  return body;
}

} // namespace keval::result
