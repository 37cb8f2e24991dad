#include <cmath>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

#include "core/tensor/all_dtypes.hpp"

#include "tensor/dtype.hpp"

namespace keval::tensor {
namespace {

using test::kAllDTypes;

float float_from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

TEST(DLDType, RoundTripsEveryDType) {
  for (DType dtype : kAllDTypes) {
    const keval_dl_dtype dl = to_dl(dtype);
    EXPECT_EQ(dl.lanes, 1);
    EXPECT_EQ(dl.bits, request::dtype_size(dtype) * 8) << request::dtype_name(dtype);
    EXPECT_EQ(from_dl(dl), dtype) << request::dtype_name(dtype);
  }
}

TEST(DLDType, MatchesDLPackCodes) {
  EXPECT_EQ(to_dl(DType::boolean).code, KEVAL_DTYPE_BOOL);
  EXPECT_EQ(to_dl(DType::boolean).bits, 8);
  EXPECT_EQ(to_dl(DType::bf16).code, KEVAL_DTYPE_BFLOAT);
  EXPECT_EQ(to_dl(DType::u8).code, KEVAL_DTYPE_UINT);
  EXPECT_EQ(to_dl(DType::i16).code, KEVAL_DTYPE_INT);
  EXPECT_EQ(to_dl(DType::f16).code, KEVAL_DTYPE_FLOAT);
}

TEST(DLDType, RejectsWhatKevalDoesNotHandle) {
  EXPECT_FALSE(from_dl({KEVAL_DTYPE_FLOAT, 8, 1}));   // float8
  EXPECT_FALSE(from_dl({KEVAL_DTYPE_FLOAT, 32, 4}));  // vector lanes
  EXPECT_FALSE(from_dl({5, 64, 1}));                  // complex
  EXPECT_FALSE(from_dl({KEVAL_DTYPE_UINT, 32, 1}));   // uint32
  EXPECT_FALSE(from_dl({KEVAL_DTYPE_BFLOAT, 32, 1})); // no such thing
}

TEST(Half, KnownBitPatterns) {
  EXPECT_EQ(float_to_half(1.0f), 0x3C00);
  EXPECT_EQ(float_to_half(-2.5f), 0xC100);
  EXPECT_EQ(float_to_half(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_half(0x1p-24f), 0x0001); // smallest subnormal
  EXPECT_EQ(float_to_half(0x1p-14f), 0x0400); // smallest normal
  EXPECT_EQ(float_to_half(0.0f), 0x0000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(INFINITY), 0x7C00);
  EXPECT_EQ(float_to_half(-INFINITY), 0xFC00);
  EXPECT_EQ(float_to_half(1e-10f), 0x0000); // underflow
}

TEST(Half, RoundsToNearestEven) {
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f), 0x3C00);            // tie, 0x3C00 is even
  EXPECT_EQ(float_to_half(1.0f + 3 * 0x1p-11f), 0x3C02);        // tie, 0x3C02 is even
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01); // above the tie
  EXPECT_EQ(float_to_half(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00);     // the tie above 65504 goes to Inf
  EXPECT_EQ(float_to_half(0x1p-25f), 0x0000);     // tie between 0 and the smallest subnormal
  EXPECT_EQ(float_to_half(3 * 0x1p-25f), 0x0002); // tie between subnormals 1 and 2
  EXPECT_EQ(float_to_half(0x1p-25f + 0x1p-35f), 0x0001);
  EXPECT_EQ(float_to_half(0x1p-14f - 0x1p-25f), 0x0400); // rounds up into the normals
}

TEST(Half, NaNStaysNaN) {
  const uint16_t half = float_to_half(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(half & 0x7C00, 0x7C00);
  EXPECT_NE(half & 0x03FF, 0);
  // A signalling NaN whose payload sits only in the low bits must not become Inf.
  const uint16_t low_payload = float_to_half(float_from_bits(0x7F800001));
  EXPECT_NE(low_payload & 0x03FF, 0);
  EXPECT_TRUE(std::isnan(half_to_float(0x7E00)));
  EXPECT_TRUE(std::isnan(half_to_float(0xFC01)));
}

TEST(Half, DecodesKnownBitPatterns) {
  EXPECT_EQ(half_to_float(0x3C00), 1.0f);
  EXPECT_EQ(half_to_float(0xC100), -2.5f);
  EXPECT_EQ(half_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(half_to_float(0x03FF), 1023 * 0x1p-24f);
  EXPECT_EQ(half_to_float(0x7C00), INFINITY);
  EXPECT_EQ(half_to_float(0xFC00), -INFINITY);
  EXPECT_EQ(bits_of(half_to_float(0x8000)), 0x80000000u);
}

TEST(Half, EveryBitPatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto half = static_cast<uint16_t>(bits);
    const float value = half_to_float(half);
    if (std::isnan(value))
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(value)))) << std::hex << bits;
    else
      EXPECT_EQ(float_to_half(value), half) << std::hex << bits;
  }
}

TEST(BFloat16, KnownBitPatterns) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bfloat16(-2.5f), 0xC020);
  EXPECT_EQ(float_to_bfloat16(65504.0f), 0x4780); // 65504 is not a bfloat16: rounds to 65536
  EXPECT_EQ(float_to_bfloat16(float_from_bits(0x00010000)), 0x0001); // smallest subnormal
  EXPECT_EQ(float_to_bfloat16(INFINITY), 0x7F80);
  EXPECT_EQ(float_to_bfloat16(-INFINITY), 0xFF80);
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7F80); // overflow
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bfloat16(float_from_bits(0x3F808000)), 0x3F80); // tie to even
  EXPECT_EQ(float_to_bfloat16(float_from_bits(0x3F818000)), 0x3F82); // tie to even
  EXPECT_EQ(float_to_bfloat16(float_from_bits(0x3F808001)), 0x3F81); // above the tie
  EXPECT_EQ(float_to_bfloat16(float_from_bits(0x3F807FFF)), 0x3F80); // below the tie
}

TEST(BFloat16, NaNStaysNaN) {
  // Plain truncation of 0x7F800001 would give 0x7F80, which is Inf.
  const uint16_t bits = float_to_bfloat16(float_from_bits(0x7F800001));
  EXPECT_EQ(bits & 0x7F80, 0x7F80);
  EXPECT_NE(bits & 0x007F, 0);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(0x7FC0)));
  EXPECT_EQ(bfloat16_to_float(0xC020), -2.5f);
  EXPECT_EQ(bfloat16_to_float(0x0001), float_from_bits(0x00010000));
}

TEST(Element, WritesLikeTorchCasts) {
  unsigned char element[8];
  const auto written = [&](DType dtype, double value) {
    write_element(dtype, element, value);
    return read_element(dtype, element);
  };
  EXPECT_EQ(written(DType::i32, 2.7), 2.0); // truncates toward zero
  EXPECT_EQ(written(DType::i32, -2.7), -2.0);
  EXPECT_EQ(written(DType::i8, 300.0), 127.0); // saturates
  EXPECT_EQ(written(DType::i8, -300.0), -128.0);
  EXPECT_EQ(written(DType::u8, -1.0), 0.0);
  EXPECT_EQ(written(DType::u8, 255.9), 255.0);
  EXPECT_EQ(written(DType::i64, 1e30), 9223372036854775807.0);
  EXPECT_EQ(written(DType::i16, NAN), 0.0);
  EXPECT_EQ(written(DType::boolean, 0.0), 0.0);
  EXPECT_EQ(written(DType::boolean, 0.25), 1.0);
  EXPECT_EQ(written(DType::boolean, -3.0), 1.0);
  EXPECT_EQ(written(DType::f16, 65520.0), INFINITY);
  EXPECT_EQ(written(DType::bf16, -2.5), -2.5);
  EXPECT_EQ(written(DType::f32, 0.1), static_cast<double>(0.1f));
  EXPECT_EQ(written(DType::f64, 0.1), 0.1);
  EXPECT_TRUE(std::isnan(written(DType::f32, NAN)));

  write_element(DType::i64, element, 0x1p62);
  int64_t stored;
  std::memcpy(&stored, element, sizeof stored);
  EXPECT_EQ(stored, int64_t{1} << 62);
}

TEST(Element, BoolReadsItsRawByte) {
  const unsigned char poisoned = 0xA5;
  EXPECT_EQ(read_element(DType::boolean, &poisoned), 165.0);
}

TEST(Element, ClassifiesDTypes) {
  EXPECT_TRUE(is_floating(DType::bf16));
  EXPECT_TRUE(is_floating(DType::f64));
  EXPECT_FALSE(is_floating(DType::u8));
  EXPECT_TRUE(is_integral(DType::boolean));
  EXPECT_TRUE(is_integral(DType::i64));
  EXPECT_FALSE(is_integral(DType::f16));
}

} // namespace
} // namespace keval::tensor
