// Internals of the static scan (checks/static_scan.hpp): the findings the Python and C++ passes
// report, before they are ordered, capped and given excerpts, and the checks on string contents
// that both passes share.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace keval::checks::detail {

enum class Pattern : uint8_t {
  timing_patch,
  cuda_graph,
  interposition,
  thread,
  multiprocessing,
  stream,
  torch_fallback,
  tensor_subclass,
  reference_call,
  output_cache,
  descriptor_write,
  process_control,
  raw_memory,
  ctypes,
  introspection,
  monkeypatch,
  dynamic_code,
  torch_setting,
  finalizer,
  unicode_identifier,
  truncated,
};

std::string_view pattern_id(Pattern pattern);

struct RawFinding {
  uint32_t line = 0;
  uint32_t offset = 0; // where in the source it was seen: the excerpt of a long line centres on it
  Pattern pattern{};
  const char* reason = nullptr; // static text; "{}" stands for the subject
  uint32_t subject = 0;         // Findings::subject(subject); 0 is the empty subject
};

// What a scan has seen so far. Reasons are static text and subjects (the name that was seen) are
// interned, so that a source made of nothing but suspicious lines costs a few bytes per finding.
class Findings {
public:
  Findings();
  void add(Pattern pattern, uint32_t line, uint32_t offset, const char* reason,
           std::string_view subject = {});
  const std::vector<RawFinding>& raw() const { return raw_; }
  std::string_view subject(uint32_t index) const { return subjects_[index]; }

private:
  std::vector<RawFinding> raw_;
  std::vector<std::string> subjects_;
  std::unordered_map<std::string, uint32_t> subject_index_;
};

// A name a pass looks for, the pattern it stands for and why. `flags` are the pass's own (when the
// name counts: only called, in any namespace, ...).
struct Rule {
  std::string_view name;
  Pattern pattern;
  const char* reason;
  uint8_t flags = 0;
};

using RuleIndex = std::unordered_map<std::string_view, const Rule*>;

// A table of rules by name, built once per table by the pass that owns it.
template <size_t N> RuleIndex index_rules(const std::array<Rule, N>& rules) {
  RuleIndex index;
  for (const Rule& rule : rules)
    index.emplace(rule.name, &rule);
  return index;
}

// The rule named `name`, or nullptr.
inline const Rule* find_rule(const RuleIndex& index, std::string_view name) {
  const auto it = index.find(name);
  return it == index.end() ? nullptr : it->second;
}

// Checks on the contents [begin, end) of one string literal of `text` that starts on `line`:
// /proc and /dev paths, LD_PRELOAD, keval's frame magic, a CUDA function named as a whole string
// (a symbol lookup). Paths and names are what code passes around as strings, so these are the
// only patterns looked for inside strings.
void scan_literal(std::string_view text, size_t begin, size_t end, uint32_t line, Findings& out);

} // namespace keval::checks::detail
