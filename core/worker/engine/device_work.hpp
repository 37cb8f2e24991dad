// What a timed sample did on the device, from a trace of the process that ran it (CUPTI's
// activity records on a CUDA device): every kernel, copy and memset, on any stream, from any
// thread. The runner summarises each sample's records (summarize_sample); the trusted worker
// bounds what it is sent, merges the summaries into the side's inventory and decides what they
// mean (kernel time, work outside the timed window, library_only).
//
// A sample is bracketed on keval's stream by two kernels of keval's own: keval_sample_start,
// enqueued right before the start event (after the L2 flush), and keval_sample_stop, enqueued
// right after the stop event. Work that ran between the end of the first and the start of the
// second is the sample's; work of the
// process outside that window (a private stream still running after the stop, a thread that
// launched after the kernel returned, leftovers seen before the flush) is counted apart, because
// the events did not time it. A trace that lacks either marker, or holds one twice, was disabled
// or fed by something in the process: TraceLost.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

namespace keval::worker {

// How a kernel was launched, as the trace recorded it: what its theoretical occupancy follows from.
struct LaunchShape {
  int64_t grid[3] = {1, 1, 1};
  int64_t block[3] = {1, 1, 1};
  int64_t registers_per_thread = 0;
  int64_t static_shared_bytes = 0;
  int64_t dynamic_shared_bytes = 0;
  int64_t shared_carveout_bytes = 0; // the shared memory the driver configured the SM with
};

// One piece of device work as the trace recorded it; times in nanoseconds of the device's clock.
struct TracedWork {
  enum class Kind { kernel, memcpy, memset };
  Kind kind = Kind::kernel;
  std::string name; // kernels: the demangled name; copies: the direction ("DtoD", ...); "memset"
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t stream = 0; // the trace's stream id
  LaunchShape launch;  // kernels only
};

std::string_view kind_name(TracedWork::Kind kind);

// A sample's trace cannot be trusted (see above); the message says what was missing.
class TraceLost : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// Names longer than this are cut (a kernel's demangled name can run to kilobytes of templates).
inline constexpr size_t kMaxWorkNameBytes = 256;
// A name from the process that ran the kernel, made safe to report: cut to kMaxWorkNameBytes,
// anything but printable ASCII replaced by '?'.
std::string clean_work_name(std::string_view name);

// Distinct (kind, name) entries kept per sample and per inventory; the rest are summed into one
// entry named "(other)".
inline constexpr size_t kMaxWorkEntries = 32;

struct SampleActivity {
  // The same (kind, name) merged: how many ran, for how long in all, on which streams, and how
  // many of them ran (partly) outside the sample's window.
  struct Work {
    std::string kind; // "kernel", "memcpy", "memset"
    std::string name;
    int64_t count = 0;
    double total_ms = 0;
    std::vector<uint32_t> streams; // sorted, at most 8
    int64_t outside = 0;
  };
  double busy_ms = 0;     // the union of the intervals the process's work ran inside the window
  double outside_ms = 0;  // the union of the intervals it ran outside it
  std::vector<Work> work; // longest total first
};

// Summarises what a trace delivered since the previous sample's summary: `records` hold the two
// markers named `start_kernel` and `stop_kernel` and everything else the process did. Copies and
// keval_* kernels (keval_gather, the L2 flush) on the markers' stream that ended before the start
// marker are keval's own (the previous sample's outputs handed back, the flush) and left out.
// Throws TraceLost without exactly one of each marker on one stream.
SampleActivity summarize_sample(const std::vector<TracedWork>& records,
                                std::string_view start_kernel, std::string_view stop_kernel);

// A trace read once for several samples (reading it costs the process's next device work about
// half a millisecond: CUPTI's flush): where each sample's read would have been, the trace's clock
// is marked instead once the sample's work has finished (a cut that keeps what came before it),
// and where work that is no sample's was dropped from the trace (a runner making inputs), a cut
// that drops it. Each record goes to the first cut after its start, as it would have arrived in
// that read; what the kept cuts got comes back, one list per kept cut in order, and what started
// after the last cut is appended to `after` (the next sample's, read with it).
struct TraceCut {
  uint64_t at_ns = 0; // rising from one cut to the next
  bool keep = true;
};
std::vector<std::vector<TracedWork>> split_at_cuts(std::vector<TracedWork> records,
                                                   const std::vector<TraceCut>& cuts,
                                                   std::vector<TracedWork>& after);

boost::json::object to_json(const SampleActivity& activity);
// Reads what a runner sent: the shapes and bounds above, every number finite and not negative.
// Throws std::invalid_argument naming the field at fault.
SampleActivity sample_activity_from_json(const boost::json::object& o);

// Everything a side's timed samples did on the device, merged (the trusted worker's view).
class DeviceWorkInventory {
public:
  void add(const SampleActivity& sample);
  bool empty() const { return entries_.empty(); }
  // Whether any kernel's name holds one of `identifiers` as a whole identifier ("add_kernel" in
  // "void add_kernel<float>(float const*, int)").
  bool has_kernel_named(const std::vector<std::string>& identifiers) const;
  // [{kind, name, count, total_ms, streams, outside}], longest total first.
  boost::json::array to_json() const;

private:
  std::map<std::pair<std::string, std::string>, SampleActivity::Work> entries_;
};

} // namespace keval::worker
