#include "detail/report.hpp"

#include "detail/json_writer.hpp"
#include "detail/kernel_names.hpp"
#include "detail/state.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace keval::profiler {

namespace {

constexpr int kReportVersion = 1;

double ms(uint64_t ns) {
  return static_cast<double>(ns) / 1e6;
}

// GB/s (10^9 bytes per second), as ComputeEval computes it.
double gbps(uint64_t bytes, uint64_t ns) {
  return ns == 0 ? 0.0 : static_cast<double>(bytes) / static_cast<double>(ns);
}

struct RangeStats {
  uint64_t instances = 0;
  uint64_t wall_ns = 0;
  uint64_t kernel_ns = 0;
  uint64_t kernel_count = 0;
  Totals copy;
  std::array<Totals, kCopyKinds> copy_by_kind{};
};

struct Snapshot {
  std::unordered_map<std::string, Totals> kernels;
  std::array<Totals, kCopyKinds> copies{};
  std::vector<DeviceRecord> device;
  std::vector<ApiRecord> api;
  std::vector<RangeRecord> ranges;
  std::deque<std::string> names;
  uint64_t records_dropped = 0, cupti_dropped = 0, incomplete = 0, ranges_dropped = 0;
  std::vector<std::string> errors;
  uint64_t init_ts = 0;
  bool api_tracing = false;
  bool system_thread_ids = false;
};

Snapshot take(State& s) {
  Snapshot out;
  {
    std::lock_guard<std::mutex> lock(s.activity_mu);
    out.kernels = std::move(s.kernels);
    out.copies = s.copies;
    out.device = std::move(s.device_records);
    out.api = std::move(s.api_records);
    out.records_dropped = s.records_dropped;
    out.cupti_dropped = s.cupti_dropped;
    out.incomplete = s.incomplete_records;
  }
  {
    // Copied, not moved: other threads may still push and pop while the process exits.
    std::lock_guard<std::mutex> lock(s.nvtx_mu);
    out.ranges = s.ranges;
    out.names = s.names;
    out.ranges_dropped = s.ranges_dropped;
  }
  {
    std::lock_guard<std::mutex> lock(s.life_mu);
    out.init_ts = s.init_ts;
    out.api_tracing = s.api_tracing_enabled;
    out.system_thread_ids = s.system_thread_ids;
  }
  {
    std::lock_guard<std::mutex> lock(s.errors_mu);
    out.errors = s.errors;
  }
  return out;
}

struct Attribution {
  std::vector<RangeStats> by_name; // indexed by name id
  uint64_t unattributed = 0;       // kept records whose launching call was not traced
  uint64_t open_at_exit = 0;
};

// A kernel or copy belongs to a range when the API call that launched it started inside the
// range: on the same thread for push/pop ranges, on any thread for start/end ranges. Every
// enclosing range gets it (once per distinct name, so a name nested in itself counts it once).
Attribution attribute(Snapshot& snap, uint64_t exit_ts) {
  Attribution out;
  out.by_name.resize(snap.names.size());
  for (RangeRecord& r : snap.ranges) {
    if (r.end == 0) { // still open at exit: it ends there
      r.end = std::max(exit_ts, r.start);
      ++out.open_at_exit;
    }
    RangeStats& st = out.by_name[r.name_id];
    ++st.instances;
    st.wall_ns += r.end - r.start;
  }
  if (snap.ranges.empty())
    return out;

  // The launching call of each record: by correlation id, earliest start when several share it.
  std::sort(snap.api.begin(), snap.api.end(), [](const ApiRecord& a, const ApiRecord& b) {
    return a.correlation_id != b.correlation_id ? a.correlation_id < b.correlation_id
                                                : a.start < b.start;
  });
  auto find_api = [&](uint32_t corr) -> const ApiRecord* {
    if (corr == 0)
      return nullptr;
    auto it = std::lower_bound(snap.api.begin(), snap.api.end(), corr,
                               [](const ApiRecord& a, uint32_t c) { return a.correlation_id < c; });
    return it != snap.api.end() && it->correlation_id == corr ? &*it : nullptr;
  };

  struct Event {
    uint64_t t;
    uint32_t thread_id;
    uint32_t record;
  };
  std::vector<Event> events;
  events.reserve(snap.device.size());
  for (std::size_t i = 0; i < snap.device.size(); ++i) {
    const DeviceRecord& d = snap.device[i];
    // A runtime copy's outer call (the one the program made) starts first: prefer it.
    const ApiRecord* api = find_api(d.runtime_correlation_id);
    if (api == nullptr)
      api = find_api(d.correlation_id);
    if (api == nullptr) {
      ++out.unattributed;
      continue;
    }
    events.push_back({api->start, api->thread_id, static_cast<uint32_t>(i)});
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.t < b.t; });
  std::vector<uint32_t> order(snap.ranges.size());
  for (uint32_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return snap.ranges[a].start < snap.ranges[b].start; });

  // Sweep in time order: ranges join their thread's (or the process-wide) active list when they
  // start and leave it once ended.
  std::unordered_map<uint32_t, std::vector<uint32_t>> active_by_thread;
  std::vector<uint32_t> active_process_wide;
  std::vector<uint32_t> names;
  std::size_t next = 0;
  auto collect = [&](std::vector<uint32_t>& active, uint64_t t) {
    for (std::size_t k = 0; k < active.size();) {
      const RangeRecord& r = snap.ranges[active[k]];
      if (r.end <= t) {
        active[k] = active.back();
        active.pop_back();
        continue;
      }
      if (std::find(names.begin(), names.end(), r.name_id) == names.end())
        names.push_back(r.name_id);
      ++k;
    }
  };
  for (const Event& e : events) {
    while (next < order.size() && snap.ranges[order[next]].start <= e.t) {
      const RangeRecord& r = snap.ranges[order[next]];
      const bool by_time = r.thread_id == kProcessWide || !snap.system_thread_ids;
      (by_time ? active_process_wide : active_by_thread[r.thread_id]).push_back(order[next]);
      ++next;
    }
    names.clear();
    auto mine = active_by_thread.find(e.thread_id);
    if (mine != active_by_thread.end())
      collect(mine->second, e.t);
    collect(active_process_wide, e.t);
    const DeviceRecord& d = snap.device[e.record];
    for (uint32_t name : names) {
      RangeStats& st = out.by_name[name];
      if (d.kind == kKernelRecord) {
        ++st.kernel_count;
        st.kernel_ns += d.duration_ns;
      } else {
        for (Totals* t : {&st.copy, &st.copy_by_kind[d.kind]}) {
          ++t->count;
          t->bytes += d.bytes;
          t->ns += d.duration_ns;
        }
      }
    }
  }
  return out;
}

} // namespace

std::string build_report(State& s, uint64_t exit_ts) {
  Snapshot snap = take(s);
  const Attribution attr = attribute(snap, exit_ts);

  // Ranges by name (sorted, for a stable file).
  std::map<std::string, const RangeStats*> ranges;
  for (std::size_t id = 0; id < attr.by_name.size(); ++id)
    if (attr.by_name[id].instances > 0)
      ranges.emplace(snap.names[id], &attr.by_name[id]);

  // Kernels by display name: overloads that demangle to one name are one entry.
  std::map<std::string, Totals> kernels;
  for (const auto& [mangled, totals] : snap.kernels) {
    Totals& t = kernels[kernel_display_name(mangled)];
    t.count += totals.count;
    t.ns += totals.ns;
  }

  JsonWriter w;
  w.begin_object();

  uint64_t kernel_ns = 0, invocations = 0;
  w.key("kernels");
  w.begin_array();
  for (const auto& [name, t] : kernels) {
    kernel_ns += t.ns;
    invocations += t.count;
    w.begin_object();
    w.key("name");
    w.string(name);
    w.field("invocations", t.count);
    w.field("total_duration_ms", ms(t.ns), 6);
    w.field("avg_duration_ms", t.count == 0 ? 0.0 : ms(t.ns) / static_cast<double>(t.count), 6);
    w.end_object();
  }
  w.end_array();

  uint64_t transfers = 0;
  w.key("memory_transfers");
  w.begin_object();
  for (std::size_t kind = 0; kind < kCopyKinds; ++kind) {
    const Totals& t = snap.copies[kind];
    if (t.count == 0)
      continue;
    transfers += t.count;
    w.key(copy_kind_name(kind));
    w.begin_object();
    w.field("count", t.count);
    w.field("total_bytes", t.bytes);
    w.field("total_time_ms", ms(t.ns), 6);
    w.field("bandwidth_gbps", gbps(t.bytes, t.ns), 3);
    w.key("nvtx");
    w.begin_object();
    for (const auto& [name, st] : ranges) {
      const Totals& in = st->copy_by_kind[kind];
      if (in.count == 0)
        continue;
      w.key(name);
      w.begin_object();
      w.field("bytes", in.bytes);
      w.field("time_ms", ms(in.ns), 6);
      w.field("bandwidth_gbps", gbps(in.bytes, in.ns), 3);
      w.end_object();
    }
    w.end_object();
    w.end_object();
  }
  w.end_object();

  w.key("nvtx_ranges");
  w.begin_object();
  for (const auto& [name, st] : ranges) {
    w.key(name);
    w.begin_object();
    w.field("wall_clock_time_ms", ms(st->wall_ns), 6);
    w.field("kernel_time_ms", ms(st->kernel_ns), 6);
    w.field("kernel_invocations", st->kernel_count);
    w.field("memcpy_time_ms", ms(st->copy.ns), 6);
    w.field("memcpy_count", st->copy.count);
    w.field("memcpy_bytes", st->copy.bytes);
    w.field("instances", st->instances);
    w.end_object();
  }
  w.end_object();

  w.key("summary");
  w.begin_object();
  w.field("total_kernel_time_ms", ms(kernel_ns), 6);
  w.field("total_kernels", static_cast<uint64_t>(kernels.size()));
  w.field("total_kernel_invocations", invocations);
  w.field("total_memory_transfers", transfers);
  w.field("application_duration_ms", ms(exit_ts > snap.init_ts ? exit_ts - snap.init_ts : 0), 6);
  w.end_object();

  w.key("errors");
  w.begin_array();
  for (const std::string& e : snap.errors)
    w.string(e);
  w.end_array();
  w.field("records_dropped", snap.records_dropped + snap.ranges_dropped + snap.cupti_dropped);

  w.key("profiler");
  w.begin_object();
  w.key("tool");
  w.string("keval_program_profiler");
  w.field("version", static_cast<uint64_t>(kReportVersion));
  w.key("api_tracing");
  w.boolean(snap.api_tracing);
  w.key("per_thread_ranges"); // false: push/pop ranges were matched by time only
  w.boolean(snap.system_thread_ids);
  w.field("cupti_dropped_records", snap.cupti_dropped);
  w.field("kept_records_dropped", snap.records_dropped);
  w.field("ranges_dropped", snap.ranges_dropped);
  w.field("incomplete_records", snap.incomplete);
  w.field("unattributed_records", attr.unattributed);
  w.field("ranges_open_at_exit", attr.open_at_exit);
  w.end_object();

  w.end_object();
  return w.take();
}

bool write_atomically(const std::string& path, const std::string& text, std::string* why) {
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = "cannot create " + temp + ": " + std::strerror(errno);
    return false;
  }
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      *why = "cannot write " + temp + ": " + std::strerror(errno);
      ::close(fd);
      ::unlink(temp.c_str());
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0 || ::rename(temp.c_str(), path.c_str()) != 0) {
    *why = "cannot write " + path + ": " + std::strerror(errno);
    ::unlink(temp.c_str());
    return false;
  }
  return true;
}

} // namespace keval::profiler
