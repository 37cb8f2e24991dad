#include "worker/engine/device_work.hpp"

#include "checks/kernel_names.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <boost/json/value.hpp>

namespace keval::worker {

namespace json = boost::json;

std::string clean_work_name(std::string_view name) {
  std::string out(name.substr(0, kMaxWorkNameBytes));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e)
      c = '?';
  return out;
}

std::string_view kind_name(TracedWork::Kind kind) {
  switch (kind) {
  case TracedWork::Kind::kernel:
    return "kernel";
  case TracedWork::Kind::memcpy:
    return "memcpy";
  case TracedWork::Kind::memset:
    return "memset";
  }
  return "kernel";
}

namespace {

constexpr size_t kMaxStreams = 8;
constexpr const char* kOther = "(other)";

using Interval = std::pair<uint64_t, uint64_t>;

// The length covered by a set of intervals, overlaps counted once.
uint64_t union_length(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end());
  uint64_t total = 0, reach = 0;
  for (const auto& [start, end] : intervals) {
    const uint64_t from = std::max(start, reach);
    if (end > from)
      total += end - from;
    reach = std::max(reach, end);
  }
  return total;
}

// Names come from the traced process, which runs user code: printable ASCII only (anything
// else becomes '?') and at most kMaxWorkNameBytes, so they are safe in any JSON or log.

void merge_streams(std::vector<uint32_t>& into, const std::vector<uint32_t>& from) {
  for (uint32_t s : from)
    if (into.size() < kMaxStreams && std::find(into.begin(), into.end(), s) == into.end())
      into.push_back(s);
  std::sort(into.begin(), into.end());
}

void merge_work(SampleActivity::Work& into, const SampleActivity::Work& from) {
  into.count += from.count;
  into.total_ms += from.total_ms;
  into.outside += from.outside;
  merge_streams(into.streams, from.streams);
}

// Longest total first; past kMaxWorkEntries - 1 entries, the rest summed into "(other)".
std::vector<SampleActivity::Work> ranked(std::vector<SampleActivity::Work> work) {
  std::sort(work.begin(), work.end(), [](const auto& a, const auto& b) {
    return a.total_ms != b.total_ms ? a.total_ms > b.total_ms : a.name < b.name;
  });
  if (work.size() <= kMaxWorkEntries)
    return work;
  SampleActivity::Work other{"kernel", kOther, 0, 0, {}, 0};
  for (size_t k = kMaxWorkEntries - 1; k < work.size(); ++k)
    merge_work(other, work[k]);
  work.resize(kMaxWorkEntries - 1);
  work.push_back(std::move(other));
  return work;
}

const TracedWork& the_marker(const std::vector<TracedWork>& records, std::string_view name) {
  const TracedWork* found = nullptr;
  size_t count = 0;
  for (const auto& r : records)
    if (r.kind == TracedWork::Kind::kernel && r.name == name) {
      found = &r;
      ++count;
    }
  if (count != 1)
    throw TraceLost("the device trace holds " + std::to_string(count) + " of keval's " +
                    std::string(name) +
                    " marker for this sample instead of one: tracing was disabled, fed or "
                    "dropped records in the process that ran the kernel");
  return *found;
}

double ns_to_ms(uint64_t ns) {
  return static_cast<double>(ns) / 1e6;
}

const json::value& field(const json::object& o, const char* name, const std::string& where) {
  const json::value* v = o.if_contains(name);
  if (v == nullptr)
    throw std::invalid_argument(where + "." + name + " is missing");
  return *v;
}

double millis(const json::object& o, const char* name, const std::string& where) {
  const json::value& v = field(o, name, where);
  const double d = v.is_double()  ? v.get_double()
                   : v.is_int64() ? static_cast<double>(v.get_int64())
                   : v.is_uint64()
                       ? static_cast<double>(v.get_uint64())
                       : throw std::invalid_argument(where + "." + name + " must be a number");
  if (!std::isfinite(d) || d < 0)
    throw std::invalid_argument(where + "." + name + " must be finite and not negative");
  return d;
}

int64_t count_of(const json::object& o, const char* name, const std::string& where) {
  const json::value& v = field(o, name, where);
  if (!v.is_int64() || v.get_int64() < 0)
    throw std::invalid_argument(where + "." + name + " must be a count");
  return v.get_int64();
}

} // namespace

SampleActivity summarize_sample(const std::vector<TracedWork>& records,
                                std::string_view start_kernel, std::string_view stop_kernel) {
  const TracedWork& flush = the_marker(records, start_kernel);
  const TracedWork& stop = the_marker(records, stop_kernel);
  if (flush.stream != stop.stream || flush.end_ns > stop.start_ns)
    throw TraceLost("keval's sample markers are out of order or on different streams in the "
                    "device trace: it was fed by something in the process that ran the kernel");
  const uint64_t begin = flush.end_ns, end = stop.start_ns;
  std::vector<Interval> inside, outside;
  std::map<std::pair<std::string, std::string>, SampleActivity::Work> merged;
  for (const auto& r : records) {
    if (&r == &flush || &r == &stop)
      continue;
    const uint64_t start = r.start_ns, finish = std::max(r.start_ns, r.end_ns);
    // keval's copies of the previous sample's outputs and its L2 flush: on its stream, before
    // the start marker.
    const bool keval_copy = r.kind == TracedWork::Kind::memcpy ||
                            (r.kind == TracedWork::Kind::kernel && r.name.rfind("keval_", 0) == 0);
    if (keval_copy && r.stream == flush.stream && finish <= begin)
      continue;
    const bool point_inside = start == finish && start >= begin && start <= end;
    bool ran_outside = false;
    if (std::max(start, begin) < std::min(finish, end))
      inside.emplace_back(std::max(start, begin), std::min(finish, end));
    if (start < begin && !point_inside) {
      outside.emplace_back(start, std::min(finish, begin));
      ran_outside = true;
    }
    if (finish > end && !point_inside) {
      outside.emplace_back(std::max(start, end), finish);
      ran_outside = true;
    }
    std::pair<std::string, std::string> key{kind_name(r.kind), clean_work_name(r.name)};
    auto& w = merged[key];
    if (w.count == 0) {
      w.kind = std::move(key.first);
      w.name = std::move(key.second);
    }
    w.count += 1;
    w.total_ms += ns_to_ms(finish - start);
    w.outside += ran_outside ? 1 : 0;
    merge_streams(w.streams, {r.stream});
  }
  SampleActivity activity;
  activity.busy_ms = ns_to_ms(union_length(std::move(inside)));
  activity.outside_ms = ns_to_ms(union_length(std::move(outside)));
  std::vector<SampleActivity::Work> work;
  for (auto& [key, w] : merged)
    work.push_back(std::move(w));
  activity.work = ranked(std::move(work));
  return activity;
}

std::vector<std::vector<TracedWork>> split_at_cuts(std::vector<TracedWork> records,
                                                   const std::vector<TraceCut>& cuts,
                                                   std::vector<TracedWork>& after) {
  std::vector<std::vector<TracedWork>> between(cuts.size());
  for (auto& r : records) {
    const auto cut = std::upper_bound(cuts.begin(), cuts.end(), r.start_ns,
                                      [](uint64_t at, const TraceCut& c) { return at < c.at_ns; });
    if (cut == cuts.end())
      after.push_back(std::move(r));
    else
      between[static_cast<size_t>(cut - cuts.begin())].push_back(std::move(r));
  }
  std::vector<std::vector<TracedWork>> kept;
  for (size_t k = 0; k < cuts.size(); ++k)
    if (cuts[k].keep)
      kept.push_back(std::move(between[k]));
  return kept;
}

json::object to_json(const SampleActivity& activity) {
  json::array work;
  for (const auto& w : activity.work) {
    json::array streams;
    for (uint32_t s : w.streams)
      streams.emplace_back(static_cast<int64_t>(s));
    work.push_back(json::object{{"kind", w.kind},
                                {"name", w.name},
                                {"count", w.count},
                                {"total_ms", w.total_ms},
                                {"streams", std::move(streams)},
                                {"outside", w.outside}});
  }
  return json::object{{"busy_ms", activity.busy_ms},
                      {"outside_ms", activity.outside_ms},
                      {"work", std::move(work)}};
}

SampleActivity sample_activity_from_json(const json::object& o) {
  SampleActivity activity;
  activity.busy_ms = millis(o, "busy_ms", "activity");
  activity.outside_ms = millis(o, "outside_ms", "activity");
  const json::array* work = field(o, "work", "activity").if_array();
  if (work == nullptr || work->size() > kMaxWorkEntries)
    throw std::invalid_argument("activity.work must be an array of at most " +
                                std::to_string(kMaxWorkEntries) + " entries");
  for (size_t k = 0; k < work->size(); ++k) {
    const std::string where = "activity.work[" + std::to_string(k) + "]";
    const json::object* e = (*work)[k].if_object();
    if (e == nullptr)
      throw std::invalid_argument(where + " must be an object");
    SampleActivity::Work w;
    const json::string* kind = field(*e, "kind", where).if_string();
    if (kind == nullptr || (*kind != "kernel" && *kind != "memcpy" && *kind != "memset"))
      throw std::invalid_argument(where + ".kind must be kernel, memcpy or memset");
    w.kind = std::string(*kind);
    const json::string* name = field(*e, "name", where).if_string();
    if (name == nullptr)
      throw std::invalid_argument(where + ".name must be a string");
    w.name = clean_work_name(*name);
    w.count = count_of(*e, "count", where);
    w.total_ms = millis(*e, "total_ms", where);
    w.outside = count_of(*e, "outside", where);
    if (w.outside > w.count)
      throw std::invalid_argument(where + ".outside is more than its count");
    const json::array* streams = field(*e, "streams", where).if_array();
    if (streams == nullptr || streams->size() > kMaxStreams)
      throw std::invalid_argument(where + ".streams must be an array of at most " +
                                  std::to_string(kMaxStreams) + " stream ids");
    for (const auto& s : *streams) {
      if (!s.is_int64() || s.get_int64() < 0 || s.get_int64() > UINT32_MAX)
        throw std::invalid_argument(where + ".streams holds something other than a stream id");
      merge_streams(w.streams, {static_cast<uint32_t>(s.get_int64())});
    }
    activity.work.push_back(std::move(w));
  }
  return activity;
}

void DeviceWorkInventory::add(const SampleActivity& sample) {
  for (const auto& w : sample.work) {
    std::pair<std::string, std::string> key{w.kind, w.name};
    if (!entries_.count(key) && entries_.size() >= kMaxWorkEntries - 1)
      key.second = kOther;
    auto [it, inserted] =
        entries_.try_emplace(key, SampleActivity::Work{key.first, key.second, 0, 0, {}, 0});
    merge_work(it->second, w);
  }
}

bool DeviceWorkInventory::has_kernel_named(const std::vector<std::string>& identifiers) const {
  for (const auto& [key, w] : entries_)
    if (w.kind == "kernel")
      for (const auto& id : identifiers)
        if (checks::contains_identifier(w.name, id))
          return true;
  return false;
}

json::array DeviceWorkInventory::to_json() const {
  std::vector<SampleActivity::Work> work;
  for (const auto& [key, w] : entries_)
    work.push_back(w);
  SampleActivity all;
  all.work = ranked(std::move(work));
  return worker::to_json(all).at("work").as_array();
}

} // namespace keval::worker
