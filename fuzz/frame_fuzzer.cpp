// Fuzz target: the host <-> worker framing. The input is what a peer writes on the channel; the
// first byte picks how it arrives (chunk size) and which frame cap applies. Checked:
// - FrameDecoder throws nothing but ProtocolError, and what it decodes does not depend on how
//   the bytes were split (one feed, or many small ones);
// - every decoded message re-encodes (encode_frame) into a frame that decodes to the same message;
// - BlockingChannel, reading the same bytes from a socketpair, yields the same messages and then
//   fails with ProtocolError (garbage, or the peer closing), never anything else.
#include "protocol/blocking_channel.hpp"
#include "protocol/frame.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <vector>

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <sys/socket.h>
#include <unistd.h>

namespace {

using keval::protocol::FrameDecoder;
using keval::protocol::ProtocolError;

[[noreturn]] void fail(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "frame_fuzzer: %s %s\n", what, detail.c_str());
  std::abort();
}

struct Decoded {
  std::vector<boost::json::object> messages;
  bool failed = false; // ProtocolError
};

// Feeds `bytes` in chunks of `chunk` bytes, taking messages out after each feed.
Decoded decode(std::string_view bytes, size_t chunk, size_t cap) {
  Decoded out;
  FrameDecoder decoder(cap);
  try {
    for (size_t at = 0; at < bytes.size(); at += chunk) {
      decoder.feed(bytes.substr(at, chunk));
      while (auto message = decoder.next())
        out.messages.push_back(std::move(*message));
    }
    if (bytes.empty())
      while (auto message = decoder.next())
        out.messages.push_back(std::move(*message));
  } catch (const ProtocolError&) {
    out.failed = true;
  }
  return out;
}

// Equality of decoded messages, where two doubles are equal within a few units in the last place.
// Why not exact: Boost.JSON (1.81) serializes a double as its shortest round-trip form but parses
// numbers with a fast algorithm that may land one ulp away ("6E68" parses to 5.999999999999999E68,
// which parses to a neighbour again), so a decoded double can move by an ulp per hop. The
// protocol's doubles are timings and statistics: an ulp is far below anything they mean.
bool same_value(const boost::json::value& a, const boost::json::value& b) {
  if (a.is_double() && b.is_double()) {
    const double x = a.get_double();
    const double y = b.get_double();
    if (x == y || (std::isnan(x) && std::isnan(y)))
      return true;
    const double scale = std::fmax(std::fabs(x), std::fabs(y));
    return std::fabs(x - y) <= scale * 8 * std::numeric_limits<double>::epsilon();
  }
  if (a.kind() != b.kind())
    return a == b; // int64 vs uint64 of one value compare equal in Boost.JSON
  if (a.is_object()) {
    const auto& x = a.get_object();
    const auto& y = b.get_object();
    if (x.size() != y.size())
      return false;
    for (const auto& [key, value] : x) {
      const auto* other = y.if_contains(key);
      if (other == nullptr || !same_value(value, *other))
        return false;
    }
    return true;
  }
  if (a.is_array()) {
    const auto& x = a.get_array();
    const auto& y = b.get_array();
    if (x.size() != y.size())
      return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!same_value(x[i], y[i]))
        return false;
    return true;
  }
  return a == b;
}

void check_round_trip(const boost::json::object& message, size_t cap) {
  std::string frame;
  try {
    frame = keval::protocol::encode_frame(message, cap);
  } catch (const ProtocolError&) {
    // Serialization may be longer than the text it came from (escapes, number forms): a
    // message decoded under the cap may re-encode over it. Not an error of the decoder.
    return;
  }
  FrameDecoder decoder(cap);
  decoder.feed(frame);
  std::optional<boost::json::object> again;
  try {
    again = decoder.next();
  } catch (const ProtocolError& e) {
    fail("an encoded frame does not decode:", e.what());
  }
  if (!again || !same_value(boost::json::value(*again), boost::json::value(message)) ||
      decoder.pending_bytes() != 0)
    fail("round trip changed the message:", boost::json::serialize(message));
}

// The same bytes through BlockingChannel::receive over a socketpair.
void check_channel(std::string_view bytes, size_t cap, const Decoded& expected) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    fail("socketpair failed");
  // Inputs are far below the socket's buffer (-max_len), so one writer pass never blocks.
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fds[1], bytes.data() + written, bytes.size() - written);
    if (n <= 0)
      fail("writing the input to the socketpair failed");
    written += static_cast<size_t>(n);
  }
  ::close(fds[1]);
  keval::protocol::BlockingChannel channel(fds[0], "fuzzer", cap);
  size_t received = 0;
  try {
    for (;;) {
      const auto message = channel.receive();
      if (received >= expected.messages.size() ||
          boost::json::value(message) != boost::json::value(expected.messages[received]))
        fail("BlockingChannel decoded differently from FrameDecoder:",
             boost::json::serialize(message));
      ++received;
    }
  } catch (const ProtocolError&) {
  }
  if (received != expected.messages.size())
    fail("BlockingChannel decoded fewer messages than FrameDecoder");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0)
    return 0;
  const uint8_t control = data[0];
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t chunk = (control & 0x3f) + 1;
  // A small cap makes the fuzzer meet "exceeds the cap" often; the default one is the real one.
  const size_t cap = (control & 0x40) != 0 ? size_t{512} : keval::protocol::kDefaultMaxFrameBytes;

  const Decoded whole = decode(bytes, bytes.empty() ? 1 : bytes.size(), cap);
  const Decoded split = decode(bytes, chunk, cap);
  if (whole.failed != split.failed || whole.messages.size() != split.messages.size())
    fail("decoding depends on how the bytes were split");
  for (size_t i = 0; i < whole.messages.size(); ++i) {
    if (boost::json::value(whole.messages[i]) != boost::json::value(split.messages[i]))
      fail("decoding depends on how the bytes were split");
    check_round_trip(whole.messages[i], cap);
  }
  if ((control & 0x80) != 0)
    check_channel(bytes, cap, whole);
  return 0;
}
