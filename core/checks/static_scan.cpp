#include "checks/static_scan.hpp"

#include "checks/detail/cxx_scan.hpp"
#include "checks/detail/findings.hpp"
#include "checks/detail/python_scan.hpp"
#include "common/utf8.hpp"

#include <algorithm>
#include <numeric>

namespace keval::checks {

namespace {

using detail::Findings;
using detail::Pattern;
using detail::RawFinding;

constexpr size_t kExcerptBytes = 160;
// In a line too long to show whole, the excerpt starts this many bytes before what was seen.
constexpr size_t kExcerptLead = 40;
constexpr std::string_view kCut = "...";

bool is_blank(unsigned char c) {
  return c <= ' ' || c == 0x7f;
}
bool is_continuation(unsigned char c) {
  return (c & 0xC0) == 0x80;
}

// `line` trimmed, as valid UTF-8 without control characters, at most kExcerptBytes; a long line
// is shown around `focus` (an offset in `line`), with "..." where it was cut.
std::string excerpt(std::string_view line, size_t focus) {
  size_t begin = 0;
  size_t end = line.size();
  while (begin < end && is_blank(line[begin]))
    ++begin;
  while (end > begin && is_blank(line[end - 1]))
    --end;
  focus = std::clamp(focus, begin, end);
  bool cut_front = false;
  if (end - begin > kExcerptBytes && focus > begin + kExcerptLead) {
    begin = focus - kExcerptLead;
    cut_front = true;
    for (int i = 0; i < 3 && begin < end && is_continuation(line[begin]); ++i)
      ++begin; // never start inside a character
  }
  // Twice the budget in raw bytes is enough: validation only makes text longer.
  const size_t stop = std::min(end, begin + 2 * kExcerptBytes);
  std::string text = valid_utf8(line.substr(begin, stop - begin));
  for (char& c : text)
    if (is_blank(static_cast<unsigned char>(c)))
      c = ' ';
  size_t budget = kExcerptBytes - (cut_front ? kCut.size() : 0);
  const bool cut_back = stop < end || text.size() > budget;
  if (cut_back) {
    budget -= kCut.size();
    size_t cut = std::min(budget, text.size());
    while (cut > 0 && cut < text.size() && is_continuation(text[cut]))
      --cut; // text is valid UTF-8 now: back up to the start of a character
    text.resize(cut);
  }
  std::string out;
  out.reserve(kExcerptBytes);
  if (cut_front)
    out += kCut;
  out += text;
  if (cut_back)
    out += kCut;
  return out;
}

std::string reason_text(const RawFinding& raw, const Findings& findings) {
  std::string reason = raw.reason;
  const size_t slot = reason.find("{}");
  if (slot != std::string::npos)
    reason.replace(slot, 2, valid_utf8(findings.subject(raw.subject)));
  return reason;
}

// Sorts, keeps one finding per pattern and line, caps, and attaches excerpts.
std::vector<StaticFinding> finish(std::string_view source, const Findings& findings,
                                  size_t* omitted) {
  const std::vector<RawFinding>& raw = findings.raw();
  std::vector<uint32_t> order(raw.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return raw[a].line != raw[b].line ? raw[a].line < raw[b].line : raw[a].offset < raw[b].offset;
  });
  std::vector<uint32_t> kept;
  size_t unique = 0;
  uint32_t line = 0;
  uint64_t seen = 0; // patterns already reported on `line`
  for (uint32_t index : order) {
    const RawFinding& f = raw[index];
    if (f.line != line) {
      line = f.line;
      seen = 0;
    }
    const uint64_t bit = uint64_t{1} << static_cast<unsigned>(f.pattern);
    if (seen & bit)
      continue;
    seen |= bit;
    ++unique;
    if (kept.size() < kMaxStaticFindings)
      kept.push_back(index);
  }
  if (omitted != nullptr)
    *omitted = unique - kept.size();

  // One pass over the source for the lines the kept findings are on (in order already).
  std::vector<StaticFinding> out;
  out.reserve(kept.size());
  size_t line_begin = 0;
  uint32_t current = 1;
  for (uint32_t index : kept) {
    const RawFinding& f = raw[index];
    while (current < f.line && line_begin < source.size()) {
      const size_t newline = source.find('\n', line_begin);
      line_begin = newline == std::string_view::npos ? source.size() : newline + 1;
      ++current;
    }
    size_t line_end = source.find('\n', line_begin);
    if (line_end == std::string_view::npos)
      line_end = source.size();
    const std::string_view text = source.substr(line_begin, line_end - line_begin);
    const size_t focus = f.offset >= line_begin ? f.offset - line_begin : 0;
    out.push_back(StaticFinding{std::string(detail::pattern_id(f.pattern)),
                                reason_text(f, findings), static_cast<int>(f.line),
                                excerpt(text, focus)});
  }
  return out;
}

} // namespace

std::vector<StaticFinding> scan_source(std::string_view source, SourceLanguage language,
                                       size_t* omitted) {
  if (omitted != nullptr)
    *omitted = 0;
  try {
    const std::string_view scanned = source.substr(0, std::min(source.size(), kMaxScannedBytes));
    Findings findings;
    const bool python = language == SourceLanguage::python ||
                        (language == SourceLanguage::unknown && detail::looks_like_python(scanned));
    if (python) {
      std::string cxx_text;
      detail::scan_python(scanned, findings, cxx_text);
      if (!cxx_text.empty())
        detail::scan_cxx(cxx_text, findings);
    } else {
      detail::scan_cxx(scanned, findings);
    }
    if (scanned.size() < source.size()) {
      const auto lines = static_cast<uint32_t>(std::count(scanned.begin(), scanned.end(), '\n'));
      findings.add(Pattern::truncated, lines + 1, static_cast<uint32_t>(scanned.size()),
                   "the source is longer than the {} bytes this scan reads: the rest was not "
                   "scanned",
                   std::to_string(kMaxScannedBytes));
    }
    return finish(source, findings, omitted);
  } catch (...) {
    // Only allocation can fail here; a scan that could not finish says so rather than nothing.
    std::vector<StaticFinding> failed;
    failed.push_back(StaticFinding{
        "scan_error", "the static scan ran out of memory and could not finish", 0, ""});
    return failed;
  }
}

} // namespace keval::checks
