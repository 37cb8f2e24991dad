#include "worker/engine/device_counters.hpp"

#include <cmath>
#include <limits>

#include <boost/json/array.hpp>

namespace keval::worker {

namespace json = boost::json;

namespace {

json::array triple(const int64_t (&v)[3]) {
  return json::array{v[0], v[1], v[2]};
}

const json::value& field(const json::object& o, const char* key, const std::string& where) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr)
    throw std::invalid_argument(where + "." + key + " is missing");
  return *v;
}

// A count that fits the device's own limits comfortably (nothing here is above 2^40).
int64_t count_of(const json::object& o, const char* key, const std::string& where) {
  const json::value& v = field(o, key, where);
  if (!v.is_int64() || v.get_int64() < 0 || v.get_int64() > (int64_t{1} << 40))
    throw std::invalid_argument(where + "." + key + " must be a whole number from 0 to 2^40");
  return v.get_int64();
}

// A measured amount: finite and not negative.
double measure_of(const json::object& o, const char* key, const std::string& where) {
  const json::value& v = field(o, key, where);
  if (!v.is_number() || !std::isfinite(v.to_number<double>()) || v.to_number<double>() < 0)
    throw std::invalid_argument(where + "." + key + " must be a finite number, not negative");
  return v.to_number<double>();
}

std::string text_of(const json::object& o, const char* key, const std::string& where,
                    size_t max_bytes) {
  const json::string* s = field(o, key, where).if_string();
  if (s == nullptr)
    throw std::invalid_argument(where + "." + key + " must be a string");
  return clean_work_name(std::string_view(*s).substr(0, max_bytes));
}

void read_triple(const json::object& o, const char* key, const std::string& where,
                 int64_t (&out)[3]) {
  const json::array* a = field(o, key, where).if_array();
  if (a == nullptr || a->size() != 3)
    throw std::invalid_argument(where + "." + key + " must be an array of three numbers");
  for (size_t i = 0; i < 3; ++i) {
    const json::value& v = (*a)[i];
    if (!v.is_int64() || v.get_int64() < 0 || v.get_int64() > (int64_t{1} << 40))
      throw std::invalid_argument(where + "." + key + " holds something other than a dimension");
    out[i] = v.get_int64();
  }
}

} // namespace

json::object to_json(const DeviceCounters& counters) {
  json::object o;
  o["chip"] = counters.chip;
  json::array metrics;
  for (const auto& m : counters.metrics)
    metrics.emplace_back(m);
  o["metrics"] = std::move(metrics);
  json::array unsupported;
  for (const auto& [metric, why] : counters.unsupported)
    unsupported.push_back(json::object{{"metric", metric}, {"reason", why}});
  o["unsupported"] = std::move(unsupported);
  json::array kernels;
  for (const auto& k : counters.kernels) {
    json::object kernel;
    kernel["name"] = k.name;
    json::array values;
    for (double v : k.values)
      values.push_back(std::isfinite(v) ? json::value(v) : json::value(nullptr));
    kernel["values"] = std::move(values);
    if (k.launch) {
      const LaunchShape& l = *k.launch;
      kernel["launch"] = json::object{{"grid", triple(l.grid)},
                                      {"block", triple(l.block)},
                                      {"registers_per_thread", l.registers_per_thread},
                                      {"static_shared_bytes", l.static_shared_bytes},
                                      {"dynamic_shared_bytes", l.dynamic_shared_bytes},
                                      {"shared_carveout_bytes", l.shared_carveout_bytes}};
    }
    if (k.unreplayed)
      kernel["unreplayed"] = json::object{{"duration_ns", k.unreplayed->duration_ns},
                                          {"dram_read_bytes", k.unreplayed->dram_read_bytes},
                                          {"dram_write_bytes", k.unreplayed->dram_write_bytes}};
    kernels.push_back(std::move(kernel));
  }
  o["kernels"] = std::move(kernels);
  o["passes"] = counters.passes;
  o["not_counted"] = counters.not_counted;
  o["traffic"] = counters.traffic;
  if (!counters.trace_durations.empty())
    o["trace_durations"] = counters.trace_durations;
  if (counters.limits) {
    const SmLimits& l = *counters.limits;
    o["sm_limits"] = json::object{{"sm_count", l.sm_count},
                                  {"max_warps", l.max_warps},
                                  {"max_blocks", l.max_blocks},
                                  {"registers", l.registers},
                                  {"shared_bytes", l.shared_bytes},
                                  {"reserved_shared_per_block", l.reserved_shared_per_block}};
  }
  return o;
}

DeviceCounters device_counters_from_json(const json::object& o) {
  const std::string where = "counters";
  DeviceCounters c;
  c.chip = text_of(o, "chip", where, 64);
  const json::array* metrics = field(o, "metrics", where).if_array();
  if (metrics == nullptr || metrics->size() > kMaxCounterMetrics)
    throw std::invalid_argument(where + ".metrics must be an array of at most " +
                                std::to_string(kMaxCounterMetrics) + " names");
  for (const auto& m : *metrics) {
    if (!m.is_string())
      throw std::invalid_argument(where + ".metrics holds something other than a name");
    c.metrics.push_back(clean_work_name(std::string_view(m.get_string()).substr(0, 128)));
  }
  const json::array* unsupported = field(o, "unsupported", where).if_array();
  if (unsupported == nullptr || unsupported->size() > kMaxCounterMetrics)
    throw std::invalid_argument(where + ".unsupported must be an array of at most " +
                                std::to_string(kMaxCounterMetrics) + " entries");
  for (size_t i = 0; i < unsupported->size(); ++i) {
    const std::string at = where + ".unsupported[" + std::to_string(i) + "]";
    const json::object* u = (*unsupported)[i].if_object();
    if (u == nullptr)
      throw std::invalid_argument(at + " must be an object");
    c.unsupported.emplace_back(text_of(*u, "metric", at, 128), text_of(*u, "reason", at, 256));
  }
  const json::array* kernels = field(o, "kernels", where).if_array();
  if (kernels == nullptr || kernels->size() > kMaxCountedKernels)
    throw std::invalid_argument(where + ".kernels must be an array of at most " +
                                std::to_string(kMaxCountedKernels) + " kernels");
  for (size_t i = 0; i < kernels->size(); ++i) {
    const std::string at = where + ".kernels[" + std::to_string(i) + "]";
    const json::object* k = (*kernels)[i].if_object();
    if (k == nullptr)
      throw std::invalid_argument(at + " must be an object");
    CountedKernel kernel;
    kernel.name = text_of(*k, "name", at, kMaxWorkNameBytes);
    const json::array* values = field(*k, "values", at).if_array();
    if (values == nullptr || values->size() != c.metrics.size())
      throw std::invalid_argument(at + ".values must hold one value per metric");
    for (const auto& v : *values) {
      if (v.is_null()) {
        kernel.values.push_back(std::numeric_limits<double>::quiet_NaN());
        continue;
      }
      if (!v.is_number() || !std::isfinite(v.to_number<double>()))
        throw std::invalid_argument(at + ".values holds something other than a finite number");
      kernel.values.push_back(v.to_number<double>());
    }
    if (const json::value* launch = k->if_contains("launch")) {
      const std::string lat = at + ".launch";
      const json::object* l = launch->if_object();
      if (l == nullptr)
        throw std::invalid_argument(lat + " must be an object");
      LaunchShape shape;
      read_triple(*l, "grid", lat, shape.grid);
      read_triple(*l, "block", lat, shape.block);
      shape.registers_per_thread = count_of(*l, "registers_per_thread", lat);
      shape.static_shared_bytes = count_of(*l, "static_shared_bytes", lat);
      shape.dynamic_shared_bytes = count_of(*l, "dynamic_shared_bytes", lat);
      shape.shared_carveout_bytes = count_of(*l, "shared_carveout_bytes", lat);
      kernel.launch = shape;
    }
    if (const json::value* unreplayed = k->if_contains("unreplayed")) {
      const std::string uat = at + ".unreplayed";
      const json::object* u = unreplayed->if_object();
      if (u == nullptr)
        throw std::invalid_argument(uat + " must be an object");
      kernel.unreplayed =
          UnreplayedRun{measure_of(*u, "duration_ns", uat), measure_of(*u, "dram_read_bytes", uat),
                        measure_of(*u, "dram_write_bytes", uat)};
    }
    c.kernels.push_back(std::move(kernel));
  }
  c.passes = count_of(o, "passes", where);
  c.not_counted = count_of(o, "not_counted", where);
  if (o.contains("traffic"))
    c.traffic = text_of(o, "traffic", where, 512);
  if (o.contains("trace_durations"))
    c.trace_durations = text_of(o, "trace_durations", where, 512);
  if (const json::value* limits = o.if_contains("sm_limits")) {
    const std::string lat = where + ".sm_limits";
    const json::object* l = limits->if_object();
    if (l == nullptr)
      throw std::invalid_argument(lat + " must be an object");
    SmLimits s;
    s.sm_count = count_of(*l, "sm_count", lat);
    s.max_warps = count_of(*l, "max_warps", lat);
    s.max_blocks = count_of(*l, "max_blocks", lat);
    s.registers = count_of(*l, "registers", lat);
    s.shared_bytes = count_of(*l, "shared_bytes", lat);
    s.reserved_shared_per_block = count_of(*l, "reserved_shared_per_block", lat);
    c.limits = s;
  }
  return c;
}

} // namespace keval::worker
