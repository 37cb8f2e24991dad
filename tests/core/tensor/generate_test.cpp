#include <cmath>
#include <cstring>
#include <set>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "core/tensor/all_dtypes.hpp"

#include "tensor/detail/generator_core.hpp"
#include "tensor/dtype.hpp"
#include "tensor/generate.hpp"

namespace keval::tensor {
namespace {

using request::InitKind;
using request::TensorInit;

using test::kAllDTypes;
constexpr InitKind kAllKinds[] = {InitKind::randn, InitKind::uniform, InitKind::zeros,
                                  InitKind::ones,  InitKind::full,    InitKind::arange};

TensorInit make_init(InitKind kind) {
  TensorInit init;
  init.kind = kind;
  return init;
}

TensorInit randn(double mean, double std) {
  TensorInit init = make_init(InitKind::randn);
  init.mean = mean;
  init.std = std;
  return init;
}

TensorInit uniform(double low, double high) {
  TensorInit init = make_init(InitKind::uniform);
  init.low = low;
  init.high = high;
  return init;
}

HostTensor generated(DType dtype, std::vector<int64_t> shape, const TensorInit& init,
                     uint64_t seed) {
  HostTensor tensor = HostTensor::empty(dtype, std::move(shape));
  fill(tensor, init, seed);
  return tensor;
}

std::vector<double> values_of(const HostTensor& tensor) {
  std::vector<double> values;
  const auto* bytes = static_cast<const uint8_t*>(tensor.data());
  for (int64_t i = 0; i < tensor.numel(); ++i)
    values.push_back(read_element(tensor.dtype(), bytes + i * request::dtype_size(tensor.dtype())));
  return values;
}

uint64_t fnv1a(const HostTensor& tensor) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (uint8_t byte : tensor.bytes())
    hash = (hash ^ byte) * 0x100000001B3ull;
  return hash;
}

TEST(Philox, MatchesRandom123KnownAnswers) {
  using detail::PhiloxBlock;
  const auto run = [](PhiloxBlock counter, unsigned key0, unsigned key1) {
    const PhiloxBlock out = detail::philox4x32_10(counter, key0, key1);
    return std::vector<unsigned>(out.word, out.word + 4);
  };
  EXPECT_EQ(run({{0, 0, 0, 0}}, 0, 0),
            (std::vector<unsigned>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(run({{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff),
            (std::vector<unsigned>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(run({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0),
            (std::vector<unsigned>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Generate, SameSeedGivesSameBytesForEveryDTypeAndKind) {
  for (DType dtype : kAllDTypes)
    for (InitKind kind : kAllKinds) {
      TensorInit init = make_init(kind);
      init.low = -4.0;
      init.high = 4.0;
      init.fill_value = 2.5;
      init.start = -3.0;
      init.step = 0.5;
      const HostTensor first = generated(dtype, {7, 13}, init, 42);
      const HostTensor second = generated(dtype, {7, 13}, init, 42);
      EXPECT_TRUE(first.same_bytes(second))
          << request::dtype_name(dtype) << " " << request::init_kind_name(kind);
    }
}

TEST(Generate, DifferentSeedsGiveDifferentValues) {
  for (DType dtype : {DType::f32, DType::f16, DType::i32, DType::f64})
    for (const TensorInit& init : {randn(0, 1), uniform(-100, 100)})
      EXPECT_FALSE(generated(dtype, {256}, init, 1).same_bytes(generated(dtype, {256}, init, 2)))
          << request::dtype_name(dtype);
}

TEST(Generate, SeedOnlyMattersForRandomKinds) {
  TensorInit init = make_init(InitKind::arange);
  EXPECT_TRUE(
      generated(DType::f32, {64}, init, 1).same_bytes(generated(DType::f32, {64}, init, 2)));
}

TEST(Generate, ElementValueIsIndependentOfTensorSize) {
  for (DType dtype : kAllDTypes)
    for (const TensorInit& init : {randn(1, 3), uniform(-10, 10)}) {
      const std::vector<double> small = values_of(generated(dtype, {100}, init, 7));
      const std::vector<double> large = values_of(generated(dtype, {10, 100}, init, 7));
      for (size_t i = 0; i < small.size(); ++i)
        ASSERT_EQ(small[i], large[i]) << request::dtype_name(dtype) << " element " << i;
    }
}

// Locks the generator: a change here changes every seeded input every client has ever used.
// The leading values were checked against an independent Python Philox implementation.
TEST(Generate, ValuesAreStableAcrossVersions) {
  EXPECT_EQ(values_of(generated(DType::f32, {4}, uniform(-0.5, 0.5), 123)),
            (std::vector<double>{-0.43305230140686035, 0.1396496295928955, -0.3277076482772827,
                                 -0.3812434673309326}));
  EXPECT_EQ(values_of(generated(DType::i64, {4}, uniform(-1000, 1000), 123)),
            (std::vector<double>{-867, 279, -656, -763}));
  EXPECT_EQ(fnv1a(generated(DType::f32, {1000}, uniform(-0.5, 0.5), 123)), 4727482481438326502u);
  EXPECT_EQ(fnv1a(generated(DType::i64, {1000}, uniform(-1000, 1000), 123)), 10128897805003577393u);
  // Box-Muller goes through libm's log and cos: allow a few ulps across platforms.
  const std::vector<double> normal = values_of(generated(DType::f64, {4}, randn(0, 1), 42));
  const double expected[] = {1.234541820550271, -2.9550533475152116, -1.4934674670939774,
                             -1.3847915069807142};
  for (size_t i = 0; i < 4; ++i)
    EXPECT_DOUBLE_EQ(normal[i], expected[i]) << i;
}

TEST(Generate, RandnHasTheRequestedMoments) {
  for (DType dtype : {DType::f64, DType::f32}) {
    const std::vector<double> values = values_of(generated(dtype, {1000, 1000}, randn(3, 2), 5));
    double sum = 0.0, squares = 0.0;
    for (double v : values)
      sum += v;
    const double mean = sum / values.size();
    for (double v : values)
      squares += (v - mean) * (v - mean);
    const double std = std::sqrt(squares / values.size());
    // Standard errors are 0.002 (mean) and 0.0014 (std): these bounds are > 5 sigma.
    EXPECT_NEAR(mean, 3.0, 0.01) << request::dtype_name(dtype);
    EXPECT_NEAR(std, 2.0, 0.01) << request::dtype_name(dtype);
  }
}

TEST(Generate, RandnIsSymmetricAndHasNormalTails) {
  const std::vector<double> values = values_of(generated(DType::f64, {1000000}, randn(0, 1), 9));
  int64_t positive = 0, beyond_two_sigma = 0;
  for (double v : values) {
    positive += v > 0;
    beyond_two_sigma += std::abs(v) > 2.0;
  }
  EXPECT_NEAR(positive / 1e6, 0.5, 0.003);
  EXPECT_NEAR(beyond_two_sigma / 1e6, 0.0455, 0.002); // P(|z| > 2) = 4.55%
}

TEST(Generate, UniformStaysInsideTheHalfOpenInterval) {
  for (DType dtype : {DType::f16, DType::bf16, DType::f32, DType::f64}) {
    const std::vector<double> values =
        values_of(generated(dtype, {100000}, uniform(-0.5, 0.5), 11));
    double low = 1.0, high = -1.0, sum = 0.0;
    for (double v : values) {
      ASSERT_GE(v, -0.5) << request::dtype_name(dtype);
      ASSERT_LT(v, 0.5) << request::dtype_name(dtype);
      low = std::min(low, v);
      high = std::max(high, v);
      sum += v;
    }
    EXPECT_LT(low, -0.49) << request::dtype_name(dtype);
    EXPECT_GT(high, 0.49) << request::dtype_name(dtype);
    EXPECT_NEAR(sum / values.size(), 0.0, 0.005) << request::dtype_name(dtype);
  }
}

TEST(Generate, NarrowFormatsNeverRoundUpToHigh) {
  // In bfloat16 every value in [1 - 2^-9, 1) rounds to 1.0: without the step down about 0.2%
  // of these elements would equal `high`.
  const std::vector<double> values = values_of(generated(DType::bf16, {100000}, uniform(0, 1), 3));
  const double below_one = bfloat16_to_float(0x3F7F);
  int64_t at_top = 0;
  for (double v : values) {
    ASSERT_LT(v, 1.0);
    at_top += v == below_one;
  }
  EXPECT_GT(at_top, 100);
}

TEST(Generate, IntegerUniformTakesTheFloor) {
  for (DType dtype : {DType::i8, DType::i16, DType::i32, DType::i64}) {
    std::set<double> seen;
    for (double v : values_of(generated(dtype, {10000}, uniform(-3, 3), 4))) {
      EXPECT_EQ(v, std::floor(v));
      seen.insert(v);
    }
    EXPECT_EQ(seen, (std::set<double>{-3, -2, -1, 0, 1, 2})) << request::dtype_name(dtype);
  }
  std::set<double> bytes;
  for (double v : values_of(generated(DType::u8, {10000}, uniform(250, 256), 4)))
    bytes.insert(v);
  EXPECT_EQ(bytes, (std::set<double>{250, 251, 252, 253, 254, 255}));
}

TEST(Generate, BoolUniformFlipsFairCoins) {
  const std::vector<double> values =
      values_of(generated(DType::boolean, {10000}, uniform(0, 2), 8));
  double ones = 0;
  for (double v : values) {
    ASSERT_TRUE(v == 0.0 || v == 1.0);
    ones += v;
  }
  EXPECT_NEAR(ones / values.size(), 0.5, 0.03);
  for (double v : values_of(generated(DType::boolean, {100}, randn(5, 1), 8)))
    EXPECT_EQ(v, 1.0);
}

TEST(Generate, IntegerRandnRoundsTheDoubleValue) {
  const TensorInit init = randn(0.5, 10);
  const std::vector<double> exact = values_of(generated(DType::f64, {1000}, init, 21));
  const std::vector<double> rounded = values_of(generated(DType::i32, {1000}, init, 21));
  for (size_t i = 0; i < exact.size(); ++i)
    ASSERT_EQ(rounded[i], std::nearbyint(exact[i])) << i;
}

TEST(Generate, HalfAndBFloat16AreTheFloatValueRounded) {
  for (const TensorInit& init : {randn(0, 1), uniform(-2, 2)}) {
    const std::vector<double> wide = values_of(generated(DType::f64, {1000}, init, 13));
    const std::vector<double> single = values_of(generated(DType::f32, {1000}, init, 13));
    const HostTensor half = generated(DType::f16, {1000}, init, 13);
    const HostTensor bfloat = generated(DType::bf16, {1000}, init, 13);
    const auto* half_bits = static_cast<const uint16_t*>(half.data());
    const auto* bfloat_bits = static_cast<const uint16_t*>(bfloat.data());
    for (size_t i = 0; i < wide.size(); ++i) {
      if (init.kind == InitKind::randn) { // the same normal variate whatever the dtype
        ASSERT_EQ(single[i], static_cast<float>(wide[i])) << i;
      }
      // A uniform value that rounds onto `high` (positive here) steps one unit down.
      uint16_t expected_half = float_to_half(static_cast<float>(single[i]));
      uint16_t expected_bfloat = float_to_bfloat16(static_cast<float>(single[i]));
      if (init.kind == InitKind::uniform && half_to_float(expected_half) >= init.high)
        --expected_half;
      if (init.kind == InitKind::uniform && bfloat16_to_float(expected_bfloat) >= init.high)
        --expected_bfloat;
      ASSERT_EQ(half_bits[i], expected_half) << i;
      ASSERT_EQ(bfloat_bits[i], expected_bfloat) << i;
    }
  }
}

TEST(Generate, ConstantKindsCastToEveryDType) {
  TensorInit full = make_init(InitKind::full);
  full.fill_value = 3.75;
  for (DType dtype : kAllDTypes) {
    const double cast = is_floating(dtype) ? 3.75 : (dtype == DType::boolean ? 1.0 : 3.0);
    for (double v : values_of(generated(dtype, {2, 5}, full, 0)))
      EXPECT_EQ(v, cast) << request::dtype_name(dtype);
    for (double v : values_of(generated(dtype, {2, 5}, make_init(InitKind::zeros), 0)))
      EXPECT_EQ(v, 0.0) << request::dtype_name(dtype);
    for (double v : values_of(generated(dtype, {2, 5}, make_init(InitKind::ones), 0)))
      EXPECT_EQ(v, 1.0) << request::dtype_name(dtype);
  }
}

TEST(Generate, ArangeRunsOverTheFlatIndex) {
  TensorInit arange = make_init(InitKind::arange);
  arange.start = -5.0;
  arange.step = 2.5;
  EXPECT_EQ(values_of(generated(DType::f32, {2, 3}, arange, 0)),
            (std::vector<double>{-5, -2.5, 0, 2.5, 5, 7.5}));
  EXPECT_EQ(values_of(generated(DType::i8, {2, 3}, arange, 0)),
            (std::vector<double>{-5, -2, 0, 2, 5, 7})); // truncated toward zero
  EXPECT_EQ(values_of(generated(DType::boolean, {2, 3}, arange, 0)),
            (std::vector<double>{1, 1, 0, 1, 1, 1}));
  arange.start = 65500;
  arange.step = 10;
  EXPECT_EQ(values_of(generated(DType::f16, {3}, arange, 0)),
            (std::vector<double>{65504, 65504, INFINITY})); // 65520 is the tie that goes to Inf
}

TEST(Generate, RejectsParametersTorchRejects) {
  HostTensor tensor = HostTensor::empty(DType::f32, {4});
  EXPECT_THROW(fill(tensor, randn(0, -1), 1), std::invalid_argument);
  EXPECT_THROW(fill(tensor, randn(NAN, 1), 1), std::invalid_argument);
  EXPECT_THROW(fill(tensor, uniform(1, 0), 1), std::invalid_argument);
  EXPECT_THROW(fill(tensor, uniform(0, INFINITY), 1), std::invalid_argument);
  EXPECT_NO_THROW(fill(tensor, uniform(2, 2), 1));
  EXPECT_EQ(values_of(tensor), (std::vector<double>{2, 2, 2, 2}));
}

TEST(Generate, FillFromDataCopiesExactBytes) {
  HostTensor tensor = HostTensor::empty(DType::i16, {3});
  request::TensorData data;
  data.bytes = {1, 0, 2, 0, 0xFF, 0xFF};
  fill_from_data(tensor, data);
  EXPECT_EQ(values_of(tensor), (std::vector<double>{1, 2, -1}));
  data.bytes.pop_back();
  EXPECT_THROW(fill_from_data(tensor, data), std::invalid_argument);
}

TEST(Seeds, TrialZeroIsTheSpecSeed) {
  for (uint64_t seed : {0ull, 42ull, 123ull, ~0ull})
    EXPECT_EQ(trial_seed(seed, 0), seed);
}

TEST(Seeds, TrialsAndArgumentsGetDistinctSeeds) {
  std::set<uint64_t> seeds;
  for (uint64_t trial = 0; trial < 100; ++trial)
    seeds.insert(trial_seed(42, trial));
  for (size_t arg = 0; arg < 100; ++arg)
    seeds.insert(default_arg_seed(42, arg));
  EXPECT_EQ(seeds.size(), 200u);
  EXPECT_NE(trial_seed(42, 1), trial_seed(43, 1));
  EXPECT_NE(default_arg_seed(1, 0), default_arg_seed(2, 0));
  EXPECT_EQ(default_arg_seed(7, 3), default_arg_seed(7, 3));
}

TEST(Seeds, ConsecutiveSpecSeedsGiveUnrelatedTrialSeeds) {
  // A weak mixer (seed + trial) would make trial 1 of seed 42 equal trial 0 of seed 43.
  EXPECT_NE(trial_seed(42, 1), 43u);
}

// Input seeds: deterministic in (job seed, stream, trial), distinct across each of them, and not
// the SplitMix chain of trial_seed (which is invertible: a kernel recovering one trial's seed
// would know the next).
TEST(Seeds, InputSeedsAreDistinctPerJobStreamAndTrial) {
  EXPECT_EQ(input_seed(7, "arg:x", 3), input_seed(7, "arg:x", 3));
  std::set<uint64_t> seeds;
  for (uint64_t job : {uint64_t{1}, uint64_t{2}})
    for (const char* stream : {"arg:x", "arg:y", "seed:42", "default-inputs"})
      for (uint64_t trial : {uint64_t{0}, uint64_t{1}, uint64_t{1} << 41})
        seeds.insert(input_seed(job, stream, trial));
  EXPECT_EQ(seeds.size(), 2u * 4u * 3u);
  EXPECT_NE(input_seed(42, "seed:42", 1), trial_seed(input_seed(42, "seed:42", 0), 1));
  // A stream name that is a prefix of another is another stream.
  EXPECT_NE(input_seed(1, "arg:x", 0), input_seed(1, "arg:xx", 0));
  const uint64_t a = trial_seed(42, 1), b = trial_seed(43, 1);
  EXPECT_GT(__builtin_popcountll(a ^ b), 16);
}

} // namespace
} // namespace keval::tensor
