#include "result/summary.hpp"

#include <cstdio>
#include <sstream>
#include <string_view>

#include <boost/json/value.hpp>

namespace keval::result {
namespace json = boost::json;

namespace {

constexpr size_t kMaxErrorLines = 12; // of a compiler log or validation error
constexpr size_t kMaxLineChars = 160; // longer lines (flags' reasons, messages) are cut

const json::object* object_at(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr ? v->if_object() : nullptr;
}

std::string string_at(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->get_string()) : std::string();
}

const json::value* number_at(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_number() ? v : nullptr;
}

bool bool_at(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_bool() && v->get_bool();
}

// Text a terminal shows as text and nothing else. A compiler log, a validation error, a flag's
// reason can hold what the candidate wrote, and escape sequences in it could move the cursor and
// overwrite the verdict line a person reads ("CORRECT  speedup 45x"): control characters (C0,
// DEL, C1 as UTF-8) and the bidirectional overrides that reorder what is shown ("Trojan Source")
// are written as \xNN / \u{NNNN} instead. A tab becomes a space.
std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char buf[16];
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\t') {
      out += ' ';
    } else if (c < 0x20 || c == 0x7f) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else if (c == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      std::snprintf(buf, sizeof buf, "\\u{%04x}", static_cast<unsigned char>(text[i + 1]));
      out += buf;
      ++i;
    } else if (c == 0xe2 && i + 2 < text.size()) {
      // U+202A..U+202E (E2 80 AA..AE) and U+2066..U+2069 (E2 81 A6..A9).
      const auto b1 = static_cast<unsigned char>(text[i + 1]);
      const auto b2 = static_cast<unsigned char>(text[i + 2]);
      const bool bidi =
          (b1 == 0x80 && b2 >= 0xaa && b2 <= 0xae) || (b1 == 0x81 && b2 >= 0xa6 && b2 <= 0xa9);
      if (bidi) {
        const unsigned code = 0x2000u | ((b1 & 0x3fu) << 6) | (b2 & 0x3fu);
        std::snprintf(buf, sizeof buf, "\\u{%04x}", code);
        out += buf;
        i += 2;
      } else {
        out += static_cast<char>(c);
      }
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// One line of untrusted text, made printable and cut to `limit` characters.
std::string cut(std::string_view text, size_t limit = kMaxLineChars) {
  std::string shown = printable(text);
  if (shown.size() <= limit)
    return shown;
  // Not inside a UTF-8 sequence: back up to a character's first byte.
  size_t end = limit - 3;
  while (end > 0 && (static_cast<unsigned char>(shown[end]) & 0xc0) == 0x80)
    --end;
  return shown.substr(0, end) + "...";
}

// Milliseconds with four significant figures: 0.004213 ms, 28.98 ms, 1234 ms.
std::string millis(double ms) {
  char buf[32];
  const double a = ms < 0 ? -ms : ms;
  const int decimals = a >= 1000 ? 0 : a >= 100 ? 1 : a >= 10 ? 2 : a >= 1 ? 3 : a >= 0.1 ? 4 : 6;
  std::snprintf(buf, sizeof buf, "%.*f ms", decimals, ms);
  return buf;
}

// The first lines of a log, each cut, and how many more there were.
void append_excerpt(std::ostringstream& out, std::string_view text) {
  size_t shown = 0, start = 0;
  while (start < text.size() && shown < kMaxErrorLines) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos)
      end = text.size();
    out << "    " << cut(text.substr(start, end - start)) << "\n";
    ++shown;
    start = end + 1;
  }
  if (start < text.size()) {
    size_t more = 0;
    for (size_t i = start; i < text.size(); ++i)
      more += text[i] == '\n';
    more += text.back() != '\n';
    out << "    ... " << more << " more line" << (more == 1 ? "" : "s") << "\n";
  }
}

// "median 28.98 ms  p95 29.32 ms  mean 29.03 ms  n=100  cpu_wall_clock"
std::string timing_line(const json::object& stats) {
  std::ostringstream line;
  const char* sep = "";
  for (auto [key, label] : {std::pair{"median", "median"}, std::pair{"percentile_95", "p95"},
                            std::pair{"mean", "mean"}}) {
    if (const json::value* v = number_at(stats, key)) {
      line << sep << label << " " << millis(v->to_number<double>());
      sep = "  ";
    }
  }
  if (const json::value* n = number_at(stats, "count"))
    line << sep << "n=" << n->to_number<int64_t>(), sep = "  ";
  if (const std::string method = string_at(stats, "method"); !method.empty())
    line << sep << cut(method, 40);
  return line.str();
}

struct Painter {
  bool color;
  std::string operator()(std::string_view text, const char* code) const {
    if (!color)
      return std::string(text);
    return std::string("\x1b[") + code + "m" + std::string(text) + "\x1b[0m";
  }
};

} // namespace

std::string summarize(const json::object& body, const SummaryOptions& options) {
  const Painter paint{options.color};
  constexpr const char* kGreen = "1;32";
  constexpr const char* kRed = "1;31";
  constexpr const char* kYellow = "1;33";
  std::ostringstream out;

  const std::string status = string_at(body, "status");
  const json::object* error = object_at(body, "error");
  const json::object* result = object_at(body, "kernel_exec_result");
  const json::object empty;
  const json::object& kernel = result != nullptr ? *result : empty;
  const json::object* metadata = object_at(kernel, "metadata");
  const std::string job_id = cut(string_at(body, "job_id"), 80);

  // The verdict line: one word a person can act on, then the speedup when there is one.
  std::string verdict;
  std::string excerpt;
  if (error != nullptr && string_at(*error, "class") == "bad_request") {
    const std::string path = string_at(*error, "path");
    verdict = paint("BAD REQUEST", kRed) + "  " +
              cut((path.empty() ? "" : path + ": ") + string_at(*error, "message"));
  } else if (status == "skipped") {
    verdict = paint("SKIPPED", kYellow) + "  this machine cannot run it";
    excerpt = string_at(body, "compilation_error");
  } else if (status == "failed") {
    verdict =
        paint("FAILED", kRed) + "  keval or the machine failed (" +
        (error != nullptr ? cut(string_at(*error, "class"), 40) : std::string("infrastructure")) +
        "), not a verdict on the kernel";
    if (error != nullptr)
      excerpt = string_at(*error, "message");
  } else if (!bool_at(kernel, "compiled")) {
    verdict = paint("COMPILE ERROR", kRed);
    excerpt = string_at(body, "compilation_error");
  } else if (!bool_at(kernel, "correctness")) {
    verdict = paint("INCORRECT", kRed);
    excerpt = string_at(body, "validation_error");
  } else {
    verdict = paint("CORRECT", kGreen);
  }
  out << verdict;
  if (const json::value* speedup = number_at(body, "speedup")) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "  speedup %.2fx", speedup->to_number<double>());
    out << buf;
    // What the wall times keval measured outside the candidate's process guarantee.
    const json::object* profiling =
        metadata != nullptr ? object_at(*metadata, "profiling") : nullptr;
    if (const json::value* floor = profiling ? number_at(*profiling, "speedup_floor") : nullptr) {
      std::snprintf(buf, sizeof buf, " (at least %.2fx)", floor->to_number<double>());
      out << buf;
    }
  }
  out << "\n";
  if (!excerpt.empty())
    append_excerpt(out, excerpt);

  if (!job_id.empty()) {
    out << "  job        " << job_id;
    if (metadata != nullptr)
      if (const json::object* device = object_at(*metadata, "device")) {
        const std::string name = cut(string_at(*device, "name"), 80);
        out << "  on " << cut(string_at(*device, "type"), 20)
            << (name.empty() ? "" : " (" + name + ")");
      }
    out << "\n";
  }
  const json::object* ref = object_at(body, "ref_runtime");
  if (const json::object* stats = object_at(kernel, "runtime_stats"))
    if (const std::string line = timing_line(*stats); !line.empty())
      out << "  " << (ref != nullptr ? "candidate  " : "kernel     ") << line << "\n";
  if (ref != nullptr)
    if (const std::string line = timing_line(*ref); !line.empty())
      out << "  reference  " << line << "\n";

  if (metadata != nullptr) {
    if (const json::value* flags = metadata->if_contains("flags"); flags && flags->is_array()) {
      for (const json::value& flag : flags->get_array()) {
        if (!flag.is_object())
          continue;
        const json::object& f = flag.get_object();
        const bool strict = bool_at(f, "strict");
        out << "  " << (strict ? paint("flag", kRed) : paint("flag", kYellow)) << "       "
            << cut(string_at(f, "name") + (strict ? " (strict: made it incorrect)" : "") + ": " +
                   string_at(f, "reason"))
            << "\n";
      }
    }
    if (const json::value* warnings = metadata->if_contains("warnings");
        warnings && warnings->is_array())
      for (const json::value& w : warnings->get_array())
        if (w.is_string())
          out << "  warning    " << cut(w.get_string()) << "\n";
  }
  if (!options.full_result_path.empty())
    out << "  full result " << options.full_result_path << "  (--json prints it instead)\n";
  return out.str();
}

} // namespace keval::result
