#include "request/detail/zlib_inflate.hpp"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

#include <zlib.h>

namespace keval::request::detail {

namespace {

constexpr uint64_t kFirstChunkBytes = 64 * 1024;

// Owns an inflate stream so every exit path releases zlib's state.
class InflateStream {
public:
  InflateStream() {
    if (inflateInit(&stream_) != Z_OK)
      throw std::runtime_error("cannot start zlib inflation");
  }
  ~InflateStream() { inflateEnd(&stream_); }
  InflateStream(const InflateStream&) = delete;
  InflateStream& operator=(const InflateStream&) = delete;

  z_stream* operator->() { return &stream_; }
  z_stream* get() { return &stream_; }

private:
  z_stream stream_{};
};

std::string zlib_message(const z_stream& stream, const char* fallback) {
  return stream.msg != nullptr ? stream.msg : fallback;
}

// Where the output buffer goes next: doubling keeps memory within twice the real output even
// when the declared size is huge and the stream tiny. `cap` is max_output + 1, the first size
// that proves the cap was passed.
uint64_t next_capacity(uint64_t current, uint64_t input_bytes, uint64_t cap) {
  uint64_t wanted = current == 0 ? std::max(kFirstChunkBytes, input_bytes * 4) : current * 2;
  return std::min(wanted, cap);
}

// zlib's verdict on one inflate() call that did not end the stream; throws on failure.
void check_inflate_result(int rc, z_stream& stream, bool input_exhausted) {
  if (rc == Z_NEED_DICT)
    throw std::runtime_error("needs a preset dictionary, which is not supported");
  if (rc == Z_DATA_ERROR)
    throw std::runtime_error("is corrupt: " + zlib_message(stream, "invalid data"));
  if (rc != Z_OK && rc != Z_BUF_ERROR)
    throw std::runtime_error("cannot be inflated: " + zlib_message(stream, "zlib error"));
  // Z_BUF_ERROR with output room left means zlib wants input that does not exist.
  if (rc == Z_BUF_ERROR && stream.avail_out > 0 && input_exhausted)
    throw std::runtime_error("is truncated");
}

} // namespace

void check_zlib_prefix(std::span<const uint8_t> input, uint64_t expected, uint64_t probe_bytes) {
  uint64_t most = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(input.size()), kMaxDeflateRatio, &most))
    most = UINT64_MAX;
  if (expected > most)
    throw std::runtime_error("is " + std::to_string(input.size()) +
                             " bytes, too few to inflate to " + std::to_string(expected) +
                             " bytes (deflate expands at most " + std::to_string(kMaxDeflateRatio) +
                             " times)");
  InflateStream stream;
  std::vector<uint8_t> scratch(kFirstChunkBytes);
  size_t consumed = 0;
  uint64_t produced = 0;
  while (produced < probe_bytes) {
    if (stream->avail_in == 0) {
      const size_t feed = std::min<size_t>(input.size() - consumed, UINT_MAX);
      stream->next_in = const_cast<Bytef*>(input.data() + consumed);
      stream->avail_in = static_cast<uInt>(feed);
      consumed += feed;
    }
    const auto room = static_cast<uInt>(scratch.size());
    stream->next_out = scratch.data();
    stream->avail_out = room;
    const int rc = inflate(stream.get(), Z_NO_FLUSH);
    produced += room - stream->avail_out;
    if (produced > expected)
      throw std::runtime_error("inflates to more than " + std::to_string(expected) + " bytes");
    if (rc == Z_STREAM_END) {
      if (produced < expected)
        throw std::runtime_error("inflates to only " + std::to_string(produced) + " bytes");
      const size_t trailing = stream->avail_in + (input.size() - consumed);
      if (trailing > 0)
        throw std::runtime_error("has " + std::to_string(trailing) +
                                 " trailing bytes after the end of the zlib stream");
      return;
    }
    check_inflate_result(rc, *stream.get(), stream->avail_in == 0 && consumed == input.size());
  }
}

std::vector<uint8_t> inflate_zlib(std::span<const uint8_t> input, uint64_t max_output) {
  const uint64_t cap = max_output == UINT64_MAX ? max_output : max_output + 1;
  InflateStream stream;
  std::vector<uint8_t> output;
  size_t consumed = 0; // input bytes handed to zlib so far
  uint64_t produced = 0;
  for (;;) {
    if (produced == output.size())
      output.resize(next_capacity(output.size(), input.size(), cap));
    if (stream->avail_in == 0) {
      size_t feed = std::min<size_t>(input.size() - consumed, UINT_MAX);
      stream->next_in = const_cast<Bytef*>(input.data() + consumed);
      stream->avail_in = static_cast<uInt>(feed);
      consumed += feed;
    }
    uInt room = static_cast<uInt>(std::min<uint64_t>(output.size() - produced, UINT_MAX));
    stream->next_out = output.data() + produced;
    stream->avail_out = room;
    int rc = inflate(stream.get(), Z_NO_FLUSH);
    produced += room - stream->avail_out;
    if (produced > max_output)
      throw std::runtime_error("inflates to more than " + std::to_string(max_output) + " bytes");
    if (rc == Z_STREAM_END)
      break;
    check_inflate_result(rc, *stream.get(), stream->avail_in == 0 && consumed == input.size());
  }
  size_t trailing = stream->avail_in + (input.size() - consumed);
  if (trailing > 0)
    throw std::runtime_error("has " + std::to_string(trailing) +
                             " trailing bytes after the end of the zlib stream");
  output.resize(produced);
  return output;
}

} // namespace keval::request::detail
