#include "detail/json_writer.hpp"

#include <cmath>
#include <cstdio>

namespace keval::profiler {

namespace {

// Length of the valid UTF-8 sequence at text[i], or 0 when it is not one (RFC 3629: no
// overlongs, no surrogates, nothing above U+10FFFF). Range names come from the program and may
// be any bytes; a JSON parser rejects invalid UTF-8, so those bytes become U+FFFD.
std::size_t utf8_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  std::size_t n = 0;
  uint32_t min = 0;
  uint32_t cp = 0;
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    n = 2, min = 0x80, cp = b0 & 0x1f;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    n = 3, min = 0x800, cp = b0 & 0x0f;
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    n = 4, min = 0x10000, cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (i + n > text.size())
    return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80)
      return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

} // namespace

void JsonWriter::newline() {
  out_ += '\n';
  out_.append(2 * has_items_.size(), ' ');
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!has_items_.empty()) {
    if (has_items_.back())
      out_ += ',';
    has_items_.back() = true;
    newline();
  }
}

void JsonWriter::open(char bracket) {
  before_value();
  out_ += bracket;
  has_items_.push_back(false);
}

void JsonWriter::close(char bracket) {
  const bool had_items = has_items_.back();
  has_items_.pop_back();
  if (had_items)
    newline();
  out_ += bracket;
  if (has_items_.empty())
    out_ += '\n';
}

void JsonWriter::key(std::string_view name) {
  before_value();
  quoted(name);
  out_ += ": ";
  after_key_ = true;
}

void JsonWriter::string(std::string_view value) {
  before_value();
  quoted(value);
}

void JsonWriter::uint(uint64_t value) {
  before_value();
  out_ += std::to_string(value);
}

void JsonWriter::boolean(bool value) {
  before_value();
  out_ += value ? "true" : "false";
}

void JsonWriter::number(double value, int decimals) {
  before_value();
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, std::isfinite(value) ? value : 0.0);
  out_ += buffer;
}

void JsonWriter::real(double value) {
  before_value();
  if (!std::isfinite(value)) {
    out_ += "null";
    return;
  }
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  out_ += buffer;
}

void JsonWriter::quoted(std::string_view text) {
  out_ += '"';
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const std::size_t n = utf8_length(text, i);
      if (n == 0) {
        out_ += "\\ufffd";
        ++i;
      } else {
        out_.append(text.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
    case '"':
      out_ += "\\\"";
      break;
    case '\\':
      out_ += "\\\\";
      break;
    case '\n':
      out_ += "\\n";
      break;
    case '\r':
      out_ += "\\r";
      break;
    case '\t':
      out_ += "\\t";
      break;
    default:
      if (c < 0x20) {
        char buffer[8];
        std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
        out_ += buffer;
      } else {
        out_ += static_cast<char>(c);
      }
    }
    ++i;
  }
  out_ += '"';
}

} // namespace keval::profiler
