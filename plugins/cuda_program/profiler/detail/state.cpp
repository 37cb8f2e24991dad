#include "detail/state.hpp"

#include <cstdio>
#include <ctime>

#include <cupti.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace keval::profiler {

const char* copy_kind_name(std::size_t kind) {
  static const char* const kNames[kCopyKinds] = {"HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "Other"};
  return kind < kCopyKinds ? kNames[kind] : "Other";
}

State& state() {
  static State* const instance = new State(); // leaked on purpose (see state.hpp)
  return *instance;
}

uint64_t now_ns() {
  uint64_t ts = 0;
  if (cuptiGetTimestamp(&ts) == CUPTI_SUCCESS && ts != 0)
    return ts;
  // CUPTI's documented default source on Linux, should the call ever fail.
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
}

uint32_t current_thread_id() {
  thread_local const uint32_t tid = static_cast<uint32_t>(::syscall(SYS_gettid));
  return tid;
}

void report_error(const std::string& message) {
  std::fprintf(stderr, "keval-profiler: %s\n", message.c_str());
  State& s = state();
  try {
    std::lock_guard<std::mutex> lock(s.errors_mu);
    if (s.errors.size() < 64) // a failing call in a loop must not grow the report without bound
      s.errors.push_back(message);
  } catch (...) {
    // Out of memory: stderr already has it.
  }
}

uint32_t intern_locked(State& s, const std::string& name) {
  auto it = s.name_ids.find(name);
  if (it != s.name_ids.end())
    return it->second;
  const auto id = static_cast<uint32_t>(s.names.size());
  s.names.push_back(name);
  s.name_ids.emplace(name, id);
  return id;
}

} // namespace keval::profiler
