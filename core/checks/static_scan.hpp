// A static scan of a candidate's source for the ways kernels game timing or checks, after
// KernelBench's static checker: patched timers, threads and processes, side streams, fallbacks
// to torch, lazy tensor subclasses, writes to descriptors, reaching into the harness, caches.
//
// What it finds are warnings (the "static" flag), never a verdict: an honest kernel may use a
// stream, and a hostile one can hide from any pattern (code built at run time is itself flagged,
// as dynamic_code, but the scan does not follow it). The runtime checks decide; this says where a
// reviewer should look.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace keval::checks {

struct StaticFinding {
  // A stable id: timing_patch, cuda_graph, interposition, thread, multiprocessing, stream,
  // torch_fallback, tensor_subclass, reference_call, output_cache, descriptor_write,
  // process_control, raw_memory, ctypes, introspection, monkeypatch, dynamic_code,
  // torch_setting, finalizer, unicode_identifier, truncated (the source was larger than what is
  // scanned), scan_error (the scanner itself failed: out of memory).
  std::string pattern;
  std::string reason;  // one sentence: what was seen and why it matters
  int line = 0;        // 1-based line in the source (0 only for scan_error)
  std::string excerpt; // the line, trimmed, at most 160 bytes of valid UTF-8 ("..." marks a cut)
};

inline constexpr size_t kMaxStaticFindings = 50;
// Bytes scanned at most; a longer source gets a "truncated" finding (requests allow 4 MiB).
inline constexpr size_t kMaxScannedBytes = 16u << 20;

// What a source is written in, as its plugin's manifest says: KEVAL_CAP_NEEDS_PYTHON means Python
// (sdk/include/keval/plugin.h). `unknown` guesses from the text (Python when it looks like it).
enum class SourceLanguage { python, cxx, unknown };

// Scans a candidate's source for patterns that game timing or checks. Python sources are scanned
// as code with comments and string contents left out, and the strings that look like C++
// (load_inline sources) are scanned as C++. Findings come in source order, one per pattern and
// line; at most kMaxStaticFindings of them (the rest counted in *omitted when not null). Linear
// in the size of the source; never throws on any input (binary, huge, NUL).
std::vector<StaticFinding> scan_source(std::string_view source, SourceLanguage language,
                                       size_t* omitted = nullptr);

} // namespace keval::checks
