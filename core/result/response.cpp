#include "result/response.hpp"

#include "common/utf8.hpp"
#include "protocol/job_contract.hpp"

#include <algorithm>
#include <optional>
#include <string_view>

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

// "message\n\ndetails" — the one string V2 clients read, with the full log kept.
std::string error_text(const std::optional<protocol::ErrorInfo>& error) {
  if (!error)
    return {};
  std::string text = error->message;
  if (!error->details.empty())
    text += "\n\n" + error->details;
  return text;
}

bool is_infrastructure_end(End end) {
  return end == End::timed_out || end == End::fatal || end == End::spawn_failed ||
         end == End::cancelled;
}

json::object worker_json(const supervisor::SessionOutcome& o) {
  json::object w;
  w["stdout"] = valid_utf8(o.stdout_text);
  w["stderr"] = valid_utf8(o.stderr_text);
  w["stdout_bytes"] = o.stdout_bytes;
  w["stderr_bytes"] = o.stderr_bytes;
  w["wall_ms"] = o.wall_ms;
  if (!o.timeline.empty())
    w["timeline_ms"] = o.timeline;
  if (o.job_sent_unix_ms > 0)
    w["job_sent_unix_ms"] = o.job_sent_unix_ms;
  if (o.timeline_origin_unix_ms > 0)
    w["timeline_origin_unix_ms"] = o.timeline_origin_unix_ms;
  if (o.ready_wait_ms >= 0)
    w["ready_wait_ms"] = o.ready_wait_ms;
  if (o.prewarm_seconds) {
    json::object prewarm{{"total_s", *o.prewarm_seconds}};
    if (o.device_turn_wait_seconds)
      prewarm["device_turn_wait_s"] = *o.device_turn_wait_seconds;
    if (o.device_turn_wait_taken_seconds)
      prewarm["device_turn_wait_taken_s"] = *o.device_turn_wait_taken_seconds;
    if (o.device_open_seconds)
      prewarm["device_open_s"] = *o.device_open_seconds;
    if (!o.warm_up.empty())
      prewarm["device_warm_up"] = o.warm_up;
    w["prewarm"] = std::move(prewarm);
  }
  if (o.device_memory)
    w["device_memory"] = protocol::to_json(*o.device_memory);
  if (o.exit_code)
    w["exit_code"] = *o.exit_code;
  if (o.signal)
    w["signal"] = *o.signal;
  w["stage"] = protocol::stage_name(o.stage);
  return w;
}

} // namespace

std::vector<std::string> device_metrics_sides(const request::EvalRequest& request) {
  std::vector<std::string> sides;
  if (request.device_metrics_for(request.kernel))
    sides.emplace_back("custom");
  if (request.ref && request.device_metrics_for(*request.ref))
    sides.emplace_back("ref");
  return sides;
}

Response build_response(const JobRecord& record) {
  Response response;
  json::object& body = response.body;
  body["job_id"] = record.job_id;

  // The phases as the contract types them; the stored JSON is kept as metadata beside them.
  const json::object* compiled_json = phase(record, protocol::msg::kPhaseCompiled);
  const json::object* validated_json = phase(record, protocol::msg::kPhaseValidated);
  const json::object* profiled_json = phase(record, protocol::msg::kPhaseProfiled);
  json::object stored;
  for (const auto& [name, result] : record.phases)
    stored[name] = result;
  const protocol::JobPhases phases = protocol::phases_from_json(stored);
  const auto& compiled = phases.compiled;
  const auto& validated = phases.validated;
  const auto& profiled = phases.profiled;
  const auto& outcome = record.outcome;
  const bool ended_badly = outcome && outcome->end != End::completed;

  json::object exec;
  json::object metadata;
  const protocol::SideCompile* custom_compile =
      compiled && compiled->custom ? &*compiled->custom : nullptr;
  const protocol::SideCompile* ref_compile = compiled && compiled->ref ? &*compiled->ref : nullptr;
  exec["compiled"] = custom_compile != nullptr && custom_compile->ok;
  // A timed sample whose outputs did not match (or that modified an input, or whose device trace
  // the candidate's process lost) is a failed check like a correctness trial's
  // (worker/pipeline: every sample is checked).
  const bool failed_while_timed =
      profiled && !profiled->ok && profiled->failed_side == "custom" && profiled->error &&
      (profiled->error->type == "mismatch" || profiled->error->type == "input_modified" ||
       profiled->error->type == "device_trace_lost");
  // Flags from every phase; those the request made strict fail the result.
  json::array flags;
  if (validated)
    for (const auto& f : validated->flags)
      flags.push_back(f);
  if (profiled)
    for (const auto& f : profiled->flags)
      flags.push_back(f);
  std::vector<std::string> strict_failures;
  for (auto& f : flags) {
    json::object& o = f.as_object();
    // A copy: inserting "strict" below may move the object's elements.
    const json::string* found = o.contains("name") ? o.at("name").if_string() : nullptr;
    const std::optional<std::string> name =
        found != nullptr ? std::optional<std::string>(*found) : std::nullopt;
    const bool strict = name && std::find(record.strict_flags.begin(), record.strict_flags.end(),
                                          *name) != record.strict_flags.end();
    o["strict"] = strict;
    if (strict)
      strict_failures.push_back(*name);
  }
  exec["correctness"] =
      validated && validated->ok && !failed_while_timed && strict_failures.empty();
  exec["runtime"] = -1.0;
  exec["runtime_stats"] = json::object();
  body["compilation_error"] = nullptr;
  body["validation_error"] = nullptr;
  body["ref_runtime"] = nullptr;

  if (custom_compile && !custom_compile->ok)
    body["compilation_error"] = error_text(custom_compile->error);
  if (ref_compile && !ref_compile->ok)
    body["validation_error"] =
        "reference kernel failed to compile: " + error_text(ref_compile->error);
  // TensorData the worker could not decode (worker/pipeline: it did not inflate to its tensor's
  // size, which the host cannot check without inflating it): the request's fault. Only the
  // trusted worker reports it, never as a side's failure; its details are the JSON path.
  const bool bad_input_data = validated && validated->error &&
                              validated->error->type == "invalid_input_data" &&
                              validated->failed_side.empty();
  std::string strict_note;
  if (!strict_failures.empty()) {
    std::string names;
    for (const auto& n : strict_failures)
      names += (names.empty() ? "" : ", ") + n;
    strict_note = "flagged " + names +
                  ", which the request made strict (see kernel_exec_result.metadata.flags)";
  }
  // A kernel that failed a check and was also flagged strict: both reasons, the check's first
  // (which of the two a racing kernel trips first must not decide what the client learns).
  const auto with_strict_note = [&](std::string failure) {
    return strict_note.empty() ? failure : failure + "; also " + strict_note;
  };
  if (validated && !validated->ok)
    body["validation_error"] =
        bad_input_data ? validated->error->message : with_strict_note(error_text(validated->error));
  else if (failed_while_timed)
    body["validation_error"] = with_strict_note(error_text(profiled->error));
  else if (!strict_note.empty())
    body["validation_error"] = strict_note;

  if (profiled && profiled->ok) {
    if (profiled->custom) {
      exec["runtime"] = profiled->custom->mean;
      exec["runtime_stats"] = json::value_from(*profiled->custom);
    }
    if (profiled->ref)
      body["ref_runtime"] = json::value_from(*profiled->ref);
    if (profiled->speedup)
      body["speedup"] = *profiled->speedup;
    metadata["timing_method"] = profiled->method;
  } else if (profiled) {
    body["profiling_error"] = error_text(profiled->error);
  }

  // A worker that died after compiling: the death is the kernel's failure, reported where the
  // job was (validation or profiling), unless keval itself ended it (timeout, cancel, fatal).
  if (ended_badly && compiled && !is_infrastructure_end(outcome->end)) {
    std::string text = outcome->message;
    if (!outcome->stderr_text.empty())
      text += "\n\nstderr:\n" + valid_utf8(outcome->stderr_text);
    if (!validated)
      body["validation_error"] = text;
    else if (!profiled)
      body["profiling_error"] = text;
  }

  if (compiled_json)
    metadata["compile"] = *compiled_json;
  // A whole program's report (docs/cuda_program.md), as its latest phase left it.
  for (const json::object* p : {profiled_json, validated_json, compiled_json})
    if (p != nullptr && p->contains("program")) {
      metadata["program"] = p->at("program");
      break;
    }
  // What held the candidate's user code (worker/isolation/sandbox.hpp), the reference's beside it
  // when it ran in a sandbox that differs.
  if (custom_compile && !custom_compile->isolation.empty()) {
    json::object sandbox = custom_compile->isolation;
    if (ref_compile && !ref_compile->isolation.empty()) {
      json::object ref;
      for (const char* key : {"active", "skipped"})
        if (const json::value* v = ref_compile->isolation.if_contains(key))
          ref[key] = *v;
      sandbox["ref"] = std::move(ref);
    }
    metadata["sandbox"] = std::move(sandbox);
  }
  if (validated_json) {
    metadata["validation"] = *validated_json;
    if (!validated->device.empty())
      metadata["device"] = validated->device;
  }
  if (profiled_json) {
    json::object profiling = *profiled_json;
    profiling.erase("device_metrics"); // reported once, below
    metadata["profiling"] = std::move(profiling);
  }
  // Each side's hardware counters where the request asked (seed 000's metadata.device_metrics for
  // the candidate, the reference's beside it), with the reason wherever there are none.
  std::vector<std::string> metric_sides = record.device_metrics_sides;
  if (profiled)
    for (const char* side : {"custom", "ref"})
      if (profiled->device_metrics.contains(side) &&
          std::find(metric_sides.begin(), metric_sides.end(), side) == metric_sides.end())
        metric_sides.emplace_back(side); // a record reloaded from disk knows no request
  for (const auto& side : metric_sides) {
    const json::value* collected = profiled ? profiled->device_metrics.if_contains(side) : nullptr;
    json::value report;
    if (collected != nullptr && collected->is_object()) {
      report = *collected;
    } else {
      std::string why = "not collected: the job ended before its timing finished";
      bool program = false;
      for (const json::object* p : {profiled_json, validated_json, compiled_json})
        program = program || (p != nullptr && p->contains("program"));
      if (program)
        why = "not collected: a whole program's device metrics come from its benchmark runs "
              "(kernel.metadata.benchmark true, on a problem with a benchmark_command and a "
              "baseline_solution), and the job ended before any finished";
      report = json::object{{"available", false}, {"reason", why}};
    }
    metadata[side == "ref" ? "ref_device_metrics" : "device_metrics"] = std::move(report);
  }
  metadata["flags"] = std::move(flags);
  if (validated && validated->seed)
    metadata["seed"] = *validated->seed;
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

  // Classification. No usable device is the machine's failure, not the kernel's (the V2 contract:
  // "GPU resource allocation failure" is a 500).
  const bool no_device = validated && validated->error && validated->error->type == "no_device";
  const bool infrastructure =
      no_device || (ended_badly && (is_infrastructure_end(outcome->end) || !compiled));
  const bool internal_compile_error = custom_compile && !custom_compile->ok &&
                                      custom_compile->error &&
                                      custom_compile->error->type == "internal_error";
  if (bad_input_data && !infrastructure) {
    response.verdict = Verdict::bad_request;
    body["status"] = "failed";
    const std::string& path = validated->error->details;
    std::string message = validated->error->message;
    if (!path.empty() && message.rfind(path + ": ", 0) == 0)
      message.erase(0, path.size() + 2);
    body["error"] = json::object{{"class", "bad_request"},
                                 {"path", path},
                                 {"message", message},
                                 {"detail", validated->error->message}};
  } else if (infrastructure || internal_compile_error) {
    response.verdict = Verdict::infrastructure;
    body["status"] = "failed";
    json::object error;
    error["class"] = "infrastructure";
    error["message"] = no_device        ? error_text(validated->error)
                       : infrastructure ? outcome->message
                                        : error_text(custom_compile->error);
    body["error"] = std::move(error);
  } else {
    const bool passed = custom_compile && custom_compile->ok && validated && validated->ok &&
                        (!profiled || profiled->ok) && !ended_badly &&
                        (ref_compile == nullptr || ref_compile->ok) && strict_failures.empty();
    response.verdict = passed ? Verdict::success : Verdict::kernel_failed;
    body["status"] = "success";
    // A program this machine cannot run (a newer GPU or toolkit, docs/cuda_program.md): neither
    // the kernel's failure nor keval's, so ComputeEval's pass@k leaves it out.
    if (compiled_json != nullptr && compiled_json->contains("skipped"))
      body["status"] = "skipped";
  }
  return response;
}

json::object bad_request_body(const std::string& path, const std::string& message) {
  json::object body;
  body["status"] = "failed";
  json::object error;
  error["class"] = "bad_request";
  // Both may echo what the client sent (a header's value, a URL's bytes), which need not be
  // UTF-8; a JSON response must be.
  error["path"] = valid_utf8(path);
  error["message"] = valid_utf8(message);
  error["detail"] = valid_utf8(path.empty() ? message : path + ": " + message);
  body["error"] = std::move(error);
  return body;
}

} // namespace keval::result
