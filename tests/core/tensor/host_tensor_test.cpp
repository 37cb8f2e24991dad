#include <cstring>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "tensor/dtype.hpp"
#include "tensor/host_tensor.hpp"

namespace keval::tensor {
namespace {

// A CPU view over caller-owned memory.
struct View {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  keval_dl_tensor dl{};

  View(void* data, DType dtype, std::vector<int64_t> shape_, std::vector<int64_t> strides_ = {},
       uint64_t byte_offset = 0)
      : shape(std::move(shape_)), strides(std::move(strides_)) {
    dl.data = data;
    dl.device = {KEVAL_DEVICE_CPU, 0};
    dl.ndim = static_cast<int32_t>(shape.size());
    dl.dtype = to_dl(dtype);
    dl.shape = shape.data();
    dl.strides = strides.empty() ? nullptr : strides.data();
    dl.byte_offset = byte_offset;
  }
};

void expect_view_consistent(HostTensor& tensor) {
  const keval_dl_tensor& dl = tensor.dl();
  EXPECT_EQ(dl.data, tensor.data());
  EXPECT_EQ(dl.device.device_type, KEVAL_DEVICE_CPU);
  ASSERT_EQ(dl.ndim, static_cast<int32_t>(tensor.shape().size()));
  EXPECT_EQ(dl.shape, tensor.shape().data());
  for (size_t d = 0; d < tensor.shape().size(); ++d)
    EXPECT_EQ(dl.shape[d], tensor.shape()[d]);
  EXPECT_EQ(dl.strides, nullptr);
  EXPECT_EQ(dl.byte_offset, 0u);
  EXPECT_EQ(from_dl(dl.dtype), tensor.dtype());
}

TEST(HostTensor, EmptyIsAlignedZeroedAndDescribed) {
  HostTensor tensor = HostTensor::empty(DType::f16, {3, 5, 7});
  EXPECT_EQ(tensor.dtype(), DType::f16);
  EXPECT_EQ(tensor.numel(), 105);
  EXPECT_EQ(tensor.nbytes(), 210u);
  ASSERT_NE(tensor.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tensor.data()) % 64, 0u);
  for (uint8_t byte : tensor.bytes())
    EXPECT_EQ(byte, 0);
  expect_view_consistent(tensor);
}

TEST(HostTensor, ScalarAndZeroSizedShapes) {
  HostTensor scalar = HostTensor::empty(DType::i64, {});
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.nbytes(), 8u);
  expect_view_consistent(scalar);

  HostTensor none = HostTensor::empty(DType::f32, {4, 0});
  EXPECT_EQ(none.numel(), 0);
  EXPECT_EQ(none.nbytes(), 0u);
  expect_view_consistent(none);
}

TEST(HostTensor, RejectsBadShapes) {
  EXPECT_THROW(HostTensor::empty(DType::f32, {2, -1}), std::invalid_argument);
  EXPECT_THROW(HostTensor::empty(DType::f64, {int64_t{1} << 40, int64_t{1} << 40}),
               std::invalid_argument);
}

TEST(HostTensor, MovesKeepTheViewConsistent) {
  HostTensor source = HostTensor::empty(DType::i32, {4, 4});
  void* buffer = source.data();
  HostTensor moved(std::move(source));
  EXPECT_EQ(moved.data(), buffer);
  expect_view_consistent(moved);
  // The moved-from tensor is a consistent empty tensor.
  EXPECT_EQ(source.numel(), 0);
  EXPECT_EQ(source.dl().data, nullptr);
  expect_view_consistent(source);

  HostTensor assigned = HostTensor::empty(DType::u8, {1});
  assigned = std::move(moved);
  EXPECT_EQ(assigned.data(), buffer);
  EXPECT_EQ(assigned.dtype(), DType::i32);
  expect_view_consistent(assigned);
  expect_view_consistent(moved);
}

TEST(HostTensor, ViewsSurviveVectorGrowth) {
  std::vector<HostTensor> tensors;
  for (int64_t i = 1; i <= 20; ++i)
    tensors.push_back(HostTensor::empty(DType::f32, {i, 2}));
  for (HostTensor& tensor : tensors)
    expect_view_consistent(tensor);
}

TEST(HostTensor, CloneCopiesIntoANewBuffer) {
  HostTensor original = HostTensor::empty(DType::i16, {2, 3});
  for (size_t i = 0; i < original.nbytes(); ++i)
    original.bytes()[i] = static_cast<uint8_t>(i * 7);
  HostTensor copy = original.clone();
  EXPECT_NE(copy.data(), original.data());
  EXPECT_TRUE(copy.same_bytes(original));
  copy.bytes()[5] ^= 1;
  EXPECT_FALSE(copy.same_bytes(original));
}

TEST(HostTensor, SameBytesNeedsSameDTypeAndShape) {
  HostTensor a = HostTensor::empty(DType::f32, {2, 3});
  EXPECT_TRUE(a.same_bytes(HostTensor::empty(DType::f32, {2, 3})));
  EXPECT_FALSE(a.same_bytes(HostTensor::empty(DType::f32, {3, 2})));
  EXPECT_FALSE(a.same_bytes(HostTensor::empty(DType::i32, {2, 3})));
}

TEST(HostTensor, CopiesAContiguousViewWithByteOffset) {
  std::vector<float> storage = {-1, 0, 1, 2, 3, 4, 5};
  View view(storage.data(), DType::f32, {2, 3}, {}, sizeof(float));
  HostTensor tensor = HostTensor::copy_of(view.dl);
  ASSERT_EQ(tensor.shape(), (std::vector<int64_t>{2, 3}));
  const auto* values = static_cast<const float*>(tensor.data());
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(values[i], static_cast<float>(i));
}

TEST(HostTensor, CopiesAStridedViewIntoRowMajorOrder) {
  // storage is a 3x2 row-major matrix; the view is its transpose (2x3, strides {1, 2}).
  std::vector<int32_t> storage = {0, 1, 2, 3, 4, 5};
  View transposed(storage.data(), DType::i32, {2, 3}, {1, 2});
  HostTensor tensor = HostTensor::copy_of(transposed.dl);
  const auto* values = static_cast<const int32_t*>(tensor.data());
  const int32_t expected[] = {0, 2, 4, 1, 3, 5};
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(values[i], expected[i]) << i;
  expect_view_consistent(tensor);
}

TEST(HostTensor, CopiesANegativelyStridedView) {
  std::vector<int64_t> storage = {10, 11, 12, 13};
  // Reversed: starts at the last element and walks backwards.
  View reversed(storage.data(), DType::i64, {4}, {-1}, 3 * sizeof(int64_t));
  HostTensor tensor = HostTensor::copy_of(reversed.dl);
  const auto* values = static_cast<const int64_t*>(tensor.data());
  EXPECT_EQ(values[0], 13);
  EXPECT_EQ(values[3], 10);
}

TEST(HostTensor, CopyRejectsDeviceViewsAndUnknownDTypes) {
  float value = 1.0f;
  View view(&value, DType::f32, {1});
  view.dl.device.device_type = KEVAL_DEVICE_CUDA;
  EXPECT_THROW(HostTensor::copy_of(view.dl), std::invalid_argument);
  view.dl.device.device_type = KEVAL_DEVICE_CPU;
  view.dl.dtype = {KEVAL_DTYPE_UINT, 32, 1};
  EXPECT_THROW(HostTensor::copy_of(view.dl), std::invalid_argument);
}

} // namespace
} // namespace keval::tensor
