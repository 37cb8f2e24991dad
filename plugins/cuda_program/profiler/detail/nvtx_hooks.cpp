// NVTX types only: the implementation (per-DSO globals, loader) belongs to the program.
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include "detail/nvtx_hooks.hpp"

#include "detail/state.hpp"

#include <cstddef>
#include <cwchar>
#include <string>
#include <utility>
#include <vector>

namespace keval::profiler {

namespace {

// --- handles: interned name ids + 1, so that 0 (NVTX's "none") is never a valid handle ---

template <typename Handle> Handle handle_of(uint32_t id) {
  return reinterpret_cast<Handle>(static_cast<uintptr_t>(id) + 1);
}

template <typename Handle> uint32_t id_of(Handle handle) {
  const auto value = reinterpret_cast<uintptr_t>(handle);
  return value == 0 || value > UINT32_MAX ? kNoRange : static_cast<uint32_t>(value - 1);
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
    cp = 0xfffd;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// wchar_t is UTF-32 on Linux.
std::string from_wide(const wchar_t* text) {
  std::string out;
  if (text != nullptr)
    for (; *text != 0; ++text)
      append_utf8(out, static_cast<uint32_t>(*text));
  return out;
}

std::string registered_name(nvtxStringHandle_t handle) {
  const uint32_t id = id_of(handle);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.nvtx_mu);
  return id < s.names.size() ? s.names[id] : std::string();
}

std::string message_of(const nvtxEventAttributes_t* attr) {
  constexpr std::size_t kNeeded = offsetof(nvtxEventAttributes_t, message) + sizeof(attr->message);
  if (attr == nullptr || attr->size < kNeeded)
    return {};
  switch (attr->messageType) {
  case NVTX_MESSAGE_TYPE_ASCII:
    return attr->message.ascii != nullptr ? std::string(attr->message.ascii) : std::string();
  case NVTX_MESSAGE_TYPE_UNICODE:
    return from_wide(attr->message.unicode);
  case NVTX_MESSAGE_TYPE_REGISTERED:
    return registered_name(attr->message.registered);
  default:
    return {};
  }
}

// --- ranges ---

// Opens a range and returns its index, or kNoRange for an unnamed one (nothing can select it by
// name) or one over the limit. The timestamp is taken last, so the one-time cost of turning on
// API tracing falls before the range rather than inside it.
uint32_t open_range(const std::string& name, uint32_t thread_id) {
  if (name.empty())
    return kNoRange;
  request_api_tracing();
  State& s = state();
  std::lock_guard<std::mutex> lock(s.nvtx_mu);
  if (s.ranges.size() >= s.max_records || s.ranges.size() >= kNoRange - 1) {
    ++s.ranges_dropped;
    return kNoRange;
  }
  const uint32_t name_id = intern_locked(s, name);
  const uint64_t start = now_ns();
  s.ranges.push_back({start, 0, name_id, thread_id});
  uint64_t first = s.first_range_start.load();
  while (start < first && !s.first_range_start.compare_exchange_weak(first, start)) {
  }
  s.ranges_seen.store(true);
  return static_cast<uint32_t>(s.ranges.size() - 1);
}

void close_range(uint32_t index, bool process_wide) {
  if (index == kNoRange)
    return;
  const uint64_t end = now_ns();
  State& s = state();
  std::lock_guard<std::mutex> lock(s.nvtx_mu);
  if (index < s.ranges.size()) {
    RangeRecord& r = s.ranges[index];
    if (r.end == 0 && (r.thread_id == kProcessWide) == process_wide)
      r.end = end;
  }
}

// Push/pop stacks are per thread and per domain (the null domain is NVTX's default one).
struct DomainStack {
  nvtxDomainHandle_t domain;
  std::vector<uint32_t> ranges; // indexes, kNoRange for unrecorded ones (keeps pops matched)
};

std::vector<uint32_t>& stack_of(nvtxDomainHandle_t domain) {
  thread_local std::vector<DomainStack> stacks;
  for (DomainStack& d : stacks)
    if (d.domain == domain)
      return d.ranges;
  stacks.push_back({domain, {}});
  return stacks.back().ranges;
}

// NVTX: "returns the 0 based level of range being started"; a negative value on error.
int push(nvtxDomainHandle_t domain, const std::string& name) noexcept {
  try {
    std::vector<uint32_t>& stack = stack_of(domain);
    const uint32_t index = open_range(name, current_thread_id());
    stack.push_back(index);
    return static_cast<int>(stack.size()) - 1;
  } catch (...) {
    return -1;
  }
}

// NVTX: "returns the level of the range being ended"; a negative value on error.
int pop(nvtxDomainHandle_t domain) noexcept {
  try {
    std::vector<uint32_t>& stack = stack_of(domain);
    if (stack.empty())
      return -1;
    const uint32_t index = stack.back();
    stack.pop_back();
    close_range(index, false);
    return static_cast<int>(stack.size());
  } catch (...) {
    return -1;
  }
}

nvtxRangeId_t start(const std::string& name) noexcept {
  try {
    const uint32_t index = open_range(name, kProcessWide);
    return index == kNoRange ? 0 : static_cast<nvtxRangeId_t>(index) + 1;
  } catch (...) {
    return 0;
  }
}

void end(nvtxRangeId_t id) noexcept {
  try {
    if (id != 0 && id <= UINT32_MAX)
      close_range(static_cast<uint32_t>(id - 1), true);
  } catch (...) {
  }
}

uint32_t intern(const std::string& name) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.nvtx_mu);
  return intern_locked(s, name);
}

// --- the handlers NVTX calls (its function-table slots) ---

int NVTX_API RangePushA(const char* m) {
  return push(nullptr, m != nullptr ? m : "");
}
int NVTX_API RangePushW(const wchar_t* m) {
  return push(nullptr, from_wide(m));
}
int NVTX_API RangePushEx(const nvtxEventAttributes_t* a) {
  return push(nullptr, message_of(a));
}
int NVTX_API RangePop() {
  return pop(nullptr);
}
int NVTX_API DomainRangePushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  return push(d, message_of(a));
}
int NVTX_API DomainRangePop(nvtxDomainHandle_t d) {
  return pop(d);
}

nvtxRangeId_t NVTX_API RangeStartA(const char* m) {
  return start(m != nullptr ? m : "");
}
nvtxRangeId_t NVTX_API RangeStartW(const wchar_t* m) {
  return start(from_wide(m));
}
nvtxRangeId_t NVTX_API RangeStartEx(const nvtxEventAttributes_t* a) {
  return start(message_of(a));
}
void NVTX_API RangeEnd(nvtxRangeId_t id) {
  end(id);
}
nvtxRangeId_t NVTX_API DomainRangeStartEx(nvtxDomainHandle_t, const nvtxEventAttributes_t* a) {
  return start(message_of(a));
}
void NVTX_API DomainRangeEnd(nvtxDomainHandle_t, nvtxRangeId_t id) {
  end(id);
}

// Registered strings and domains are interned names, so the same text gives the same handle.
nvtxStringHandle_t NVTX_API DomainRegisterStringA(nvtxDomainHandle_t, const char* text) {
  try {
    return handle_of<nvtxStringHandle_t>(intern(text != nullptr ? text : ""));
  } catch (...) {
    return nullptr;
  }
}
nvtxStringHandle_t NVTX_API DomainRegisterStringW(nvtxDomainHandle_t, const wchar_t* text) {
  try {
    return handle_of<nvtxStringHandle_t>(intern(from_wide(text)));
  } catch (...) {
    return nullptr;
  }
}
nvtxDomainHandle_t NVTX_API DomainCreateA(const char* name) {
  try {
    return handle_of<nvtxDomainHandle_t>(intern(name != nullptr ? name : ""));
  } catch (...) {
    return nullptr;
  }
}
nvtxDomainHandle_t NVTX_API DomainCreateW(const wchar_t* name) {
  try {
    return handle_of<nvtxDomainHandle_t>(intern(from_wide(name)));
  } catch (...) {
    return nullptr;
  }
}
void NVTX_API DomainDestroy(nvtxDomainHandle_t) {}

template <typename F> NvtxFunctionPointer fn(F* f) {
  return reinterpret_cast<NvtxFunctionPointer>(f);
}

bool fill(const NvtxExportTableCallbacks& callbacks, NvtxCallbackModule module,
          const std::vector<std::pair<unsigned, NvtxFunctionPointer>>& slots) {
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0; // the highest valid index
  if (callbacks.GetModuleFunctionTable(module, &table, &size) == 0 || table == nullptr)
    return false;
  for (const auto& [index, function] : slots)
    if (index <= size && table[index] != nullptr)
      *table[index] = function;
  return true;
}

} // namespace

bool install_nvtx_hooks(NvtxGetExportTable get_export_table, const char** why) {
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  constexpr std::size_t kNeeded = offsetof(NvtxExportTableCallbacks, GetModuleFunctionTable) +
                                  sizeof(callbacks->GetModuleFunctionTable);
  if (callbacks == nullptr || callbacks->struct_size < kNeeded ||
      callbacks->GetModuleFunctionTable == nullptr) {
    *why = "NVTX gave no callbacks export table";
    return false;
  }
  const bool core = fill(*callbacks, NVTX_CB_MODULE_CORE,
                         {{NVTX_CBID_CORE_RangeStartEx, fn(RangeStartEx)},
                          {NVTX_CBID_CORE_RangeStartA, fn(RangeStartA)},
                          {NVTX_CBID_CORE_RangeStartW, fn(RangeStartW)},
                          {NVTX_CBID_CORE_RangeEnd, fn(RangeEnd)},
                          {NVTX_CBID_CORE_RangePushEx, fn(RangePushEx)},
                          {NVTX_CBID_CORE_RangePushA, fn(RangePushA)},
                          {NVTX_CBID_CORE_RangePushW, fn(RangePushW)},
                          {NVTX_CBID_CORE_RangePop, fn(RangePop)}});
  const bool core2 = fill(*callbacks, NVTX_CB_MODULE_CORE2,
                          {{NVTX_CBID_CORE2_DomainRangeStartEx, fn(DomainRangeStartEx)},
                           {NVTX_CBID_CORE2_DomainRangeEnd, fn(DomainRangeEnd)},
                           {NVTX_CBID_CORE2_DomainRangePushEx, fn(DomainRangePushEx)},
                           {NVTX_CBID_CORE2_DomainRangePop, fn(DomainRangePop)},
                           {NVTX_CBID_CORE2_DomainRegisterStringA, fn(DomainRegisterStringA)},
                           {NVTX_CBID_CORE2_DomainRegisterStringW, fn(DomainRegisterStringW)},
                           {NVTX_CBID_CORE2_DomainCreateA, fn(DomainCreateA)},
                           {NVTX_CBID_CORE2_DomainCreateW, fn(DomainCreateW)},
                           {NVTX_CBID_CORE2_DomainDestroy, fn(DomainDestroy)}});
  if (!core && !core2) {
    *why = "NVTX gave no function tables for its core modules";
    return false;
  }
  // NVTX asks tools to declare the NVTX version they were written against.
  const auto* version =
      static_cast<const NvtxExportTableVersionInfo*>(get_export_table(NVTX_ETID_VERSIONINFO));
  constexpr std::size_t kVersionNeeded =
      offsetof(NvtxExportTableVersionInfo, SetInjectionNvtxVersion) +
      sizeof(version->SetInjectionNvtxVersion);
  if (version != nullptr && version->struct_size >= kVersionNeeded &&
      version->SetInjectionNvtxVersion != nullptr)
    version->SetInjectionNvtxVersion(NVTX_VERSION);
  return true;
}

} // namespace keval::profiler
