#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include "tensor/compare.hpp"
#include "tensor/dtype.hpp"
#include "tensor/host_tensor.hpp"

namespace keval::tensor {
namespace {

template <typename T>
HostTensor tensor_of(DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  HostTensor tensor = HostTensor::empty(dtype, std::move(shape));
  auto* bytes = static_cast<uint8_t*>(tensor.data());
  for (size_t i = 0; i < values.size(); ++i)
    write_element(dtype, bytes + i * request::dtype_size(dtype), static_cast<double>(values[i]));
  return tensor;
}

HostTensor floats(std::vector<int64_t> shape, const std::vector<double>& values) {
  return tensor_of(DType::f32, std::move(shape), values);
}

request::Tolerance tolerance(double atol, double rtol) {
  return {atol, rtol};
}

TEST(Compare, IdenticalTensorsMatch) {
  const HostTensor a = floats({2, 3}, {1, 2, 3, 4, 5, 6});
  const Comparison result = compare(a.dl(), a.clone().dl(), {});
  EXPECT_TRUE(result.match);
  EXPECT_TRUE(result.compared);
  EXPECT_EQ(result.numel, 6);
  EXPECT_EQ(result.mismatches, 0);
  EXPECT_EQ(result.max_abs_diff, 0.0);
  EXPECT_TRUE(result.first_mismatches.empty());
  EXPECT_EQ(result.message, "all 6 elements match (max abs diff 0.0; atol=0.01 rtol=0.01)");
}

TEST(Compare, ToleranceIsAbsolutePlusRelativeToExpected) {
  // Exact binary fractions so the boundary is exact: 0.25 + 0.25 * |2| = 0.75.
  const HostTensor expected = tensor_of<double>(DType::f64, {3}, {2, 2, -2});
  const HostTensor actual = tensor_of<double>(DType::f64, {3}, {2.75, 2.75 + 0x1p-50, -1.25});
  const Comparison result = compare(expected.dl(), actual.dl(), tolerance(0.25, 0.25));
  EXPECT_EQ(result.mismatches, 1);
  ASSERT_EQ(result.first_mismatches.size(), 1u);
  EXPECT_EQ(result.first_mismatches[0].index, (std::vector<int64_t>{1}));

  // rtol scales |expected|, not |actual| (the reference is the ground truth).
  const HostTensor zero = tensor_of<double>(DType::f64, {1}, {0});
  const HostTensor small = tensor_of<double>(DType::f64, {1}, {0.5});
  EXPECT_FALSE(compare(zero.dl(), small.dl(), tolerance(0, 1)).match);
  EXPECT_TRUE(compare(small.dl(), zero.dl(), tolerance(0, 1)).match);
}

TEST(Compare, CountsAndLocatesDifferences) {
  std::vector<double> values(64, 1.0);
  HostTensor expected = floats({2, 32}, values);
  values[17] = 3.5;   // expected 1.5 below, so the diff is 2.0
  values[33] = 1.25;  // row 1, column 1: diff 0.25
  values[40] = 1.005; // within tolerance
  HostTensor actual = floats({2, 32}, values);
  static_cast<float*>(expected.data())[17] = 1.5f;

  const Comparison result = compare(expected.dl(), actual.dl(), {});
  EXPECT_FALSE(result.match);
  EXPECT_EQ(result.mismatches, 2);
  EXPECT_EQ(result.max_abs_diff, 2.0);
  EXPECT_DOUBLE_EQ(result.max_rel_diff, 2.0 / 1.5);
  ASSERT_TRUE(result.max_abs_diff_at);
  EXPECT_EQ(result.max_abs_diff_at->index, (std::vector<int64_t>{0, 17}));
  ASSERT_EQ(result.first_mismatches.size(), 2u);
  EXPECT_EQ(result.first_mismatches[1].index, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(result.first_mismatches[1].expected, 1.0);
  EXPECT_EQ(result.first_mismatches[1].actual, 1.25);
  EXPECT_EQ(result.message, "2 of 64 elements differ (max abs diff 2.0 at [0, 17], expected 1.5 "
                            "got 3.5; atol=0.01 rtol=0.01)");
  EXPECT_EQ(summary(result), result.message);
}

TEST(Compare, ReportsAtMostEightMismatchesInIndexOrder) {
  const HostTensor expected = floats({100}, std::vector<double>(100, 0.0));
  const HostTensor actual = floats({100}, std::vector<double>(100, 1.0));
  const Comparison result = compare(expected.dl(), actual.dl(), {});
  EXPECT_EQ(result.mismatches, 100);
  ASSERT_EQ(result.first_mismatches.size(), kMaxReportedMismatches);
  for (size_t i = 0; i < kMaxReportedMismatches; ++i)
    EXPECT_EQ(result.first_mismatches[i].index, (std::vector<int64_t>{static_cast<int64_t>(i)}));
}

TEST(Compare, NaNNeverMatchesEvenNaN) {
  const HostTensor expected = floats({4}, {NAN, NAN, 1, 2});
  const HostTensor actual = floats({4}, {NAN, 1, NAN, 2});
  const Comparison result = compare(expected.dl(), actual.dl(), {});
  EXPECT_EQ(result.mismatches, 3);
  EXPECT_EQ(result.nan_in_expected, 2);
  EXPECT_EQ(result.nan_in_actual, 2);
  EXPECT_EQ(result.max_abs_diff, 0.0); // only element 3 is finite on both sides
  EXPECT_EQ(result.message, "3 of 4 elements differ (first at [0], expected nan got nan, 2 NaN in "
                            "actual, 2 NaN in expected; atol=0.01 rtol=0.01)");
}

TEST(Compare, InfinitiesMatchOnlyTheSameInfinity) {
  const HostTensor expected = floats({4}, {INFINITY, -INFINITY, INFINITY, 5});
  const HostTensor actual = floats({4}, {INFINITY, -INFINITY, -INFINITY, INFINITY});
  const Comparison result = compare(expected.dl(), actual.dl(), tolerance(1e30, 1e30));
  EXPECT_EQ(result.mismatches, 2);
  EXPECT_EQ(result.inf_in_actual, 4);
  EXPECT_EQ(result.nan_in_actual, 0);
  EXPECT_EQ(result.first_mismatches[0].index, (std::vector<int64_t>{2}));
  EXPECT_EQ(result.first_mismatches[1].index, (std::vector<int64_t>{3}));
  EXPECT_FALSE(result.max_abs_diff_at);
}

TEST(Compare, FollowsTheStridesOfTheActualView) {
  // actual holds the transpose in memory; the view with strides {1, 2} reads it as 2x3.
  const HostTensor expected = floats({2, 3}, {0, 1, 2, 3, 4, 5});
  std::vector<float> transposed = {0, 3, 1, 4, 2, 5};
  std::vector<int64_t> shape = {2, 3}, strides = {1, 2};
  keval_dl_tensor view{};
  view.data = transposed.data();
  view.device = {KEVAL_DEVICE_CPU, 0};
  view.ndim = 2;
  view.dtype = to_dl(DType::f32);
  view.shape = shape.data();
  view.strides = strides.data();
  EXPECT_TRUE(compare(expected.dl(), view, {}).match);

  transposed[4] = 9; // logical element [0, 2]
  const Comparison result = compare(expected.dl(), view, {});
  EXPECT_EQ(result.mismatches, 1);
  ASSERT_EQ(result.first_mismatches.size(), 1u);
  EXPECT_EQ(result.first_mismatches[0].index, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(result.first_mismatches[0].expected, 2.0);
  EXPECT_EQ(result.first_mismatches[0].actual, 9.0);
}

TEST(Compare, ShapeMismatchIsAFailureNotAnError) {
  const HostTensor expected = floats({2, 3}, {0, 1, 2, 3, 4, 5});
  const HostTensor actual = floats({3, 2}, {0, 1, 2, 3, 4, 5});
  const Comparison result = compare(expected.dl(), actual.dl(), {});
  EXPECT_FALSE(result.match);
  EXPECT_FALSE(result.compared);
  EXPECT_EQ(result.mismatches, 0);
  EXPECT_EQ(result.message, "shape mismatch: expected [2, 3], got [3, 2]");
}

TEST(Compare, DTypeMismatchIsReportedNotCompared) {
  const HostTensor expected = floats({2}, {1, 2});
  const HostTensor actual = tensor_of<double>(DType::f16, {2}, {1, 2});
  const Comparison result = compare(expected.dl(), actual.dl(), {});
  EXPECT_FALSE(result.match);
  EXPECT_FALSE(result.compared);
  EXPECT_EQ(result.message, "dtype mismatch: expected float32, got float16");

  const HostTensor other_shape = tensor_of<double>(DType::i32, {3}, {1, 2, 3});
  EXPECT_EQ(compare(expected.dl(), other_shape.dl(), {}).message,
            "dtype mismatch: expected float32, got int32; shape mismatch: expected [2], got [3]");
}

TEST(Compare, IntegersCompareExactly) {
  const HostTensor expected = tensor_of<double>(DType::i32, {3}, {1, 2, 3});
  const HostTensor actual = tensor_of<double>(DType::i32, {3}, {1, 3, 3});
  const Comparison result = compare(expected.dl(), actual.dl(), tolerance(10, 10));
  EXPECT_EQ(result.mismatches, 1);
  EXPECT_EQ(result.max_abs_diff, 1.0);
  EXPECT_EQ(
      result.message,
      "1 of 3 elements differ (max abs diff 1 at [1], expected 2 got 3; atol=10.0 rtol=10.0)");

  // Beyond 2^53 a double cannot tell these apart; the comparison still does.
  HostTensor big = HostTensor::empty(DType::i64, {1});
  HostTensor bigger = HostTensor::empty(DType::i64, {1});
  *static_cast<int64_t*>(big.data()) = int64_t{1} << 60;
  *static_cast<int64_t*>(bigger.data()) = (int64_t{1} << 60) + 1;
  EXPECT_FALSE(compare(big.dl(), bigger.dl(), {}).match);
}

TEST(Compare, BoolComparesRawBytes) {
  HostTensor expected = HostTensor::empty(DType::boolean, {3});
  HostTensor actual = HostTensor::empty(DType::boolean, {3});
  const uint8_t expected_bytes[] = {0, 1, 1};
  const uint8_t actual_bytes[] = {0, 1, 2}; // 2 is "true" to C, not a valid torch bool
  std::memcpy(expected.data(), expected_bytes, 3);
  std::memcpy(actual.data(), actual_bytes, 3);
  EXPECT_EQ(compare(expected.dl(), actual.dl(), tolerance(5, 5)).mismatches, 1);
}

TEST(Compare, HalfPrecisionUsesItsOwnValues) {
  const HostTensor expected = tensor_of<double>(DType::f16, {2}, {1.0, 0.1});
  const HostTensor actual = tensor_of<double>(DType::f16, {2}, {1.0, 0.2});
  const Comparison result = compare(expected.dl(), actual.dl(), {});
  EXPECT_EQ(result.mismatches, 1);
  EXPECT_EQ(result.first_mismatches[0].expected, half_to_float(float_to_half(0.1f)));
}

TEST(Compare, JsonHoldsEveryField) {
  const HostTensor expected = floats({2}, {1, 2});
  const HostTensor actual = floats({2}, {1, NAN});
  const boost::json::object json = to_json(compare(expected.dl(), actual.dl(), {}));
  EXPECT_EQ(json.at("match"), false);
  EXPECT_EQ(json.at("compared"), true);
  EXPECT_EQ(json.at("dtype"), "float32");
  EXPECT_EQ(json.at("numel"), 2);
  EXPECT_EQ(json.at("mismatches"), 1);
  EXPECT_EQ(json.at("nan_in_actual"), 1);
  EXPECT_EQ(json.at("nan_in_expected"), 0);
  EXPECT_EQ(json.at("inf_in_actual"), 0);
  EXPECT_EQ(json.at("max_abs_diff"), 0.0);
  EXPECT_EQ(json.at("max_rel_diff"), 0.0);
  EXPECT_EQ(json.at("atol"), 0.01);
  EXPECT_EQ(json.at("rtol"), 0.01);
  EXPECT_TRUE(json.at("message").is_string());
  EXPECT_TRUE(json.at("max_abs_diff_at").is_object());
  const boost::json::value& mismatch = json.at("first_mismatches").as_array().at(0);
  EXPECT_EQ(boost::json::serialize(mismatch), R"({"index":[1],"expected":2E0,"actual":"nan"})");
}

TEST(Compare, RejectsDeviceViews) {
  const HostTensor a = floats({1}, {1});
  keval_dl_tensor device_view = a.dl();
  device_view.device.device_type = KEVAL_DEVICE_CUDA;
  EXPECT_THROW(compare(a.dl(), device_view, {}), std::invalid_argument);
}

} // namespace
} // namespace keval::tensor
