// Shared helpers of the request tests: a V2-contract Triton request to mutate, JSON-pointer edits,
// error capture, and base64 / zlib encoders for TensorData payloads.
#pragma once

#include "request/parse.hpp"

#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <gtest/gtest.h>
#include <zlib.h>

namespace keval::request::test {

namespace json = boost::json;
using Mode = EvalRequest::Mode;

// The IOContract example of the V2 contract's TRITON section, as the Python client sends it.
// args: [0] x (input tensor, randn), [1] y (output tensor), [2] n_elements (int),
// [3] BLOCK_SIZE (meta int).
inline json::value triton_request() {
  return json::parse(R"({
    "kernel": {
      "source_code": "import triton\nimport triton.language as tl\n\n@triton.jit\ndef add_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):\n    pass\n",
      "kernel_type": "triton",
      "metadata": {"kernel_name": "add_kernel"},
      "io": {
        "args": [
          {"name": "x", "type": "tensor",
           "tensor_spec": {"shape": [1024], "dtype": "float32", "init": {"kind": "randn", "seed": 42}}},
          {"name": "y", "type": "tensor", "role": "output",
           "tensor_spec": {"shape": [1024], "dtype": "float32"}},
          {"name": "n_elements", "type": "int", "value": 1024},
          {"name": "BLOCK_SIZE", "type": "int", "value": 128, "is_meta": true}
        ],
        "launch": {"grid": {"x": 8}, "num_warps": 4, "num_stages": 2}
      }
    },
    "num_trials": 100,
    "timeout": 120
  })");
}

// `doc` with the value at JSON pointer `pointer` replaced, or added when the parent object
// lacks that key.
inline json::value with_value(json::value doc, std::string_view pointer, json::value replacement) {
  size_t slash = pointer.rfind('/');
  json::value& parent = doc.at_pointer(pointer.substr(0, slash));
  std::string_view key = pointer.substr(slash + 1);
  if (parent.is_array())
    parent.as_array().at(std::stoul(std::string(key))) = std::move(replacement);
  else
    parent.as_object()[key] = std::move(replacement);
  return doc;
}

inline json::value with(json::value doc, std::string_view pointer, std::string_view json_text) {
  return with_value(std::move(doc), pointer, json::parse(json_text));
}

// `doc` without the object member at JSON pointer `pointer`.
inline json::value without(json::value doc, std::string_view pointer) {
  size_t slash = pointer.rfind('/');
  doc.at_pointer(pointer.substr(0, slash)).as_object().erase(pointer.substr(slash + 1));
  return doc;
}

// The RequestError parsing `doc` raises; a test failure (and an empty error) when none.
inline RequestError error_of(const json::value& doc, Mode mode = Mode::evaluate,
                             const Limits& limits = {}) {
  try {
    parse_request(doc, mode, limits);
  } catch (const RequestError& error) {
    return error;
  }
  ADD_FAILURE() << "expected a RequestError for " << json::serialize(doc).substr(0, 400);
  return RequestError("<none>", "<none>");
}

inline RequestError error_of_text(std::string_view text, Mode mode = Mode::evaluate,
                                  const Limits& limits = {}) {
  try {
    parse_request_text(text, mode, limits);
  } catch (const RequestError& error) {
    return error;
  }
  ADD_FAILURE() << "expected a RequestError for " << text.substr(0, 400);
  return RequestError("<none>", "<none>");
}

inline std::string encode_base64(std::span<const uint8_t> bytes) {
  constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string text;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t group = uint32_t{bytes[i]} << 16;
    if (i + 1 < bytes.size())
      group |= uint32_t{bytes[i + 1]} << 8;
    if (i + 2 < bytes.size())
      group |= bytes[i + 2];
    text += kAlphabet[(group >> 18) & 63];
    text += kAlphabet[(group >> 12) & 63];
    text += i + 1 < bytes.size() ? kAlphabet[(group >> 6) & 63] : '=';
    text += i + 2 < bytes.size() ? kAlphabet[group & 63] : '=';
  }
  return text;
}

// zlib's compress(), the C counterpart of Python's zlib.compress.
inline std::vector<uint8_t> zlib_compress(std::span<const uint8_t> bytes) {
  uLongf size = compressBound(bytes.size());
  std::vector<uint8_t> compressed(size);
  if (compress2(compressed.data(), &size, bytes.data(), bytes.size(), Z_BEST_COMPRESSION) != Z_OK)
    throw std::runtime_error("compress2 failed");
  compressed.resize(size);
  return compressed;
}

// `count` float32 values 0, 1, 2, ... as little-endian bytes (the test hosts are x86/ARM LE).
inline std::vector<uint8_t> float_ramp_bytes(size_t count) {
  std::vector<uint8_t> bytes(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) {
    float value = static_cast<float>(i);
    std::memcpy(bytes.data() + i * sizeof(float), &value, sizeof(float));
  }
  return bytes;
}

} // namespace keval::request::test
