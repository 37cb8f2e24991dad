// A minimal streaming JSON writer (indented), so that the injected library pulls in no JSON
// library of its own next to whatever the program links.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace keval::profiler {

class JsonWriter {
public:
  void begin_object() { open('{'); }
  void end_object() { close('}'); }
  void begin_array() { open('['); }
  void end_array() { close(']'); }
  void key(std::string_view name);
  void string(std::string_view value);
  void uint(uint64_t value);
  void boolean(bool value);
  // Fixed-point with `decimals` digits (ms with 6 is ns resolution); non-finite values become 0.
  void number(double value, int decimals);
  // Every digit a double holds ("%.17g"); a non-finite value is written as null.
  void real(double value);

  // Convenience: key + value.
  void field(std::string_view name, uint64_t value) {
    key(name);
    uint(value);
  }
  void field(std::string_view name, double value, int decimals) {
    key(name);
    number(value, decimals);
  }

  std::string take() { return std::move(out_); }

private:
  void open(char bracket);
  void close(char bracket);
  void before_value();
  void newline();
  void quoted(std::string_view text);

  std::string out_;
  std::vector<bool> has_items_; // one per open container
  bool after_key_ = false;
};

} // namespace keval::profiler
