// The decoders behind TensorData: base64 and capped zlib inflation.
#include "core/request/request_test_util.hpp"
#include "request/detail/base64.hpp"
#include "request/detail/zlib_inflate.hpp"

#include <gmock/gmock.h>

namespace keval::request::detail {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

std::vector<uint8_t> bytes_of(std::string_view text) {
  return {text.begin(), text.end()};
}

TEST(Base64, Rfc4648Vectors) {
  EXPECT_EQ(decode_base64(""), bytes_of(""));
  EXPECT_EQ(decode_base64("Zg=="), bytes_of("f"));
  EXPECT_EQ(decode_base64("Zm8="), bytes_of("fo"));
  EXPECT_EQ(decode_base64("Zm9v"), bytes_of("foo"));
  EXPECT_EQ(decode_base64("Zm9vYg=="), bytes_of("foob"));
  EXPECT_EQ(decode_base64("Zm9vYmE="), bytes_of("fooba"));
  EXPECT_EQ(decode_base64("Zm9vYmFy"), bytes_of("foobar"));
}

TEST(Base64, AllByteValuesRoundTrip) {
  std::vector<uint8_t> bytes(256);
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(decode_base64(test::encode_base64(bytes)), bytes);
}

TEST(Base64, WhitespaceIsSkippedAndPaddingOptional) {
  EXPECT_EQ(decode_base64(" Zm9v\r\nYmE=\n"), bytes_of("fooba"));
  EXPECT_EQ(decode_base64("Zm9vYg"), bytes_of("foob"));
  EXPECT_EQ(decode_base64("Zm9vYmE"), bytes_of("fooba"));
}

TEST(Base64, InvalidInput) {
  EXPECT_THAT([] { decode_base64("Zm9v-mFy"); }, ThrowsMessage<std::invalid_argument>(HasSubstr(
                                                     "unexpected character '-' at offset 4")));
  EXPECT_THAT([] { decode_base64("Zm9v\x80"); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("unexpected byte 0x80 at offset 4")));
  EXPECT_THAT([] { decode_base64("Zg=a"); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("data after padding at offset 3")));
  EXPECT_THAT([] { decode_base64("Zg="); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("wrong amount of padding")));
  EXPECT_THAT([] { decode_base64("Zm9v="); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("wrong amount of padding")));
  EXPECT_THAT([] { decode_base64("Zm9vY"); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("truncated data")));
}

TEST(InflateZlib, RoundTripsAtExactlyTheCap) {
  std::vector<uint8_t> bytes = test::float_ramp_bytes(5000);
  EXPECT_EQ(inflate_zlib(test::zlib_compress(bytes), bytes.size()), bytes);
}

TEST(InflateZlib, StopsOneBytePastTheCap) {
  std::vector<uint8_t> compressed = test::zlib_compress(std::vector<uint8_t>(1000, 7));
  EXPECT_THAT([&] { inflate_zlib(compressed, 999); },
              ThrowsMessage<std::runtime_error>(HasSubstr("inflates to more than 999 bytes")));
}

TEST(InflateZlib, CorruptTruncatedAndTrailingInput) {
  std::vector<uint8_t> compressed = test::zlib_compress(test::float_ramp_bytes(100));
  EXPECT_THAT([] { inflate_zlib(bytes_of("not zlib"), 100); },
              ThrowsMessage<std::runtime_error>(HasSubstr("is corrupt: incorrect header check")));
  std::vector<uint8_t> truncated(compressed.begin(), compressed.end() - 4);
  EXPECT_THAT([&] { inflate_zlib(truncated, 400); },
              ThrowsMessage<std::runtime_error>(HasSubstr("is truncated")));
  std::vector<uint8_t> trailing = compressed;
  trailing.push_back(0);
  EXPECT_THAT([&] { inflate_zlib(trailing, 400); },
              ThrowsMessage<std::runtime_error>(HasSubstr("has 1 trailing bytes")));
  EXPECT_THAT([] { inflate_zlib({}, 400); },
              ThrowsMessage<std::runtime_error>(HasSubstr("is truncated")));
}

} // namespace
} // namespace keval::request::detail
