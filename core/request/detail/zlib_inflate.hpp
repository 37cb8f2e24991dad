// zlib inflation for TensorData (compress: "zlib") with a hard cap on the output size.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace keval::request::detail {

// Inflates one zlib stream (RFC 1950, what Python's zlib.compress writes) into at most
// `max_output` bytes. It stops as soon as the output passes the cap, so a small input that
// expands enormously (a zlib bomb) costs at most `max_output` bytes of memory and the time to
// produce them. Throws std::runtime_error describing the failure ("inflates to more than 4096
// bytes", "is corrupt: incorrect header check", "is truncated", ...).
std::vector<uint8_t> inflate_zlib(std::span<const uint8_t> input, uint64_t max_output);

// The most a deflate stream expands: a 258-byte match coded in 2 bits.
constexpr uint64_t kMaxDeflateRatio = 1032;

// Checks, without inflating it whole, a zlib stream that must inflate to exactly `expected`
// bytes: the input can produce that many (at most kMaxDeflateRatio per byte), and its first
// `probe_bytes` of output inflate cleanly (header, dictionary, corrupt blocks), through a fixed
// buffer. A stream that ends within the probe must end at `expected` with no trailing bytes.
// Memory: zlib's state and 64 KiB, whatever `expected` is. Throws std::runtime_error worded as
// inflate_zlib's.
void check_zlib_prefix(std::span<const uint8_t> input, uint64_t expected, uint64_t probe_bytes);

} // namespace keval::request::detail
