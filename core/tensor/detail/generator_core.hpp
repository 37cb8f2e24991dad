// The counter-based generator behind TensorInit, shared with CUDA code (see host_device.hpp).
//
// Each element's value is a pure function of (seed, element index): Philox4x32-10 keyed by the
// 64-bit seed with the element index as its counter. Nothing depends on how many elements are
// generated, in which order or on how many threads, so a tensor's prefix never changes with its
// size and a device fill can reproduce a host fill. No STL and no libc beyond <math.h>.
#pragma once

#include "tensor/detail/host_device.hpp"

#if !defined(__CUDACC_RTC__)
#include <math.h>
#endif

namespace keval::tensor::detail {

using gen_u32 = unsigned int;
using gen_u64 = unsigned long long;
static_assert(sizeof(gen_u32) == 4 && sizeof(gen_u64) == 8);

// Exact IEEE products and sums: nvcc would otherwise contract a * b + c into an FMA on the
// device and the device values would drift from the host ones.
KEVAL_HD inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

KEVAL_HD inline double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

struct PhiloxBlock {
  gen_u32 word[4];
};

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), checked
// against Random123's known-answer vectors.
KEVAL_HD inline PhiloxBlock philox4x32_10(PhiloxBlock counter, gen_u32 key0, gen_u32 key1) {
  const gen_u64 kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
  const gen_u32 kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  gen_u32* c = counter.word;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    const gen_u64 product0 = kMultiplier0 * c[0];
    const gen_u64 product1 = kMultiplier1 * c[2];
    const gen_u32 next[4] = {
        static_cast<gen_u32>(product1 >> 32) ^ c[1] ^ key0, static_cast<gen_u32>(product1),
        static_cast<gen_u32>(product0 >> 32) ^ c[3] ^ key1, static_cast<gen_u32>(product0)};
    for (int i = 0; i < 4; ++i)
      c[i] = next[i];
  }
  return counter;
}

// The 128 random bits of one element.
KEVAL_HD inline PhiloxBlock element_bits(gen_u64 seed, gen_u64 index) {
  const PhiloxBlock counter = {
      {static_cast<gen_u32>(index), static_cast<gen_u32>(index >> 32), 0u, 0u}};
  return philox4x32_10(counter, static_cast<gen_u32>(seed), static_cast<gen_u32>(seed >> 32));
}

// [0, 1) with 53 random bits taken from the top of (high:low).
KEVAL_HD inline double unit_double(gen_u32 high, gen_u32 low) {
  const gen_u64 bits = ((static_cast<gen_u64>(high) << 32) | low) >> 11;
  return static_cast<double>(bits) * 0x1p-53;
}

// Uniform in [0, 1) from the top 24 bits of the element's first word: every value is exact in
// float.
KEVAL_HD inline float uniform_float(gen_u64 seed, gen_u64 index) {
  return static_cast<float>(element_bits(seed, index).word[0] >> 8) * 0x1p-24f;
}

// Uniform in [0, 1) from 53 bits of the element's first two words.
KEVAL_HD inline double uniform_double(gen_u64 seed, gen_u64 index) {
  const PhiloxBlock bits = element_bits(seed, index);
  return unit_double(bits.word[0], bits.word[1]);
}

// Standard normal by Box-Muller. Only the cosine branch is used so that the element's value
// needs nothing but its own counter.
KEVAL_HD inline double standard_normal(gen_u64 seed, gen_u64 index) {
  const PhiloxBlock bits = element_bits(seed, index);
  const double radius_uniform = 1.0 - unit_double(bits.word[0], bits.word[1]); // (0, 1]: log ok
  const double angle_uniform = unit_double(bits.word[2], bits.word[3]);
  const double two_pi = 6.283185307179586476925286766559;
  return sqrt(-2.0 * log(radius_uniform)) * cos(mul_rn(two_pi, angle_uniform));
}

// Value of element `index` for kind uniform on a floating dtype, before rounding to the dtype.
// Half, bfloat16 and float tensors draw 24 bits (single_precision), double tensors 53.
KEVAL_HD inline double uniform_value(gen_u64 seed, gen_u64 index, double low, double high,
                                     bool single_precision) {
  const double unit = single_precision ? static_cast<double>(uniform_float(seed, index))
                                       : uniform_double(seed, index);
  return add_rn(low, mul_rn(unit, high - low));
}

// Value of element `index` for kind uniform on an integer or bool dtype: floor into [low, high).
KEVAL_HD inline double uniform_integer_value(gen_u64 seed, gen_u64 index, double low, double high) {
  const double value = floor(uniform_value(seed, index, low, high, false));
  // low + u * (high - low) can round up to an integral high; the largest integer below it is
  // the value the exact arithmetic would have given.
  return (value >= high && low < high) ? ceil(high) - 1.0 : value;
}

KEVAL_HD inline double normal_value(gen_u64 seed, gen_u64 index, double mean, double std) {
  return add_rn(mean, mul_rn(std, standard_normal(seed, index)));
}

// Integer dtypes round the normal value to nearest, ties to even.
KEVAL_HD inline double normal_integer_value(gen_u64 seed, gen_u64 index, double mean, double std) {
  return rint(normal_value(seed, index, mean, std));
}

KEVAL_HD inline double arange_value(gen_u64 index, double start, double step) {
  return add_rn(start, mul_rn(static_cast<double>(index), step));
}

// SplitMix64's finaliser (Steele et al., OOPSLA'14): a bijective 64-bit mixer with full
// avalanche, used to derive independent seeds from (seed, trial) and (job seed, argument).
KEVAL_HD inline gen_u64 mix64(gen_u64 value) {
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

// SplitMix64's increment (the golden ratio in 64 bits).
inline constexpr gen_u64 kGoldenGamma = 0x9E3779B97F4A7C15ull;

} // namespace keval::tensor::detail
