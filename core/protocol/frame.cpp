#include "protocol/frame.hpp"

#include "common/json_numbers.hpp"

#include <cstring>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace keval::protocol {

namespace {

std::string printable_prefix(std::string_view bytes) {
  std::string out;
  for (char c : bytes.substr(0, 16))
    out += (c >= 0x20 && c < 0x7f) ? c : '.';
  return out;
}

} // namespace

std::string encode_frame(boost::json::object message, size_t max_bytes) {
  if (!message.contains("v"))
    message["v"] = kProtocolVersion;
  if (const auto at = non_finite_number_at(message))
    throw ProtocolError("message holds a number JSON cannot carry (inf or NaN) at " + *at);
  std::string payload = boost::json::serialize(message);
  if (payload.size() > max_bytes)
    throw ProtocolError("frame of " + std::to_string(payload.size()) + " bytes exceeds the " +
                        std::to_string(max_bytes) + "-byte cap");
  std::string frame(kHeaderBytes, '\0');
  std::memcpy(frame.data(), kMagic, 4);
  const auto n = static_cast<uint32_t>(payload.size());
  frame[4] = static_cast<char>((n >> 24) & 0xff);
  frame[5] = static_cast<char>((n >> 16) & 0xff);
  frame[6] = static_cast<char>((n >> 8) & 0xff);
  frame[7] = static_cast<char>(n & 0xff);
  frame += payload;
  return frame;
}

std::optional<boost::json::object> FrameDecoder::next() {
  std::string_view pending(buffer_.data() + consumed_, buffer_.size() - consumed_);
  // Check the magic as soon as its bytes arrive, so garbage fails fast.
  const size_t magic_bytes = std::min<size_t>(pending.size(), 4);
  if (std::memcmp(pending.data(), kMagic, magic_bytes) != 0)
    throw ProtocolError("bad frame magic (got \"" + printable_prefix(pending) + "\")");
  if (pending.size() < kHeaderBytes)
    return std::nullopt;
  const auto* h = reinterpret_cast<const unsigned char*>(pending.data());
  const size_t length = (size_t{h[4]} << 24) | (size_t{h[5]} << 16) | (size_t{h[6]} << 8) | h[7];
  if (length > max_frame_bytes_)
    throw ProtocolError("frame of " + std::to_string(length) + " bytes exceeds the " +
                        std::to_string(max_frame_bytes_) + "-byte cap");
  if (pending.size() < kHeaderBytes + length)
    return std::nullopt;

  const std::string_view payload = pending.substr(kHeaderBytes, length);
  boost::json::error_code ec;
  boost::json::parse_options options;
  options.max_depth = 64;
  boost::json::value value = boost::json::parse(payload, ec, {}, options);
  // Only now, with the payload parsed, may the buffer it points into move: compact once the
  // consumed prefix dominates, keeping appends amortised O(1).
  consumed_ += kHeaderBytes + length;
  if (consumed_ > 4096 && consumed_ * 2 > buffer_.size()) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  if (ec)
    throw ProtocolError("frame is not valid JSON: " + ec.message());
  if (!value.is_object())
    throw ProtocolError("frame is not a JSON object");
  if (const auto at = non_finite_number_at(value))
    throw ProtocolError("frame holds a number beyond a double's range at " + *at);
  auto& object = value.as_object();
  const auto* version = object.if_contains("v");
  const bool version_ok =
      version != nullptr && ((version->is_int64() && version->get_int64() == kProtocolVersion) ||
                             (version->is_uint64() && version->get_uint64() == kProtocolVersion));
  if (!version_ok)
    throw ProtocolError("frame has protocol version " +
                        (version ? boost::json::serialize(*version) : std::string("(none)")) +
                        ", expected " + std::to_string(kProtocolVersion));
  const auto* type = object.if_contains("type");
  if (type == nullptr || !type->is_string())
    throw ProtocolError("frame has no string \"type\"");
  return std::move(object);
}

} // namespace keval::protocol
