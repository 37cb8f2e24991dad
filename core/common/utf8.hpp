// What a kernel prints is bytes, not text; responses are JSON, which must be UTF-8.
#pragma once

#include <string>
#include <string_view>

namespace keval {

// `bytes` with every byte that is not part of a well-formed UTF-8 sequence replaced by U+FFFD,
// so that a kernel printing binary (or a forged protocol frame) cannot make a response invalid.
std::string valid_utf8(std::string_view bytes);

} // namespace keval
