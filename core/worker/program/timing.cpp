#include "worker/program/timing.hpp"

#include <cmath>
#include <regex>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value_from.hpp>
#include <fnmatch.h>

namespace keval::worker::program {

namespace json = boost::json;

namespace {

bool selected(const request::TimingMode& mode, const std::string& name) {
  if (!mode.include.empty()) {
    bool any = false;
    for (const auto& p : mode.include)
      any = any || glob_match(p, name);
    if (!any)
      return false;
  }
  for (const auto& p : mode.exclude)
    if (glob_match(p, name))
      return false;
  return true;
}

double number(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_number() ? v->to_number<double>() : 0.0;
}

std::string format_ms(double ms) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3f ms", ms);
  return buffer;
}

} // namespace

bool glob_match(const std::string& pattern, const std::string& name) {
  return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

std::string time_source(const request::TimingMode& mode) {
  if (mode.type == "process")
    return "process_wall_clock";
  if (mode.type == "custom")
    return "self_reported";
  if (mode.type == "region")
    return "cupti_region_" + mode.time_type;
  return "cupti_" + mode.type;
}

json::object to_json(const request::TimingMode& mode) {
  json::object o;
  o["type"] = mode.type;
  if (mode.type == "kernels" || mode.type == "region") {
    o["include"] = mode.include.empty() ? json::value(nullptr) : json::value_from(mode.include);
    o["exclude"] = mode.exclude.empty() ? json::value(nullptr) : json::value_from(mode.exclude);
  }
  if (mode.type == "region")
    o["time_type"] = mode.time_type;
  return o;
}

BenchmarkRun time_of_run(const request::TimingMode& mode, double wall_ms,
                         const std::string& stdout_text,
                         const std::optional<std::string>& profile_json) {
  BenchmarkRun run;
  run.wall_ms = wall_ms;
  double time = 0;
  if (mode.type == "process") {
    time = wall_ms;
  } else if (mode.type == "custom") {
    static const std::regex line(R"(^COMPUTE_EVAL_TIME_MS:[ \t]*([0-9.]+)[ \t]*\r?$)",
                                 std::regex::multiline);
    std::string last;
    for (auto it = std::sregex_iterator(stdout_text.begin(), stdout_text.end(), line);
         it != std::sregex_iterator(); ++it)
      last = (*it)[1].str();
    if (last.empty()) {
      run.error = "the benchmark printed no 'COMPUTE_EVAL_TIME_MS: <ms>' line (timing mode custom)";
      return run;
    }
    time = std::strtod(last.c_str(), nullptr);
  } else {
    if (!profile_json) {
      run.error = "no profile was read";
      return run;
    }
    json::object profile;
    try {
      profile = json::parse(*profile_json).as_object();
      if (const json::value* errors = profile.if_contains("errors");
          errors != nullptr && errors->is_array() && !errors->as_array().empty()) {
        run.error = "the profiler could not collect: " + json::serialize(*errors);
        return run;
      }
      const json::object& summary = profile.at("summary").as_object();
      if (mode.type == "kernels") {
        if (mode.include.empty() && mode.exclude.empty()) {
          time = number(summary, "total_kernel_time_ms");
        } else {
          for (const auto& k : profile.at("kernels").as_array())
            if (selected(mode, std::string(k.as_object().at("name").as_string())))
              time += number(k.as_object(), "total_duration_ms");
        }
      } else if (mode.type == "region") {
        for (const auto& [name, range] : profile.at("nvtx_ranges").as_object())
          if (selected(mode, std::string(name)))
            time += number(range.as_object(),
                           mode.time_type == "kernel" ? "kernel_time_ms" : "wall_clock_time_ms");
      } else { // gpu: kernels and copies
        time = number(summary, "total_kernel_time_ms");
        for (const auto& [kind, transfers] : profile.at("memory_transfers").as_object())
          time += number(transfers.as_object(), "total_time_ms");
      }
    } catch (const std::exception& e) {
      run.error = std::string("the profile is not what the profiler writes: ") + e.what();
      return run;
    }
    run.metrics = std::move(profile);
  }
  if (!std::isfinite(time) || time <= 0) {
    run.error = "the timing mode measured nothing (" + time_source(mode) +
                ": no matching kernel or range, or a zero time)";
    return run;
  }
  // Measured inside the program's own process: it cannot have taken longer than the process.
  if (mode.type != "process" && time > wall_ms) {
    run.error = "the benchmark reported " + format_ms(time) + ", more than the " +
                format_ms(wall_ms) + " its process ran: not believed";
    return run;
  }
  run.time_ms = time;
  return run;
}

} // namespace keval::worker::program
