#include "request/detail/json_reader.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <utility>

namespace keval::request::detail {

namespace {

// 2^63 and 2^64 as doubles: the exclusive upper bounds of integral doubles that convert exactly.
constexpr double kTwoPow63 = 9223372036854775808.0;
constexpr double kTwoPow64 = 18446744073709551616.0;

[[noreturn]] void fail_kind(const json::value& value, const std::string& path,
                            std::string_view expected) {
  throw RequestError(path, "must be " + std::string(expected) + ", got " + kind_name(value));
}

bool is_integral(double value) {
  return std::isfinite(value) && std::trunc(value) == value;
}

// An integral double, or a RequestError saying the value is no integer.
double integral_double(const json::value& value, const std::string& path) {
  double number = value.get_double();
  if (!is_integral(number))
    throw RequestError(path, "must be an integer, got " + format_number(number));
  return number;
}

} // namespace

void ParseContext::warn(const std::string& path, std::string_view message) const {
  warnings.push_back(path + ": " + std::string(message));
}

std::string member_path(std::string_view parent, std::string_view key) {
  if (parent.empty())
    return std::string(key);
  return std::string(parent) + "." + std::string(key);
}

std::string element_path(std::string_view parent, size_t index) {
  return std::string(parent) + "[" + std::to_string(index) + "]";
}

const char* kind_name(const json::value& value) {
  switch (value.kind()) {
  case json::kind::null:
    return "null";
  case json::kind::bool_:
    return "boolean";
  case json::kind::int64:
  case json::kind::uint64:
    return "integer";
  case json::kind::double_:
    return "number";
  case json::kind::string:
    return "string";
  case json::kind::array:
    return "array";
  case json::kind::object:
    return "object";
  }
  return "unknown";
}

std::string format_number(double value) {
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  return text + "]";
}

const json::object& read_object(const json::value& value, const std::string& path) {
  if (!value.is_object())
    fail_kind(value, path, "an object");
  return value.get_object();
}

const json::array& read_array(const json::value& value, const std::string& path) {
  if (!value.is_array())
    fail_kind(value, path, "an array");
  return value.get_array();
}

std::string_view read_string(const json::value& value, const std::string& path) {
  if (!value.is_string())
    fail_kind(value, path, "a string");
  return value.get_string();
}

std::string_view read_nonempty_string(const json::value& value, const std::string& path) {
  std::string_view text = read_string(value, path);
  if (text.empty())
    throw RequestError(path, "must not be empty");
  return text;
}

std::string_view read_c_string(const json::value& value, const std::string& path, size_t max_bytes,
                               bool nonempty) {
  std::string_view text = nonempty ? read_nonempty_string(value, path) : read_string(value, path);
  if (text.size() > max_bytes)
    throw RequestError(path, "is " + std::to_string(text.size()) + " bytes, over the limit of " +
                                 std::to_string(max_bytes) + " bytes");
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    throw RequestError(path, "contains a NUL byte at offset " + std::to_string(nul) +
                                 ", which a kernel would never see (it ends the string there)");
  return text;
}

bool read_bool(const json::value& value, const std::string& path) {
  if (!value.is_bool())
    fail_kind(value, path, "a boolean");
  return value.get_bool();
}

int64_t read_int64(const json::value& value, const std::string& path) {
  if (value.is_int64())
    return value.get_int64();
  if (value.is_uint64())
    throw RequestError(path,
                       "is out of the int64 range, got " + std::to_string(value.get_uint64()));
  if (!value.is_double())
    fail_kind(value, path, "an integer");
  double number = integral_double(value, path);
  if (number < -kTwoPow63 || number >= kTwoPow63)
    throw RequestError(path, "is out of the int64 range, got " + format_number(number));
  return static_cast<int64_t>(number);
}

uint64_t read_uint64(const json::value& value, const std::string& path) {
  if (value.is_uint64())
    return value.get_uint64();
  if (value.is_int64()) {
    if (value.get_int64() < 0)
      throw RequestError(path, "must be >= 0, got " + std::to_string(value.get_int64()));
    return static_cast<uint64_t>(value.get_int64());
  }
  if (!value.is_double())
    fail_kind(value, path, "an integer");
  double number = integral_double(value, path);
  if (number < 0)
    throw RequestError(path, "must be >= 0, got " + format_number(number));
  if (number >= kTwoPow64)
    throw RequestError(path, "is out of the uint64 range, got " + format_number(number));
  return static_cast<uint64_t>(number);
}

int64_t read_positive_int(const json::value& value, const std::string& path, int64_t max) {
  int64_t number = read_int64(value, path);
  if (number <= 0)
    throw RequestError(path, "must be > 0, got " + std::to_string(number));
  if (number > max)
    throw RequestError(path,
                       "must be <= " + std::to_string(max) + ", got " + std::to_string(number));
  return number;
}

int64_t read_non_negative_int(const json::value& value, const std::string& path) {
  int64_t number = read_int64(value, path);
  if (number < 0)
    throw RequestError(path, "must be >= 0, got " + std::to_string(number));
  return number;
}

double read_finite_number(const json::value& value, const std::string& path) {
  double number = 0;
  if (value.is_int64())
    number = static_cast<double>(value.get_int64());
  else if (value.is_uint64())
    number = static_cast<double>(value.get_uint64());
  else if (value.is_double())
    number = value.get_double();
  else
    fail_kind(value, path, "a number");
  if (!std::isfinite(number))
    throw RequestError(path, "must be a finite number, got " + format_number(number));
  return number;
}

double read_non_negative_number(const json::value& value, const std::string& path) {
  double number = read_finite_number(value, path);
  if (number < 0)
    throw RequestError(path, "must be >= 0, got " + format_number(number));
  return number;
}

ObjectReader::ObjectReader(const json::value& value, std::string path, const ParseContext& ctx)
    : object_(read_object(value, path)), path_(std::move(path)), ctx_(ctx) {}

const json::value* ObjectReader::optional(std::string_view key) {
  asked_.push_back(key);
  const json::value* field = object_.if_contains(key);
  return field == nullptr || field->is_null() ? nullptr : field;
}

const json::value& ObjectReader::required(std::string_view key) {
  const json::value* field = optional(key);
  if (field == nullptr)
    throw RequestError(path_of(key), object_.contains(key) ? "required field is null"
                                                           : "required field is missing");
  return *field;
}

void ObjectReader::warn_unknown_fields() const {
  for (const auto& field : object_)
    if (!asked_for(field.key()))
      ctx_.warn(path_of(field.key()), "unknown field, ignored");
}

bool ObjectReader::asked_for(std::string_view key) const {
  return std::find(asked_.begin(), asked_.end(), key) != asked_.end();
}

} // namespace keval::request::detail
