// IEEE binary16 (half) and bfloat16 <-> float conversions with round-to-nearest-even, written
// without the standard library so a CUDA generator can produce the very same bits.
#pragma once

#include "tensor/detail/host_device.hpp"

namespace keval::tensor::detail {

using f16_u16 = unsigned short;
using f16_u32 = unsigned int;
static_assert(sizeof(f16_u16) == 2 && sizeof(f16_u32) == 4);

KEVAL_HD inline f16_u32 float_to_bits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  f16_u32 bits;
  __builtin_memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

KEVAL_HD inline float bits_to_float(f16_u32 bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  __builtin_memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

// Rounds `value` down to `shift` fewer bits, ties to even.
KEVAL_HD inline f16_u32 shift_right_round_even(f16_u32 value, f16_u32 shift) {
  const f16_u32 kept = value >> shift;
  const f16_u32 rest = value & ((1u << shift) - 1u);
  const f16_u32 halfway = 1u << (shift - 1u);
  return kept + ((rest > halfway || (rest == halfway && (kept & 1u))) ? 1u : 0u);
}

KEVAL_HD inline f16_u16 float_to_half_bits(float value) {
  const f16_u32 bits = float_to_bits(value);
  const f16_u32 sign = (bits >> 16) & 0x8000u;
  const f16_u32 magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) // NaN: stays quiet, keeps the top of its payload
    return static_cast<f16_u16>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  if (magnitude >= 0x477FF000u) // 65520 and above (Inf included) round to Inf
    return static_cast<f16_u16>(sign | 0x7C00u);
  if (magnitude >= 0x38800000u) { // normal half: rebias the exponent from 127 to 15
    return static_cast<f16_u16>(sign | shift_right_round_even(magnitude - 0x38000000u, 13u));
  }
  if (magnitude <= 0x33000000u) // at most 2^-25, half of the smallest subnormal: ties to 0
    return static_cast<f16_u16>(sign);
  // Subnormal half: the result counts units of 2^-24. A carry into 0x400 is the smallest
  // normal half, which is the right encoding.
  const f16_u32 exponent = magnitude >> 23;
  const f16_u32 significand = (magnitude & 0x7FFFFFu) | 0x800000u;
  return static_cast<f16_u16>(sign | shift_right_round_even(significand, 126u - exponent));
}

KEVAL_HD inline float half_bits_to_float(f16_u16 half) {
  const f16_u32 sign = (static_cast<f16_u32>(half) & 0x8000u) << 16;
  const f16_u32 exponent = (half >> 10) & 0x1Fu;
  f16_u32 mantissa = half & 0x3FFu;
  if (exponent == 0x1Fu) // Inf or NaN, payload kept
    return bits_to_float(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0)
    return bits_to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0)
    return bits_to_float(sign);
  // Subnormal half: normalise, every half subnormal is a normal float.
  f16_u32 float_exponent = 113u;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --float_exponent;
  }
  return bits_to_float(sign | (float_exponent << 23) | ((mantissa & 0x3FFu) << 13));
}

KEVAL_HD inline f16_u16 float_to_bfloat16_bits(float value) {
  const f16_u32 bits = float_to_bits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) // NaN: truncating could clear the payload, force quiet
    return static_cast<f16_u16>((bits >> 16) | 0x0040u);
  // bfloat16 is the top half of a float: round the dropped 16 bits to nearest even. Overflow
  // carries into the exponent and yields Inf, as it should.
  const f16_u32 rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<f16_u16>((bits + rounding_bias) >> 16);
}

KEVAL_HD inline float bfloat16_bits_to_float(f16_u16 bfloat) {
  return bits_to_float(static_cast<f16_u32>(bfloat) << 16);
}

} // namespace keval::tensor::detail
