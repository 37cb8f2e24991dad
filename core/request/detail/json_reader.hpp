// Typed, path-tracking access to parsed JSON. Every failure is a RequestError naming the JSON
// path at fault ("kernel.io.args[2].tensor_spec.shape[1]"), so each parse step only states
// what it expects.
#pragma once

#include "request/parse.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

namespace keval::request::detail {

namespace json = boost::json;

// What every parse step needs besides the value itself: the caps, and where warnings go.
struct ParseContext {
  const Limits& limits;
  std::vector<std::string>& warnings;
  TensorDataDecoding decoding = TensorDataDecoding::check;

  void warn(const std::string& path, std::string_view message) const;
};

// "kernel" + "io" -> "kernel.io"; the top level has the empty path, so "" + "kernel" -> "kernel".
std::string member_path(std::string_view parent, std::string_view key);
// "kernel.io.args" + 2 -> "kernel.io.args[2]".
std::string element_path(std::string_view parent, size_t index);

// The JSON kind of a value as a client would name it ("string", "integer", "number", ...).
const char* kind_name(const json::value& value);
// Shortest text that reads back as the same double: "0.1", "2", "1e+18".
std::string format_number(double value);
// "[2, 3]": shapes in messages.
std::string format_shape(const std::vector<int64_t>& shape);

const json::object& read_object(const json::value& value, const std::string& path);
const json::array& read_array(const json::value& value, const std::string& path);
std::string_view read_string(const json::value& value, const std::string& path);
std::string_view read_nonempty_string(const json::value& value, const std::string& path);
// A string a plugin receives as a NUL-terminated C string (kernel_type, argument names, str
// arguments): a NUL would silently cut it there, so it is refused with its offset, and so is one
// longer than `max_bytes`.
std::string_view read_c_string(const json::value& value, const std::string& path, size_t max_bytes,
                               bool nonempty);
bool read_bool(const json::value& value, const std::string& path);
// Integers may arrive as integral doubles (4.0, 1e6): Python clients produce both.
int64_t read_int64(const json::value& value, const std::string& path);
// The full uint64 range (seeds); negative values are rejected with "must be >= 0".
uint64_t read_uint64(const json::value& value, const std::string& path);
int64_t read_positive_int(const json::value& value, const std::string& path,
                          int64_t max = INT64_MAX);
int64_t read_non_negative_int(const json::value& value, const std::string& path);
// Any JSON number that is finite (1e999 parses to infinity and is rejected).
double read_finite_number(const json::value& value, const std::string& path);
double read_non_negative_number(const json::value& value, const std::string& path);

// One JSON object read field by field. Fields never asked for are unknown: the V2 contract's
// pydantic models ignored them, so they are warnings ("path: unknown field, ignored"), not errors.
class ObjectReader {
public:
  // Throws RequestError when `value` is not an object.
  ObjectReader(const json::value& value, std::string path, const ParseContext& ctx);

  const std::string& path() const { return path_; }
  std::string path_of(std::string_view key) const { return member_path(path_, key); }

  // The field, or nullptr when absent or null: pydantic's .dict() writes unset optional
  // fields as null, so null means "not given".
  const json::value* optional(std::string_view key);
  // The field; RequestError at the field's path when it is absent or null.
  const json::value& required(std::string_view key);
  // Adds a warning for every field that neither optional() nor required() asked for.
  void warn_unknown_fields() const;

private:
  bool asked_for(std::string_view key) const;

  const json::object& object_;
  std::string path_;
  const ParseContext& ctx_;
  std::vector<std::string_view> asked_;
};

} // namespace keval::request::detail
