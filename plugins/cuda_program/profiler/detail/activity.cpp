#include "detail/activity.hpp"

#include "detail/counters.hpp"
#include "detail/state.hpp"

#include <cstdlib>
#include <string>

namespace keval::profiler {

namespace {

constexpr std::size_t kBufferSize = std::size_t{8} << 20;
constexpr std::size_t kBufferAlign = 8;

uint8_t copy_kind_of(uint8_t cupti_kind) {
  switch (cupti_kind) {
  case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
  case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
    return static_cast<uint8_t>(CopyKind::HtoD);
  case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
  case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
    return static_cast<uint8_t>(CopyKind::DtoH);
  case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
  case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
  case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
  case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
    return static_cast<uint8_t>(CopyKind::DtoD);
  case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
    return static_cast<uint8_t>(CopyKind::HtoH);
  case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
    return static_cast<uint8_t>(CopyKind::PtoP);
  default:
    return static_cast<uint8_t>(CopyKind::Other);
  }
}

// Timestamps of 0, or an end before the start, mean the work had not finished when the buffer
// was flushed (a forced flush at exit returns such records).
bool complete(uint64_t start, uint64_t end) {
  return start != 0 && end != 0 && end >= start;
}

class Intake {
public:
  explicit Intake(State& s) : s_(s), keep_(s.ranges_seen.load()), counters_(counters_requested()) {}

  void kernel(const CUpti_ActivityKernel10& k) {
    if (counters_)
      note_kernel_record(k);
    if (!complete(k.start, k.end)) {
      ++s_.incomplete_records;
      return;
    }
    const uint64_t ns = k.end - k.start;
    Totals& t = s_.kernels[k.name != nullptr ? k.name : "<unnamed>"];
    ++t.count;
    t.ns += ns;
    keep_device({ns, 0, k.correlationId, 0, kKernelRecord});
  }

  void copy(uint8_t cupti_kind, uint64_t bytes, uint64_t start, uint64_t end, uint32_t corr,
            uint32_t runtime_corr) {
    if (!complete(start, end)) {
      ++s_.incomplete_records;
      return;
    }
    const uint8_t kind = copy_kind_of(cupti_kind);
    Totals& t = s_.copies[kind];
    ++t.count;
    t.bytes += bytes;
    t.ns += end - start;
    keep_device({end - start, bytes, corr, runtime_corr, kind});
  }

  void api(const CUpti_ActivityAPI& a) {
    // A call that started before the first range cannot be inside one.
    if (!keep_ || a.start == 0 || a.start < s_.first_range_start.load())
      return;
    if (s_.api_records.size() >= s_.max_records) {
      ++s_.records_dropped;
      return;
    }
    s_.api_records.push_back({a.start, a.correlationId, a.threadId});
  }

private:
  // Kept only once a range exists: the launching call precedes the record's delivery, so a record
  // delivered before any range opened was launched outside every range.
  void keep_device(const DeviceRecord& r) {
    if (!keep_)
      return;
    if (s_.device_records.size() >= s_.max_records) {
      ++s_.records_dropped;
      return;
    }
    s_.device_records.push_back(r);
  }

  State& s_;
  bool keep_;
  bool counters_; // counter mode: counted launches want their shapes (detail/counters.hpp)
};

} // namespace

void CUPTIAPI buffer_requested(uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *max_records = 0; // as many as fit
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferSize));
  *size = *buffer != nullptr ? kBufferSize : 0; // CUPTI drops (and counts) records without one
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                               std::size_t /*size*/, std::size_t valid_size) {
  State& s = state();
  try {
    if (buffer != nullptr && valid_size > 0 && !s.finished.load()) {
      std::lock_guard<std::mutex> lock(s.activity_mu);
      Intake in(s);
      CUpti_Activity* record = nullptr;
      while (cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
        switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
          in.kernel(*reinterpret_cast<const CUpti_ActivityKernel10*>(record));
          break;
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto& m = *reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
          in.copy(m.copyKind, m.bytes, m.start, m.end, m.correlationId, m.runtimeCorrelationId);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY2: {
          const auto& m = *reinterpret_cast<const CUpti_ActivityMemcpyPtoP4*>(record);
          in.copy(CUPTI_ACTIVITY_MEMCPY_KIND_PTOP, m.bytes, m.start, m.end, m.correlationId, 0);
          break;
        }
        case CUPTI_ACTIVITY_KIND_RUNTIME:
        case CUPTI_ACTIVITY_KIND_DRIVER:
          in.api(*reinterpret_cast<const CUpti_ActivityAPI*>(record));
          break;
        default:
          break;
        }
      }
      std::size_t dropped = 0;
      if (cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) == CUPTI_SUCCESS)
        s.cupti_dropped += dropped;
    }
  } catch (...) {
    // Out of memory while aggregating: what was counted stays; never unwind into CUPTI.
  }
  std::free(buffer);
}

} // namespace keval::profiler
