#include "worker/cuda/detail/activity_trace.hpp"
#include "worker/cuda/detail/cupti_library.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>

#if KEVAL_HAVE_CUPTI
#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>
#endif

namespace keval::worker::detail {

#if KEVAL_HAVE_CUPTI
namespace {

// Every CUPTI entry point the trace uses, with the types cupti.h declares.
#define KEVAL_CUPTI_FUNCTIONS(X)                                                                   \
  X(cuptiActivityRegisterCallbacks)                                                                \
  X(cuptiActivityEnable)                                                                           \
  X(cuptiActivityFlushAll)                                                                         \
  X(cuptiActivityGetNextRecord)                                                                    \
  X(cuptiActivityGetNumDroppedRecords)                                                             \
  X(cuptiGetTimestamp)                                                                             \
  X(cuptiGetResultString)

struct CuptiApi {
#define KEVAL_CUPTI_DECLARE(name) decltype(&::name) name = nullptr;
  KEVAL_CUPTI_FUNCTIONS(KEVAL_CUPTI_DECLARE)
#undef KEVAL_CUPTI_DECLARE
};

std::string result_text(const CuptiApi& api, CUptiResult result) {
  const char* text = nullptr;
  if (api.cuptiGetResultString != nullptr && api.cuptiGetResultString(result, &text) == 0 &&
      text != nullptr)
    return text;
  return "CUPTI error " + std::to_string(static_cast<int>(result));
}

// What the buffer callbacks fill and take() empties. CUPTI calls them from its own thread as
// well as from inside cuptiActivityFlushAll.
struct Collected {
  std::mutex mutex;
  std::vector<TracedWork> records;
  size_t dropped = 0;
  bool overflowed = false;
  // A buffer handed over with a record that was not complete (or not valid), or a part-filled
  // buffer handed over while keval was not flushing: a flush that something else in the process
  // forced. Forced while device work still runs, a flush loses that work's records without a
  // word (CUPTI counts them in no dropped total), so the samples it covers cannot be vouched for.
  // CUPTI hands over part-filled buffers on its own only when asked to (a flush, or a flush
  // period, which keval never sets).
  bool foreign_flush = false;
  std::unordered_map<std::string, std::string> demangled; // raw name -> demangled
};

CuptiApi g_api;
Collected g_collected;
// Set while take() flushes: the buffers handed over meanwhile are keval's to ask for.
std::atomic<bool> g_flushing{false};

constexpr size_t kBufferBytes = 4u << 20;
// A buffer CUPTI handed over because it was full has less room left than its largest record
// takes (a kernel's, under a kilobyte); one with more room left was flushed out.
constexpr size_t kFullBufferSlack = 4096;

// Buffers CUPTI filled and buffer_completed read, kept for its next request. take() forces a
// flush after every sample, which hands back the buffer in use, so each sample's first device
// work would otherwise wait for a fresh 4 MiB allocation to be made and written.
struct SpareBuffers {
  std::mutex mutex;
  std::vector<uint8_t*> buffers;
};
SpareBuffers g_spare;
constexpr size_t kMaxSpareBuffers = 4;
constexpr size_t kMaxDemangledNames = 4096;

std::string demangle(Collected& c, const char* raw) {
  if (raw == nullptr)
    return "?";
  if (auto it = c.demangled.find(raw); it != c.demangled.end())
    return it->second;
  int status = 0;
  char* text = abi::__cxa_demangle(raw, nullptr, nullptr, &status);
  std::string name = status == 0 && text != nullptr ? text : raw;
  std::free(text);
  if (name.size() > kMaxWorkNameBytes)
    name.resize(kMaxWorkNameBytes);
  if (c.demangled.size() < kMaxDemangledNames)
    c.demangled.emplace(raw, name);
  return name;
}

const char* copy_direction(uint8_t kind) {
  switch (kind) {
  case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    return "HtoD";
  case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    return "DtoH";
  case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    return "DtoD";
  case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
    return "HtoH";
  case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
    return "PtoP";
  default:
    return "array";
  }
}

void keep(Collected& c, TracedWork work) {
  if (c.records.size() >= ActivityTrace::kMaxRecords) {
    c.overflowed = true;
    return;
  }
  c.records.push_back(std::move(work));
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  // CUPTI wants 8-byte alignment; a failed allocation hands it no buffer, and it counts what it
  // then drops (take() reports that).
  uint8_t* spare = nullptr;
  {
    std::lock_guard lock(g_spare.mutex);
    if (!g_spare.buffers.empty()) {
      spare = g_spare.buffers.back();
      g_spare.buffers.pop_back();
    }
  }
  *buffer = spare != nullptr ? spare : static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t size,
                               size_t valid) {
  Collected& c = g_collected;
  std::lock_guard lock(c.mutex);
  CUpti_Activity* record = nullptr;
  CUptiResult next = CUPTI_SUCCESS;
  while ((next = g_api.cuptiActivityGetNextRecord(buffer, valid, &record)) == CUPTI_SUCCESS) {
    switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      LaunchShape launch;
      launch.grid[0] = k->gridX, launch.grid[1] = k->gridY, launch.grid[2] = k->gridZ;
      launch.block[0] = k->blockX, launch.block[1] = k->blockY, launch.block[2] = k->blockZ;
      launch.registers_per_thread = k->registersPerThread;
      launch.static_shared_bytes = k->staticSharedMemory;
      launch.dynamic_shared_bytes = k->dynamicSharedMemory;
      launch.shared_carveout_bytes = k->sharedMemoryExecuted;
      keep(c,
           {TracedWork::Kind::kernel, demangle(c, k->name), k->start, k->end, k->streamId, launch});
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      keep(c,
           {TracedWork::Kind::memcpy, copy_direction(m->copyKind), m->start, m->end, m->streamId});
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      keep(c, {TracedWork::Kind::memset, "memset", m->start, m->end, m->streamId});
      break;
    }
    default:
      break;
    }
  }
  if (valid > 0 && next != CUPTI_ERROR_MAX_LIMIT_REACHED) // not the end of the buffer's records
    c.foreign_flush = true;
  if (!g_flushing.load() && valid + kFullBufferSlack < size)
    c.foreign_flush = true;
  size_t dropped = 0;
  if (g_api.cuptiActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS)
    c.dropped += dropped;
  std::lock_guard spare_lock(g_spare.mutex);
  if (g_spare.buffers.size() < kMaxSpareBuffers)
    g_spare.buffers.push_back(buffer);
  else
    std::free(buffer);
}

// Loads CUPTI and hands it its buffer callbacks, recording nothing yet; the reason when it cannot
// (empty when it did).
std::string load() {
  std::string why;
  void* handle = open_cupti_library(why);
  if (handle == nullptr)
    return why;
#define KEVAL_CUPTI_RESOLVE(name)                                                                  \
  g_api.name = reinterpret_cast<decltype(g_api.name)>(::dlsym(handle, #name));                     \
  if (g_api.name == nullptr)                                                                       \
    return "CUPTI (" + cupti_soname() + ") lacks " #name;
  KEVAL_CUPTI_FUNCTIONS(KEVAL_CUPTI_RESOLVE)
#undef KEVAL_CUPTI_RESOLVE
  if (const CUptiResult r =
          g_api.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
      r != CUPTI_SUCCESS)
    return "CUPTI refused activity buffers: " + result_text(g_api, r);
  return {};
}

// Turns tracing on (load() done); the reason when it cannot (empty when it did).
std::string enable() {
  for (const auto kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                          CUPTI_ACTIVITY_KIND_MEMSET})
    if (const CUptiResult r = g_api.cuptiActivityEnable(kind); r != CUPTI_SUCCESS)
      return "CUPTI refused to trace device activity (kind " + std::to_string(kind) +
             "): " + result_text(g_api, r) +
             (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                  ? " (another profiler holds CUPTI in this process)"
                  : "");
  return {};
}

} // namespace

#else
namespace {

std::string load() {
  return "keval was built without CUPTI's headers (cupti.h): device work is not traced";
}

std::string enable() {
  return {};
}

} // namespace
#endif

namespace {
std::atomic<ActivityTrace*> g_started{nullptr};

// load()'s reason, once: a runner may start it ahead of its job on a thread of its own
// (load_ahead), and start() waits for that.
const std::string& loaded() {
  static const std::string why = load();
  return why;
}
} // namespace

void ActivityTrace::load_ahead() {
  loaded();
}

ActivityTrace& ActivityTrace::start() {
  static const std::string why = loaded().empty() ? enable() : loaded();
  static ActivityTrace trace;
  if (!why.empty())
    throw TraceUnavailable(why);
  g_started.store(&trace);
  return trace;
}

ActivityTrace* ActivityTrace::if_started() {
  return g_started.load();
}

void ActivityTrace::cut(bool keep) {
#if KEVAL_HAVE_CUPTI
  uint64_t ns = 0;
  if (const CUptiResult r = g_api.cuptiGetTimestamp(&ns); r != CUPTI_SUCCESS)
    throw TraceLost("CUPTI could not read its clock: " + result_text(g_api, r));
  cuts_.push_back({std::max(ns, cuts_.empty() ? 0 : cuts_.back().at_ns), keep});
#else
  (void)keep; // start() never succeeds without CUPTI
#endif
}

size_t ActivityTrace::samples_cut() const {
  return static_cast<size_t>(
      std::count_if(cuts_.begin(), cuts_.end(), [](const TraceCut& c) { return c.keep; }));
}

std::vector<std::vector<TracedWork>> ActivityTrace::take_samples() {
  std::vector<TraceCut> cuts = std::exchange(cuts_, {});
  std::vector<TracedWork> records = std::exchange(after_, {});
  std::vector<TracedWork> taken = take();
  records.insert(records.end(), std::make_move_iterator(taken.begin()),
                 std::make_move_iterator(taken.end()));
  return split_at_cuts(std::move(records), cuts, after_);
}

std::vector<TracedWork> ActivityTrace::take() {
  cuts_.clear();
  after_.clear();
#if KEVAL_HAVE_CUPTI
  g_flushing.store(true);
  g_api.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  g_flushing.store(false);
  Collected& c = g_collected;
  std::lock_guard lock(c.mutex);
  std::vector<TracedWork> out;
  out.swap(c.records);
  const size_t dropped = std::exchange(c.dropped, 0);
  const bool overflowed = std::exchange(c.overflowed, false);
  const bool foreign_flush = std::exchange(c.foreign_flush, false);
  if (dropped > 0)
    throw TraceLost("CUPTI dropped " + std::to_string(dropped) +
                    " device activity records in the process that ran the kernel");
  if (overflowed)
    throw TraceLost("more than " + std::to_string(kMaxRecords) +
                    " device operations in one sample: too many to trace");
  if (foreign_flush)
    throw TraceLost("something in the process that ran the kernel forced CUPTI's activity "
                    "buffers out (a flush keval did not ask for), which loses the records of "
                    "device work still running");
  return out;
#else
  return {};  // start() never succeeds without CUPTI
#endif
}

} // namespace keval::worker::detail
