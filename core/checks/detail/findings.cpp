#include "checks/detail/findings.hpp"

#include <algorithm>
#include <array>

namespace keval::checks::detail {

namespace {

// A subject longer than this is cut: it is a name quoted in a sentence, not evidence (the
// excerpt is).
constexpr size_t kMaxSubjectBytes = 80;

bool is_word_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The path that starts at `at`: path characters up to the end of the literal, without the
// punctuation that ends a sentence ("writes to /dev/null." is /dev/null).
std::string_view path_at(std::string_view text, size_t at, size_t end) {
  size_t stop = at;
  while (stop < end && stop - at < 64) {
    const unsigned char c = text[stop];
    if (!(is_word_byte(c) || c >= 0x80 || c == '/' || c == '.' || c == '-' || c == '{' ||
          c == '}' || c == '%' || c == '+' || c == '@' || c == '~'))
      break;
    ++stop;
  }
  while (stop > at + 1 && text[stop - 1] == '.')
    --stop;
  return text.substr(at, stop - at);
}

uint32_t line_of(std::string_view text, size_t from, size_t to, uint32_t line) {
  return line + static_cast<uint32_t>(std::count(text.begin() + from, text.begin() + to, '\n'));
}

struct SymbolName {
  std::string_view name;
  Pattern pattern;
};

// CUDA and clock functions that a string names when it is handed to dlsym or ctypes: the only
// reason to look them up is to call or replace them behind the harness's back.
constexpr std::array kSymbolNames = {
    SymbolName{"cudaEventElapsedTime", Pattern::timing_patch},
    SymbolName{"cuEventElapsedTime", Pattern::timing_patch},
    SymbolName{"cuEventElapsedTime_v2", Pattern::timing_patch},
    SymbolName{"cudaEventRecord", Pattern::timing_patch},
    SymbolName{"cudaEventRecordWithFlags", Pattern::timing_patch},
    SymbolName{"cuEventRecord", Pattern::timing_patch},
    SymbolName{"cudaEventSynchronize", Pattern::timing_patch},
    SymbolName{"cuEventSynchronize", Pattern::timing_patch},
    SymbolName{"cudaEventQuery", Pattern::timing_patch},
    SymbolName{"cuEventQuery", Pattern::timing_patch},
    SymbolName{"clock_gettime", Pattern::timing_patch},
    SymbolName{"gettimeofday", Pattern::timing_patch},
    SymbolName{"cudaDeviceSynchronize", Pattern::interposition},
    SymbolName{"cudaStreamSynchronize", Pattern::interposition},
    SymbolName{"cuCtxSynchronize", Pattern::interposition},
    SymbolName{"cuStreamSynchronize", Pattern::interposition},
    SymbolName{"cudaLaunchKernel", Pattern::interposition},
    SymbolName{"cuLaunchKernel", Pattern::interposition},
    SymbolName{"cudaMemcpy", Pattern::interposition},
    SymbolName{"cudaMemcpyAsync", Pattern::interposition},
};

} // namespace

std::string_view pattern_id(Pattern pattern) {
  switch (pattern) {
  case Pattern::timing_patch:
    return "timing_patch";
  case Pattern::cuda_graph:
    return "cuda_graph";
  case Pattern::interposition:
    return "interposition";
  case Pattern::thread:
    return "thread";
  case Pattern::multiprocessing:
    return "multiprocessing";
  case Pattern::stream:
    return "stream";
  case Pattern::torch_fallback:
    return "torch_fallback";
  case Pattern::tensor_subclass:
    return "tensor_subclass";
  case Pattern::reference_call:
    return "reference_call";
  case Pattern::output_cache:
    return "output_cache";
  case Pattern::descriptor_write:
    return "descriptor_write";
  case Pattern::process_control:
    return "process_control";
  case Pattern::raw_memory:
    return "raw_memory";
  case Pattern::ctypes:
    return "ctypes";
  case Pattern::introspection:
    return "introspection";
  case Pattern::monkeypatch:
    return "monkeypatch";
  case Pattern::dynamic_code:
    return "dynamic_code";
  case Pattern::torch_setting:
    return "torch_setting";
  case Pattern::finalizer:
    return "finalizer";
  case Pattern::unicode_identifier:
    return "unicode_identifier";
  case Pattern::truncated:
    return "truncated";
  }
  return "unknown";
}

Findings::Findings() {
  subjects_.emplace_back();
}

void Findings::add(Pattern pattern, uint32_t line, uint32_t offset, const char* reason,
                   std::string_view subject) {
  // Passes report in source order, so a line that repeats one pattern costs one entry.
  if (!raw_.empty() && raw_.back().line == line && raw_.back().pattern == pattern)
    return;
  uint32_t index = 0;
  if (!subject.empty()) {
    std::string key(subject.substr(0, kMaxSubjectBytes));
    auto [it, inserted] = subject_index_.try_emplace(key, static_cast<uint32_t>(subjects_.size()));
    if (inserted)
      subjects_.push_back(std::move(key));
    index = it->second;
  }
  raw_.push_back(RawFinding{line, offset, pattern, reason, index});
}

void scan_literal(std::string_view text, size_t begin, size_t end, uint32_t line, Findings& out) {
  if (begin >= end || end > text.size())
    return;
  const std::string_view body = text.substr(begin, end - begin);
  const auto report = [&](size_t at, Pattern pattern, const char* reason, std::string_view what) {
    out.add(pattern, line_of(text, begin, begin + at, line), static_cast<uint32_t>(begin + at),
            reason, what);
  };

  for (size_t at = body.find("/proc/"); at != std::string_view::npos;
       at = body.find("/proc/", at + 1)) {
    const std::string_view path = path_at(body, at, body.size());
    const bool memory = path.size() >= 4 && path.substr(path.size() - 4) == "/mem";
    if (memory)
      report(at, Pattern::raw_memory,
             "names {}: the process's memory file reads and writes memory behind every check",
             path);
    else
      report(at, Pattern::descriptor_write,
             "names {}: descriptors and process state reached through /proc can forge results or "
             "tamper with the harness",
             path);
  }
  for (size_t at = body.find("/dev/"); at != std::string_view::npos;
       at = body.find("/dev/", at + 1)) {
    const std::string_view path = path_at(body, at, body.size());
    if (path == "/dev/null")
      continue;
    report(at, Pattern::descriptor_write,
           "names {}: a device or descriptor file reaches past the kernel's own buffers", path);
  }
  for (std::string_view variable : {std::string_view("LD_PRELOAD"), std::string_view("LD_AUDIT")}) {
    const size_t at = body.find(variable);
    if (at != std::string_view::npos)
      report(at, Pattern::interposition,
             "names {}: a preloaded library can replace CUDA or timing functions in every process "
             "started after it",
             variable);
  }
  if (const size_t at = body.find("KEV1");
      at != std::string_view::npos && (at + 4 == body.size() || !is_word_byte(body[at + 4])))
    report(at, Pattern::descriptor_write,
           "contains {}, the magic of keval's protocol frames: the source forges messages to the "
           "harness",
           "KEV1");

  // A whole string that is a symbol name: dlsym("cudaEventElapsedTime"), ctypes lookups.
  size_t first = 0;
  size_t last = body.size();
  while (first < last && static_cast<unsigned char>(body[first]) <= ' ')
    ++first;
  while (last > first && static_cast<unsigned char>(body[last - 1]) <= ' ')
    --last;
  const std::string_view trimmed = body.substr(first, last - first);
  for (const SymbolName& symbol : kSymbolNames) {
    if (trimmed == symbol.name) {
      report(first, symbol.pattern,
             symbol.pattern == Pattern::timing_patch
                 ? "looks up {} by name: a kernel has no use for the timer's functions but to "
                   "replace or fake them"
                 : "looks up {} by name: a symbol lookup is how a library interposes the "
                   "functions the harness calls",
             symbol.name);
      break;
    }
  }
}

} // namespace keval::checks::detail
