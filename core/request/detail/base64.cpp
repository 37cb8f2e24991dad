#include "request/detail/base64.hpp"

#include <array>
#include <stdexcept>
#include <string>

namespace keval::request::detail {

namespace {

constexpr int8_t kInvalid = -1;
constexpr int8_t kSkip = -2; // whitespace
constexpr int8_t kPad = -3;  // '='

constexpr std::array<int8_t, 256> make_sextet_table() {
  std::array<int8_t, 256> table{};
  table.fill(kInvalid);
  constexpr std::string_view alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (size_t i = 0; i < alphabet.size(); ++i)
    table[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
  for (char space : {' ', '\t', '\n', '\r', '\f', '\v'})
    table[static_cast<uint8_t>(space)] = kSkip;
  table[static_cast<uint8_t>('=')] = kPad;
  return table;
}

constexpr std::array<int8_t, 256> kSextet = make_sextet_table();

[[noreturn]] void fail(const std::string& what, size_t offset) {
  throw std::invalid_argument("invalid base64: " + what + " at offset " + std::to_string(offset));
}

// "'!'" for printable characters, "byte 0x80" for the rest (they may not be printable text).
std::string describe_character(char c) {
  auto byte = static_cast<uint8_t>(c);
  if (byte >= 0x20 && byte < 0x7f)
    return std::string("character '") + c + "'";
  constexpr char kHex[] = "0123456789abcdef";
  return std::string("byte 0x") + kHex[byte >> 4] + kHex[byte & 0xf];
}

int8_t sextet_at(std::string_view text, size_t offset) {
  return kSextet[static_cast<uint8_t>(text[offset])];
}

// Checks the tail that starts at the first '=': padding and whitespace only, and exactly as
// much padding as the last group needs.
void check_padding(std::string_view text, size_t first_pad, size_t sextets) {
  size_t pads = 0;
  for (size_t i = first_pad; i < text.size(); ++i) {
    int8_t sextet = sextet_at(text, i);
    if (sextet == kPad)
      ++pads;
    else if (sextet != kSkip)
      fail("data after padding", i);
  }
  if ((sextets + pads) % 4 != 0 || pads > 2)
    fail("wrong amount of padding", first_pad);
}

} // namespace

std::vector<uint8_t> decode_base64(std::string_view text) {
  std::vector<uint8_t> bytes;
  bytes.reserve(text.size() / 4 * 3 + 3);
  uint32_t bits = 0;
  int pending_bits = 0;
  size_t sextets = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    int8_t sextet = sextet_at(text, i);
    if (sextet == kSkip)
      continue;
    if (sextet == kPad) {
      check_padding(text, i, sextets);
      break;
    }
    if (sextet == kInvalid)
      fail("unexpected " + describe_character(text[i]), i);
    bits = (bits << 6) | static_cast<uint32_t>(sextet);
    pending_bits += 6;
    ++sextets;
    if (pending_bits >= 8) {
      pending_bits -= 8;
      bytes.push_back(static_cast<uint8_t>(bits >> pending_bits));
      bits &= (1u << pending_bits) - 1;
    }
  }
  // One character of a group encodes only 6 bits: not even one byte.
  if (sextets % 4 == 1)
    fail("truncated data", text.size());
  return bytes;
}

} // namespace keval::request::detail
