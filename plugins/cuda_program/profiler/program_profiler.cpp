// keval's CUPTI injection library for performance mode: loaded into a benchmark process by the
// CUDA driver (CUDA_INJECTION64_PATH) and by NVTX (NVTX_INJECTION64_PATH), it collects kernel,
// memory-copy and NVTX-range activity inside that process and, at exit, writes ComputeEval's
// PerformanceMetrics JSON to $KEVAL_PROFILE_OUTPUT (default ./profile.json). See README.md.
//
// Nothing here may change what the program does: every entry point catches everything, a failing
// CUPTI call is reported (stderr and the report's "errors") and profiling goes on without it, and
// the exit handler never exits or aborts.

#include "detail/activity.hpp"
#include "detail/counters.hpp"
#include "detail/nvtx_hooks.hpp"
#include "detail/report.hpp"
#include "detail/state.hpp"

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <cupti.h>
#include <unistd.h>

#define KEVAL_EXPORT __attribute__((visibility("default")))

namespace keval::profiler {

namespace {

std::atomic<bool> g_api_tracing_requested{false};
bool g_cupti_attempted = false;       // life_mu
bool g_api_tracing_attempted = false; // life_mu

bool check(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS)
    return true;
  const char* text = nullptr;
  if (cuptiGetResultString(result, &text) != CUPTI_SUCCESS || text == nullptr)
    text = "unknown CUPTI error";
  report_error(std::string(what) + " failed: " + text + " (CUptiResult " +
               std::to_string(static_cast<int>(result)) + ")");
  return false;
}

std::size_t max_records_from_env(std::size_t fallback) {
  const char* text = std::getenv("KEVAL_PROFILE_MAX_RECORDS");
  if (text == nullptr || *text == '\0')
    return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') {
    report_error(std::string("KEVAL_PROFILE_MAX_RECORDS is not a number: '") + text +
                 "'; using the default");
    return fallback;
  }
  return static_cast<std::size_t>(value);
}

// A relative path is taken against the directory the process is in when the library starts, so
// a later chdir does not move the report.
std::string output_path_from_env() {
  const char* env = std::getenv("KEVAL_PROFILE_OUTPUT");
  std::string path = env != nullptr && *env != '\0' ? env : "profile.json";
  if (path.front() != '/') {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof cwd) != nullptr)
      path = std::string(cwd) + "/" + path;
  }
  return path;
}

void on_exit() noexcept;

// Shared by both entry points: whichever of CUDA and NVTX loads the library first (life_mu held).
void initialize_locked(State& s) {
  if (s.initialized)
    return;
  s.initialized = true;
  s.pid = ::getpid();
  s.max_records = max_records_from_env(s.max_records);
  s.output_path = output_path_from_env();
  s.init_ts = now_ns();
  if (std::atexit(on_exit) != 0)
    report_error("atexit failed: no report will be written");
}

// RUNTIME and DRIVER records are what ties a kernel or copy to the thread and time of the call
// that launched it. They are only needed once a range exists, and tracing every API call costs
// the program time, so they are turned on by the first range rather than at start (life_mu held).
void enable_api_tracing_locked(State& s) {
  if (!s.cupti_ready || g_api_tracing_attempted)
    return;
  g_api_tracing_attempted = true;
  const bool runtime =
      check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), "cuptiActivityEnable(RUNTIME)");
  const bool driver =
      check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER), "cuptiActivityEnable(DRIVER)");
  s.api_tracing_enabled = runtime && driver;
}

void on_exit() noexcept {
  try {
    State& s = state();
    bool cupti = false;
    {
      std::lock_guard<std::mutex> lock(s.life_mu);
      if (::getpid() != s.pid) // a forked child exiting: the report is the parent's
        return;
      cupti = s.cupti_ready;
    }
    const uint64_t exit_ts = now_ns(); // the flush below is the profiler's time, not the program's
    if (cupti)
      check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    s.finished.store(true);
    if (counters_requested())
      write_counters();
    const std::string text = build_report(s, exit_ts);
    std::string why;
    if (!write_atomically(s.output_path, text, &why))
      std::fprintf(stderr, "keval-profiler: no report written: %s\n", why.c_str());
  } catch (...) {
    std::fprintf(stderr, "keval-profiler: no report written: out of memory\n");
  }
}

} // namespace

void request_api_tracing() {
  if (g_api_tracing_requested.load(std::memory_order_acquire))
    return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.life_mu);
  g_api_tracing_requested.store(true, std::memory_order_release);
  enable_api_tracing_locked(s);
}

} // namespace keval::profiler

// The CUDA driver calls this once, from cuInit, when CUDA_INJECTION64_PATH names this library.
// The return value is not an error channel the program could observe; 1 is what CUPTI's own
// injection samples return.
extern "C" KEVAL_EXPORT int InitializeInjection(void) {
  using namespace keval::profiler;
  try {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.life_mu);
    initialize_locked(s);
    if (g_cupti_attempted)
      return 1;
    g_cupti_attempted = true;
    // NVTX ranges carry gettid(), so CUPTI's API records must too (its default is pthread_self()).
    // Set here rather than at the first NVTX call: a program that never uses CUDA then makes no
    // CUPTI call beyond reading its clock.
    s.system_thread_ids = check(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM),
                                "cuptiSetThreadIdType(SYSTEM)");
    // Counter mode (detail/counters.hpp): keval's extra run of a benchmark for device metrics.
    if (counters_requested())
      start_counters();
    if (!check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
               "cuptiActivityRegisterCallbacks"))
      return 1; // no activity at all: the report says so in "errors"
    // CONCURRENT_KERNEL, not KERNEL: KERNEL serializes every kernel on the GPU.
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
          "cuptiActivityEnable(CONCURRENT_KERNEL)");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable(MEMCPY)");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY2), "cuptiActivityEnable(MEMCPY2)");
    s.cupti_ready = true;
    if (g_api_tracing_requested.load())
      enable_api_tracing_locked(s);
  } catch (...) {
    std::fprintf(stderr, "keval-profiler: initialization failed: out of memory\n");
  }
  return 1;
}

// NVTX calls this from the program's first NVTX call (once per NVTX instance in the process) when
// NVTX_INJECTION64_PATH names this library. Returning 0 would make NVTX unload the library, which
// may also be the CUDA injection and has an exit handler registered, so this always returns 1.
extern "C" KEVAL_EXPORT int InitializeInjectionNvtx2(const void* (*get_export_table)(uint32_t)) {
  using namespace keval::profiler;
  try {
    {
      State& s = state();
      std::lock_guard<std::mutex> lock(s.life_mu);
      initialize_locked(s);
    }
    const char* why = nullptr;
    if (get_export_table == nullptr)
      report_error("NVTX ranges not recorded: NVTX passed no export table");
    else if (!install_nvtx_hooks(get_export_table, &why))
      report_error(std::string("NVTX ranges not recorded: ") + why);
  } catch (...) {
    std::fprintf(stderr, "keval-profiler: NVTX initialization failed: out of memory\n");
  }
  return 1;
}
