// Typed fields of a JSON object read from a peer, each failure an `Error` (the reader's own
// exception type: the runner channel's WireError, the device verifier's BadRequest) whose message
// names the field: "'shape' is missing or not an array".
#pragma once

#include <cstdint>
#include <string>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

namespace keval::json_fields {

template <class Error>
const boost::json::object& object_field(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_object())
    throw Error(std::string("'") + key + "' is missing or not an object");
  return v->as_object();
}

template <class Error>
const boost::json::array& array_field(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_array())
    throw Error(std::string("'") + key + "' is missing or not an array");
  return v->as_array();
}

template <class Error> std::string string_field(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_string())
    throw Error(std::string("'") + key + "' is missing or not a string");
  return std::string(v->as_string());
}

template <class Error> int64_t int_field(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  if (v == nullptr || !(v->is_int64() || v->is_uint64()))
    throw Error(std::string("'") + key + "' is missing or not an integer");
  if (v->is_uint64() && v->as_uint64() > static_cast<uint64_t>(INT64_MAX))
    throw Error(std::string("'") + key + "' is out of range");
  return v->is_int64() ? v->as_int64() : static_cast<int64_t>(v->as_uint64());
}

template <class Error> uint64_t uint_field(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  if (v != nullptr && v->is_uint64())
    return v->as_uint64();
  if (v != nullptr && v->is_int64() && v->as_int64() >= 0)
    return static_cast<uint64_t>(v->as_int64());
  throw Error(std::string("'") + key + "' is missing or not an unsigned integer");
}

template <class Error> double number_field(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_number())
    throw Error(std::string("'") + key + "' is missing or not a number");
  return v->to_number<double>();
}

template <class Error> bool bool_field(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_bool())
    throw Error(std::string("'") + key + "' is missing or not a boolean");
  return v->as_bool();
}

} // namespace keval::json_fields
