// The profiler's process-wide state: what the CUPTI buffer callbacks aggregate, the NVTX ranges
// the injected NVTX handlers record, and the lifecycle flags. One leaked instance: CUPTI may
// deliver buffers and the program may call NVTX from other threads while exit handlers and static
// destructors run, so the state must never be destroyed.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <sys/types.h>

namespace keval::profiler {

// The memory_transfers keys, as ComputeEval names them. Array copies count as device memory.
enum class CopyKind : uint8_t { HtoD, DtoH, DtoD, HtoH, PtoP, Other };
constexpr std::size_t kCopyKinds = 6;
constexpr uint8_t kKernelRecord = 0xff; // DeviceRecord::kind of a kernel
const char* copy_kind_name(std::size_t kind);

struct Totals {
  uint64_t count = 0;
  uint64_t bytes = 0;
  uint64_t ns = 0;
};

// A kernel or copy kept until exit, to attribute to the NVTX ranges its launching call was in.
struct DeviceRecord {
  uint64_t duration_ns;
  uint64_t bytes;
  uint32_t correlation_id;         // the launching driver (or runtime) call
  uint32_t runtime_correlation_id; // copies: the runtime call around it; 0 when none
  uint8_t kind;                    // a CopyKind, or kKernelRecord
};

// A driver or runtime API call: which thread made it, and when it started.
struct ApiRecord {
  uint64_t start;
  uint32_t correlation_id;
  uint32_t thread_id;
};

constexpr uint32_t kProcessWide = 0; // RangeRecord::thread_id of a start/end range (gettid is > 0)
constexpr uint32_t kNoRange = UINT32_MAX;

struct RangeRecord {
  uint64_t start;
  uint64_t end; // 0 while open
  uint32_t name_id;
  uint32_t thread_id; // the pushing thread, or kProcessWide
};

struct State {
  // --- lifecycle (life_mu) ---
  std::mutex life_mu;
  bool initialized = false;
  bool cupti_ready = false;         // activity callbacks registered, device kinds enabled
  bool api_tracing_enabled = false; // RUNTIME and DRIVER kinds enabled
  // CUPTI stamps API records with gettid(), as the NVTX handlers do. When it cannot, push/pop
  // ranges are matched by time alone, like start/end ranges.
  bool system_thread_ids = false;
  pid_t pid = 0;
  uint64_t init_ts = 0;
  std::string output_path;
  std::atomic<bool> finished{false}; // the report is written: later records are ignored

  std::mutex errors_mu; // its own, so an error can be reported with any other lock held
  std::vector<std::string> errors;

  // Set by the first named NVTX range. Until then nothing can be attributed, so API records and
  // per-record copies are neither requested nor kept.
  std::atomic<bool> ranges_seen{false};
  std::atomic<uint64_t> first_range_start{UINT64_MAX};

  std::size_t max_records = std::size_t{4} << 20; // per store; KEVAL_PROFILE_MAX_RECORDS

  // --- CUPTI activity (activity_mu) ---
  std::mutex activity_mu;
  std::unordered_map<std::string, Totals> kernels; // by mangled name; bytes unused
  std::array<Totals, kCopyKinds> copies{};
  std::vector<DeviceRecord> device_records;
  std::vector<ApiRecord> api_records;
  uint64_t records_dropped = 0;    // over max_records (ours)
  uint64_t cupti_dropped = 0;      // CUPTI's own (buffer full)
  uint64_t incomplete_records = 0; // no timestamps (still running at exit)

  // --- NVTX (nvtx_mu) ---
  std::mutex nvtx_mu;
  std::deque<std::string> names; // by id: range messages, registered strings, domain names
  std::unordered_map<std::string, uint32_t> name_ids;
  std::vector<RangeRecord> ranges;
  uint64_t ranges_dropped = 0;
};

// The one instance (never destroyed).
State& state();

// The CUPTI clock (CLOCK_REALTIME in ns unless a tool changed it), the one every activity record
// is stamped with.
uint64_t now_ns();

// The calling thread's kernel thread id: what CUPTI records once the thread-id type is SYSTEM.
uint32_t current_thread_id();

// Records an error for the report's "errors" and prints it on stderr ("keval-profiler: ...").
void report_error(const std::string& message);

// Interns a name (nvtx_mu held by the caller).
uint32_t intern_locked(State& s, const std::string& name);

} // namespace keval::profiler
