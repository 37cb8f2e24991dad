// CUPTI activity tracing of everything the calling process does on its devices: kernels (on any
// stream, from any thread, graph nodes included), copies and memsets, each with the device's start
// and end timestamps. Runners trace the samples they time with it (worker/engine/device_work.hpp
// says what is made of the records).
//
// CUPTI is loaded at run time (libcupti.so.13: one a library in the process already loaded, such
// as torch's, else the toolkit's), like the driver: nothing links it, and a machine without it
// reports why. Its activity API is process-wide, so there is one trace per process.
#pragma once

#include "worker/engine/device_work.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace keval::worker::detail {

// CUPTI could not be loaded or refused to trace (another profiler owns it, too old, ...).
class TraceUnavailable : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class ActivityTrace {
public:
  // Turns tracing on for this process the first time (later calls return the same trace).
  // Throws TraceUnavailable, then and on every later call, when it cannot.
  static ActivityTrace& start();
  // Loads CUPTI and gives it its buffers, tracing nothing yet: what start() would do first. A
  // runner does it before its job's grant (cuda_engine.hpp: load_device_trace_ahead), so that the
  // job's first timer does not pay for it with the GPU held. Thread-safe; start() waits for it.
  static void load_ahead();
  // The trace when start() has turned it on in this process, else null (never starts it).
  static ActivityTrace* if_started();

  // Every record completed since the last call, after asking CUPTI to deliver what it holds;
  // the cuts not yet read are forgotten. Call once the device work of interest has finished.
  // Throws TraceLost when CUPTI dropped records, something else in the process flushed its
  // buffers (which loses the records of work still running), or more arrived than one call may
  // hold (kMaxRecords).
  std::vector<TracedWork> take();

  // Cuts the trace here (device_work.hpp's TraceCut, on the trace's clock): `keep`, a sample's
  // end, whose records take_samples() returns; else what came since the cut before is dropped.
  // Call once the device work before it has finished. Throws TraceLost when CUPTI cannot read
  // its clock.
  void cut(bool keep);
  // How many kept cuts take_samples() has not read yet.
  size_t samples_cut() const;
  // Each kept cut's records since the cut before it, in order; what started after the last cut
  // is kept for the next read. Throws TraceLost as take() does.
  std::vector<std::vector<TracedWork>> take_samples();

  static constexpr size_t kMaxRecords = 1u << 20;

private:
  ActivityTrace() = default;
  std::vector<TraceCut> cuts_;
  std::vector<TracedWork> after_; // read, but after the last cut
};

} // namespace keval::worker::detail
