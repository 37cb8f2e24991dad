#include <cmath>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tensor/stats.hpp"

namespace keval::tensor {
namespace {

TEST(Stats, FourSamples) {
  const RuntimeStats stats = compute_stats({4, 1, 3, 2});
  EXPECT_EQ(stats.count, 4);
  EXPECT_DOUBLE_EQ(stats.mean, 2.5);
  EXPECT_DOUBLE_EQ(stats.std, std::sqrt(1.25)); // population: sum of squares 5 over 4
  EXPECT_EQ(stats.min, 1.0);
  EXPECT_EQ(stats.max, 4.0);
  EXPECT_DOUBLE_EQ(stats.median, 2.5);
  EXPECT_DOUBLE_EQ(stats.percentile_95, 3.85); // position 0.95 * 3 = 2.85
  EXPECT_DOUBLE_EQ(stats.percentile_99, 3.97);
}

TEST(Stats, OddCountAndUnevenGaps) {
  const RuntimeStats stats = compute_stats({5, 1, 3});
  EXPECT_DOUBLE_EQ(stats.mean, 3.0);
  EXPECT_DOUBLE_EQ(stats.std, std::sqrt(8.0 / 3.0));
  EXPECT_EQ(stats.median, 3.0);
  EXPECT_DOUBLE_EQ(stats.percentile_95, 4.8); // position 1.9: 3 + 0.9 * 2
  EXPECT_DOUBLE_EQ(stats.percentile_99, 4.96);
}

TEST(Stats, MatchesNumpyOnOneToTen) {
  // np.std, np.median and np.percentile of np.arange(1, 11).
  std::vector<double> samples;
  for (int i = 10; i >= 1; --i)
    samples.push_back(i);
  const RuntimeStats stats = compute_stats(samples);
  EXPECT_DOUBLE_EQ(stats.mean, 5.5);
  EXPECT_DOUBLE_EQ(stats.std, 2.8722813232690143);
  EXPECT_DOUBLE_EQ(stats.median, 5.5);
  EXPECT_DOUBLE_EQ(stats.percentile_95, 9.55);
  EXPECT_DOUBLE_EQ(stats.percentile_99, 9.91);
}

TEST(Stats, SingleSample) {
  const RuntimeStats stats = compute_stats({0.125});
  EXPECT_EQ(stats.count, 1);
  EXPECT_EQ(stats.std, 0.0);
  for (double value :
       {stats.mean, stats.min, stats.max, stats.median, stats.percentile_95, stats.percentile_99})
    EXPECT_EQ(value, 0.125);
}

TEST(Stats, RejectsEmptyAndNonFiniteInput) {
  EXPECT_THROW(compute_stats({}), std::invalid_argument);
  EXPECT_THROW(compute_stats({1.0, NAN}), std::invalid_argument);
  EXPECT_THROW(compute_stats({INFINITY}), std::invalid_argument);
}

TEST(Stats, JsonHasExactlyTheSeedKeys) {
  const boost::json::object json = to_json(compute_stats({1, 2, 3, 4}));
  std::set<std::string> keys;
  for (const auto& entry : json)
    keys.insert(std::string(entry.key()));
  EXPECT_EQ(keys, (std::set<std::string>{"mean", "std", "min", "max", "median", "percentile_95",
                                         "percentile_99", "count"}));
  EXPECT_EQ(json.at("count"), 4);
  EXPECT_EQ(json.at("median"), 2.5);
  EXPECT_EQ(json.at("max"), 4.0);
}

} // namespace
} // namespace keval::tensor
