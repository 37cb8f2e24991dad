// Base64 decoding for TensorData.data_b64 (written here: Boost has no public decoder).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace keval::request::detail {

// Decodes standard base64 (RFC 4648, "+/" alphabet). Whitespace is skipped and padding may be
// left out, as Python's base64.b64decode allows; any other character outside the alphabet is
// an error. Throws std::invalid_argument naming the offending offset.
std::vector<uint8_t> decode_base64(std::string_view text);

} // namespace keval::request::detail
