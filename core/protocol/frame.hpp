// Frames between keval (host) and keval-worker: a fixed 8-byte header — the magic "KEV1" and a
// big-endian uint32 payload length — followed by one JSON object carrying "v" (the protocol
// version) and "type". Frames travel on a private socketpair, never on stdout/stderr, which
// belong to user code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

namespace keval::protocol {

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kHeaderBytes = 8;
inline constexpr char kMagic[4] = {'K', 'E', 'V', '1'};
// Frames carry summaries, never tensors; anything bigger is garbage or abuse.
inline constexpr size_t kDefaultMaxFrameBytes = 8u << 20;
// The one exception: the host's `job` frame carries the whole request, inline tensor data
// included, so it may be as large as the largest request body the host accepts (64 MiB by
// default; `keval serve --max-body-bytes` may not exceed kMaxRequestInJobFrame) plus the frame's
// own fields.
inline constexpr size_t kMaxJobFrameBytes = 272u << 20;
inline constexpr size_t kMaxRequestInJobFrame = 256u << 20;

// The peer sent something that is not a valid frame. The channel is unusable afterwards.
class ProtocolError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// Encodes one message; adds "v" when absent. Throws ProtocolError if it exceeds `max_bytes`.
std::string encode_frame(boost::json::object message, size_t max_bytes = kDefaultMaxFrameBytes);

// Incremental decoder: feed bytes as they arrive (any split), take complete messages out.
class FrameDecoder {
public:
  explicit FrameDecoder(size_t max_frame_bytes = kDefaultMaxFrameBytes)
      : max_frame_bytes_(max_frame_bytes) {}

  void feed(std::string_view bytes) { buffer_.append(bytes); }
  // The next complete message, or nullopt when more bytes are needed. Throws ProtocolError on a
  // bad magic, an oversized length, invalid JSON, a non-object, a missing "type" or a version
  // other than kProtocolVersion.
  std::optional<boost::json::object> next();
  // Bytes received but not yet consumed (a partial frame at end of stream is an error).
  size_t pending_bytes() const { return buffer_.size() - consumed_; }

private:
  size_t max_frame_bytes_;
  std::string buffer_;
  size_t consumed_ = 0;
};

} // namespace keval::protocol
