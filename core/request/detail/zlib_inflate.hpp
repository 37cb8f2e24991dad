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

} // namespace keval::request::detail
