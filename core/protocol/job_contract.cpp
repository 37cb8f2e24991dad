#include "protocol/job_contract.hpp"

#include "protocol/frame.hpp"

#include <array>
#include <cmath>
#include <cstdint>

namespace keval::protocol {

namespace json = boost::json;

namespace {

[[noreturn]] void missing(const char* key, const char* what) {
  throw ProtocolError(std::string("'") + key + "' is missing or not " + what);
}

const json::object& as_object(const json::value& v, const char* what) {
  if (!v.is_object())
    throw ProtocolError(std::string(what) + " is not an object");
  return v.as_object();
}

std::string string_at(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_string())
    missing(key, "a string");
  return std::string(v->as_string());
}

std::string optional_string(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

bool bool_at(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_bool())
    missing(key, "a boolean");
  return v->as_bool();
}

double number_at(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_number())
    missing(key, "a number");
  return v->to_number<double>();
}

// A duration or a moment in milliseconds, as `done` carries them.
bool non_negative_ms(const json::value& v) {
  return v.is_number() && std::isfinite(v.to_number<double>()) && v.to_number<double>() >= 0;
}

int64_t integer_at(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v != nullptr && v->is_int64())
    return v->as_int64();
  if (v != nullptr && v->is_uint64() && v->as_uint64() <= static_cast<uint64_t>(INT64_MAX))
    return static_cast<int64_t>(v->as_uint64());
  if (v != nullptr && v->is_double() &&
      v->as_double() == static_cast<double>(static_cast<int64_t>(v->as_double())))
    return static_cast<int64_t>(v->as_double());
  missing(key, "an integer");
}

json::object object_or_empty(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_object() ? v->as_object() : json::object();
}

json::array array_or_empty(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_array() ? v->as_array() : json::array();
}

// `device_memory` of a hello or done: absent, or a reading whose numbers add up.
std::optional<DeviceMemoryReading> device_memory_at(const json::object& m, const char* message) {
  const json::value* v = m.if_contains("device_memory");
  if (v == nullptr)
    return std::nullopt;
  const std::string where = std::string("'device_memory' of ") + message;
  if (!v->is_object())
    throw ProtocolError(where + " is not an object");
  const json::object& o = v->get_object();
  const auto bytes = [&](const char* key) {
    const json::value* n = o.if_contains(key);
    if (n != nullptr && n->is_uint64())
      return n->as_uint64();
    if (n != nullptr && n->is_int64() && n->as_int64() >= 0)
      return static_cast<uint64_t>(n->as_int64());
    throw ProtocolError(where + ": '" + key + "' is not a non-negative integer");
  };
  DeviceMemoryReading reading;
  const json::value* gpu = o.if_contains("gpu");
  if (gpu == nullptr || !gpu->is_string() || gpu->get_string().empty())
    throw ProtocolError(where + ": 'gpu' is not a non-empty string");
  reading.gpu = std::string(gpu->get_string());
  reading.free_bytes = bytes("free_bytes");
  reading.total_bytes = bytes("total_bytes");
  if (!plausible(reading))
    throw ProtocolError(where + ": 'free_bytes' " + std::to_string(reading.free_bytes) +
                        " of 'total_bytes' " + std::to_string(reading.total_bytes));
  return reading;
}

template <class T> std::optional<T> optional_at(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null())
    return std::nullopt;
  return json::value_to<T>(*v);
}

template <class T> void put(json::object& o, const char* key, const std::optional<T>& value) {
  if (value)
    o[key] = json::value_from(*value);
}

// In JobStage's order.
constexpr std::array<const char*, 10> kStageNames = {
    "queued",     "starting",  "compiling", "compiled", "waiting_for_device",
    "validating", "profiling", "finishing", "exiting",  "done"};
static_assert(kStageNames.size() == static_cast<size_t>(JobStage::done) + 1);

} // namespace

const char* stage_name(JobStage stage) {
  return kStageNames[static_cast<size_t>(stage)];
}

std::optional<JobStage> parse_stage(std::string_view name) {
  for (size_t i = 0; i < kStageNames.size(); ++i)
    if (name == kStageNames[i])
      return static_cast<JobStage>(i);
  return std::nullopt;
}

bool can_follow(JobStage from, JobStage to) {
  return static_cast<int>(to) >= static_cast<int>(from);
}

const char* phase_name(Phase phase) {
  switch (phase) {
  case Phase::compiled:
    return msg::kPhaseCompiled;
  case Phase::validated:
    return msg::kPhaseValidated;
  case Phase::profiled:
    return msg::kPhaseProfiled;
  }
  return "unknown";
}

std::optional<Phase> parse_phase(std::string_view name) {
  for (Phase p : {Phase::compiled, Phase::validated, Phase::profiled})
    if (name == phase_name(p))
      return p;
  return std::nullopt;
}

// --- reports ----------------------------------------------------------------------------------

void tag_invoke(json::value_from_tag, json::value& v, const ErrorInfo& e) {
  json::object o;
  o["type"] = e.type;
  o["message"] = e.message;
  if (!e.details.empty())
    o["details"] = e.details;
  v = std::move(o);
}

ErrorInfo tag_invoke(json::value_to_tag<ErrorInfo>, const json::value& v) {
  const json::object& o = as_object(v, "an error");
  return {string_at(o, "type"), string_at(o, "message"), optional_string(o, "details")};
}

void tag_invoke(json::value_from_tag, json::value& v, const SideCompile& s) {
  json::object o;
  o["kernel_type"] = s.kernel_type;
  o["ok"] = s.ok;
  o["time_ms"] = s.time_ms;
  if (!s.info.is_null())
    o["info"] = s.info;
  put(o, "error", s.error);
  o["isolation"] = s.isolation;
  put(o, "companion_error", s.companion_error);
  v = std::move(o);
}

SideCompile tag_invoke(json::value_to_tag<SideCompile>, const json::value& v) {
  const json::object& o = as_object(v, "a side's compilation");
  SideCompile s;
  s.kernel_type = string_at(o, "kernel_type");
  s.ok = bool_at(o, "ok");
  s.time_ms = number_at(o, "time_ms");
  if (const json::value* info = o.if_contains("info"))
    s.info = *info;
  s.error = optional_at<ErrorInfo>(o, "error");
  s.isolation = object_or_empty(o, "isolation");
  s.companion_error = optional_at<ErrorInfo>(o, "companion_error");
  return s;
}

void tag_invoke(json::value_from_tag, json::value& v, const CompileReport& r) {
  json::object o;
  o["ok"] = r.ok;
  put(o, "ref", r.ref);
  put(o, "custom", r.custom);
  v = std::move(o);
}

CompileReport tag_invoke(json::value_to_tag<CompileReport>, const json::value& v) {
  const json::object& o = as_object(v, "the compile report");
  CompileReport r;
  r.ok = bool_at(o, "ok");
  r.ref = optional_at<SideCompile>(o, "ref");
  r.custom = optional_at<SideCompile>(o, "custom");
  return r;
}

void tag_invoke(json::value_from_tag, json::value& v, const ValidationReport& r) {
  json::object o;
  o["ok"] = r.ok;
  if (!r.mode.empty())
    o["mode"] = r.mode;
  if (!r.device.empty())
    o["device"] = r.device;
  if (!r.tolerance.empty())
    o["tolerance"] = r.tolerance;
  if (!r.mode.empty())
    o["trials"] = r.trials;
  put(o, "error", r.error);
  if (!r.failed_side.empty())
    o["failed_side"] = r.failed_side;
  put(o, "seed", r.seed);
  if (!r.flags.empty())
    o["flags"] = r.flags;
  v = std::move(o);
}

ValidationReport tag_invoke(json::value_to_tag<ValidationReport>, const json::value& v) {
  const json::object& o = as_object(v, "the validation report");
  ValidationReport r;
  r.ok = bool_at(o, "ok");
  r.mode = optional_string(o, "mode");
  r.device = object_or_empty(o, "device");
  r.tolerance = object_or_empty(o, "tolerance");
  r.trials = array_or_empty(o, "trials");
  r.error = optional_at<ErrorInfo>(o, "error");
  r.failed_side = optional_string(o, "failed_side");
  r.seed = optional_at<uint64_t>(o, "seed");
  r.flags = array_or_empty(o, "flags");
  return r;
}

void tag_invoke(json::value_from_tag, json::value& v, const SideTiming& t) {
  json::object o;
  o["mean"] = t.mean;
  o["std"] = t.std;
  o["min"] = t.min;
  o["max"] = t.max;
  o["median"] = t.median;
  o["percentile_95"] = t.percentile_95;
  o["percentile_99"] = t.percentile_99;
  o["count"] = t.count;
  o["method"] = t.method;
  o["warmup_runs"] = t.warmup_runs;
  v = std::move(o);
}

SideTiming tag_invoke(json::value_to_tag<SideTiming>, const json::value& v) {
  const json::object& o = as_object(v, "a side's timing");
  SideTiming t;
  t.mean = number_at(o, "mean");
  t.std = number_at(o, "std");
  t.min = number_at(o, "min");
  t.max = number_at(o, "max");
  t.median = number_at(o, "median");
  t.percentile_95 = number_at(o, "percentile_95");
  t.percentile_99 = number_at(o, "percentile_99");
  t.count = integer_at(o, "count");
  t.method = string_at(o, "method");
  t.warmup_runs = o.contains("warmup_runs") ? integer_at(o, "warmup_runs") : 0;
  return t;
}

void tag_invoke(json::value_from_tag, json::value& v, const ProfileReport& r) {
  json::object o;
  o["ok"] = r.ok;
  if (!r.method.empty())
    o["method"] = r.method;
  if (!r.device.empty())
    o["device"] = r.device;
  put(o, "ref", r.ref);
  put(o, "custom", r.custom);
  put(o, "speedup", r.speedup);
  put(o, "speedup_floor", r.speedup_floor);
  put(o, "error", r.error);
  if (!r.failed_side.empty())
    o["failed_side"] = r.failed_side;
  if (!r.flags.empty())
    o["flags"] = r.flags;
  if (!r.checks.empty())
    o["checks"] = r.checks;
  if (!r.sampling.empty())
    o["sampling"] = r.sampling;
  if (!r.device_work.empty())
    o["device_work"] = r.device_work;
  if (!r.device_metrics.empty())
    o["device_metrics"] = r.device_metrics;
  v = std::move(o);
}

ProfileReport tag_invoke(json::value_to_tag<ProfileReport>, const json::value& v) {
  const json::object& o = as_object(v, "the profile report");
  ProfileReport r;
  r.ok = bool_at(o, "ok");
  r.method = optional_string(o, "method");
  r.device = object_or_empty(o, "device");
  r.ref = optional_at<SideTiming>(o, "ref");
  r.custom = optional_at<SideTiming>(o, "custom");
  r.speedup = optional_at<double>(o, "speedup");
  r.speedup_floor = optional_at<double>(o, "speedup_floor");
  r.error = optional_at<ErrorInfo>(o, "error");
  r.failed_side = optional_string(o, "failed_side");
  r.flags = array_or_empty(o, "flags");
  r.checks = object_or_empty(o, "checks");
  r.sampling = object_or_empty(o, "sampling");
  r.device_work = object_or_empty(o, "device_work");
  r.device_metrics = object_or_empty(o, "device_metrics");
  return r;
}

JobPhases phases_from_json(const json::object& phases) {
  JobPhases p;
  p.compiled = optional_at<CompileReport>(phases, msg::kPhaseCompiled);
  p.validated = optional_at<ValidationReport>(phases, msg::kPhaseValidated);
  p.profiled = optional_at<ProfileReport>(phases, msg::kPhaseProfiled);
  return p;
}

json::object phases_to_json(const JobPhases& phases) {
  json::object o;
  put(o, msg::kPhaseCompiled, phases.compiled);
  put(o, msg::kPhaseValidated, phases.validated);
  put(o, msg::kPhaseProfiled, phases.profiled);
  return o;
}

// --- messages ---------------------------------------------------------------------------------

namespace {

// Converts, turning any conversion failure into a ProtocolError that names the message.
template <class T> T read_as(const json::value& v, const std::string& what) {
  try {
    return json::value_to<T>(v);
  } catch (const ProtocolError& e) {
    throw ProtocolError(what + ": " + e.what());
  } catch (const std::exception& e) {
    throw ProtocolError(what + ": " + e.what());
  }
}

} // namespace

bool plausible(const DeviceMemoryReading& reading) {
  return !reading.gpu.empty() && reading.total_bytes > 0 &&
         reading.free_bytes <= reading.total_bytes;
}

json::object to_json(const DeviceMemoryReading& reading) {
  return {{"gpu", reading.gpu},
          {"free_bytes", reading.free_bytes},
          {"total_bytes", reading.total_bytes}};
}

WorkerMessage parse_worker_message(const json::object& m) {
  const std::string type = string_at(m, "type");
  if (type == msg::kHello) {
    Hello h;
    h.worker_version = optional_string(m, "worker_version");
    h.pid = integer_at(m, "pid");
    h.isolation = object_or_empty(m, "isolation");
    h.prewarmed = array_or_empty(m, "prewarmed");
    h.prewarm_errors = array_or_empty(m, "prewarm_errors");
    if (m.contains("prewarm_seconds"))
      h.prewarm_seconds = number_at(m, "prewarm_seconds");
    if (m.contains("device_turn_wait_seconds"))
      h.device_turn_wait_seconds = number_at(m, "device_turn_wait_seconds");
    if (m.contains("device_turn_wait_taken_seconds"))
      h.device_turn_wait_taken_seconds = number_at(m, "device_turn_wait_taken_seconds");
    if (m.contains("device_open_seconds"))
      h.device_open_seconds = number_at(m, "device_open_seconds");
    h.device_memory = device_memory_at(m, "hello");
    return h;
  }
  if (type == msg::kPhase) {
    const std::string name = string_at(m, "phase");
    const auto phase = parse_phase(name);
    if (!phase)
      throw ProtocolError("unknown phase '" + name + "'");
    const json::value* result = m.if_contains("result");
    if (result == nullptr || !result->is_object())
      missing("result", "an object");
    // The report must be what its phase says: checked here, kept as sent (records store JSON).
    switch (*phase) {
    case Phase::compiled:
      read_as<CompileReport>(*result, "the compiled phase");
      break;
    case Phase::validated:
      read_as<ValidationReport>(*result, "the validated phase");
      break;
    case Phase::profiled:
      read_as<ProfileReport>(*result, "the profiled phase");
      break;
    }
    return PhaseMessage{*phase, result->as_object()};
  }
  if (type == msg::kNeedDevice) {
    NeedDevice n;
    const json::value* types = m.if_contains("device_types");
    if (types == nullptr || !types->is_array())
      missing("device_types", "an array");
    for (const auto& t : types->as_array()) {
      if (!t.is_string())
        throw ProtocolError("'device_types' holds something other than a string");
      n.device_types.emplace_back(t.as_string());
    }
    if (m.contains("opened_cuda")) {
      const int64_t ordinal = integer_at(m, "opened_cuda");
      if (ordinal < 0 || ordinal > INT32_MAX)
        throw ProtocolError("'opened_cuda' is not a CUDA ordinal: " + std::to_string(ordinal));
      n.opened_cuda = static_cast<int>(ordinal);
    }
    return n;
  }
  if (type == msg::kProgress)
    return Progress{string_at(m, "phase"), integer_at(m, "done"), integer_at(m, "total")};
  if (type == msg::kDone) {
    Done done;
    if (const json::value* timeline = m.if_contains("timeline")) {
      if (!timeline->is_object())
        throw ProtocolError("'timeline' of done is not an object");
      for (const auto& [step, ms] : timeline->get_object())
        if (!non_negative_ms(ms))
          throw ProtocolError("'timeline." + std::string(step) +
                              "' of done is not a non-negative number of milliseconds");
      done.timeline = timeline->get_object();
    }
    if (const json::value* warm_up = m.if_contains("warm_up")) {
      if (!warm_up->is_object())
        throw ProtocolError("'warm_up' of done is not an object");
      done.warm_up = warm_up->get_object();
    }
    if (const json::value* origin = m.if_contains("origin_unix_ms")) {
      if (!non_negative_ms(*origin))
        throw ProtocolError("'origin_unix_ms' of done is not a non-negative number of "
                            "milliseconds");
      done.origin_unix_ms = origin->to_number<double>();
    }
    done.device_memory = device_memory_at(m, "done");
    return done;
  }
  if (type == msg::kFatal)
    return Fatal{string_at(m, "message")};
  if (type == msg::kDeviceHandover)
    return DeviceHandover{};
  throw ProtocolError("unexpected message type '" + type + "'");
}

json::object to_frame(const WorkerMessage& message) {
  json::object m;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Hello>) {
          m["type"] = msg::kHello;
          m["worker_version"] = x.worker_version;
          m["pid"] = x.pid;
          m["isolation"] = x.isolation;
          if (!x.prewarmed.empty() || x.prewarm_seconds)
            m["prewarmed"] = x.prewarmed;
          if (!x.prewarm_errors.empty())
            m["prewarm_errors"] = x.prewarm_errors;
          if (x.prewarm_seconds)
            m["prewarm_seconds"] = *x.prewarm_seconds;
          if (x.device_turn_wait_seconds)
            m["device_turn_wait_seconds"] = *x.device_turn_wait_seconds;
          if (x.device_turn_wait_taken_seconds)
            m["device_turn_wait_taken_seconds"] = *x.device_turn_wait_taken_seconds;
          if (x.device_open_seconds)
            m["device_open_seconds"] = *x.device_open_seconds;
          if (x.device_memory)
            m["device_memory"] = to_json(*x.device_memory);
        } else if constexpr (std::is_same_v<T, PhaseMessage>) {
          m["type"] = msg::kPhase;
          m["phase"] = phase_name(x.phase);
          m["result"] = x.result;
        } else if constexpr (std::is_same_v<T, NeedDevice>) {
          m["type"] = msg::kNeedDevice;
          json::array types;
          for (const auto& t : x.device_types)
            types.emplace_back(t);
          m["device_types"] = std::move(types);
          if (x.opened_cuda)
            m["opened_cuda"] = *x.opened_cuda;
        } else if constexpr (std::is_same_v<T, Progress>) {
          m["type"] = msg::kProgress;
          m["phase"] = x.phase;
          m["done"] = x.done;
          m["total"] = x.total;
        } else if constexpr (std::is_same_v<T, Done>) {
          m["type"] = msg::kDone;
          if (!x.timeline.empty())
            m["timeline"] = x.timeline;
          if (!x.warm_up.empty())
            m["warm_up"] = x.warm_up;
          if (x.origin_unix_ms > 0)
            m["origin_unix_ms"] = x.origin_unix_ms;
          if (x.device_memory)
            m["device_memory"] = to_json(*x.device_memory);
        } else if constexpr (std::is_same_v<T, DeviceHandover>) {
          m["type"] = msg::kDeviceHandover;
        } else {
          m["type"] = msg::kFatal;
          m["message"] = x.message;
        }
      },
      message);
  return m;
}

Grant parse_grant(const json::object& m) {
  if (string_at(m, "type") != msg::kGrant)
    throw ProtocolError("expected a grant, got '" + string_at(m, "type") + "'");
  Grant g;
  if (const json::value* error = m.if_contains("error")) {
    g.error = error->is_string() ? std::string(error->as_string()) : "no device was granted";
    return g;
  }
  const json::value* device = m.if_contains("device");
  if (device == nullptr || !device->is_object())
    missing("device", "an object");
  g.device = device->as_object();
  g.device_type = string_at(g.device, "type");
  g.index = g.device.contains("index") ? integer_at(g.device, "index") : 0;
  if (const json::value* quiet = m.if_contains("quiet")) {
    if (!quiet->is_bool())
      throw ProtocolError("'quiet' of grant is not a boolean");
    g.quiet = quiet->as_bool();
  }
  if (const json::value* handover = m.if_contains("handover")) {
    if (!handover->is_bool())
      throw ProtocolError("'handover' of grant is not a boolean");
    g.takes_handover = handover->as_bool();
  }
  if (const json::value* verifier = m.if_contains("verifier")) {
    if (!verifier->is_object())
      throw ProtocolError("'verifier' of grant is not an object");
    g.verifier_socket = string_at(verifier->as_object(), "socket");
    g.verifier_token = string_at(verifier->as_object(), "token");
  }
  return g;
}

void parse_device_quiet(const json::object& m) {
  if (string_at(m, "type") != msg::kDeviceQuiet)
    throw ProtocolError("expected device_quiet, got '" + string_at(m, "type") + "'");
}

json::object to_frame(const JobFrame& job) {
  json::object m;
  m["type"] = msg::kJob;
  m["job_id"] = job.job_id;
  m["mode"] = job.mode;
  m["request"] = job.request;
  json::object plugins;
  for (const auto& [type, path] : job.plugins)
    plugins[type] = path;
  m["plugins"] = std::move(plugins);
  m["work_dir"] = job.work_dir;
  m["cuda_arch"] = job.cuda_arch;
  m["seed"] = job.seed;
  m["timeout_ms"] = job.timeout_ms;
  if (job.device_verifier)
    m["device_verifier"] = true;
  return m;
}

JobFrame parse_job_frame(const json::object& m) {
  if (string_at(m, "type") != msg::kJob)
    throw ProtocolError("expected a job frame, got '" + string_at(m, "type") + "'");
  JobFrame job;
  job.job_id = string_at(m, "job_id");
  job.mode = string_at(m, "mode");
  const json::value* request = m.if_contains("request");
  if (request == nullptr || !request->is_object())
    missing("request", "an object");
  job.request = request->as_object();
  const json::value* plugins = m.if_contains("plugins");
  if (plugins == nullptr || !plugins->is_object())
    missing("plugins", "an object");
  for (const auto& [type, path] : plugins->as_object()) {
    if (!path.is_string())
      throw ProtocolError("plugin path for '" + std::string(type) + "' is not a string");
    job.plugins[std::string(type)] = std::string(path.as_string());
  }
  job.work_dir = string_at(m, "work_dir");
  job.cuda_arch = integer_at(m, "cuda_arch");
  const json::value* seed = m.if_contains("seed");
  if (seed != nullptr && seed->is_uint64())
    job.seed = seed->as_uint64();
  else
    job.seed = static_cast<uint64_t>(integer_at(m, "seed"));
  if (const json::value* timeout = m.if_contains("timeout_ms"); timeout != nullptr)
    job.timeout_ms = integer_at(m, "timeout_ms");
  if (const json::value* verifier = m.if_contains("device_verifier")) {
    if (!verifier->is_bool())
      throw ProtocolError("'device_verifier' of job is not a boolean");
    job.device_verifier = verifier->as_bool();
  }
  return job;
}

} // namespace keval::protocol
