#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "core/tensor/all_dtypes.hpp"

#include "tensor/compare.hpp"
#include "tensor/dtype.hpp"
#include "tensor/generate.hpp"
#include "tensor/poison.hpp"

namespace keval::tensor {
namespace {

using test::kAllDTypes;

template <typename Bits> std::vector<Bits> elements_of(const HostTensor& tensor) {
  std::vector<Bits> elements(static_cast<size_t>(tensor.numel()));
  std::memcpy(elements.data(), tensor.data(), tensor.nbytes());
  return elements;
}

TEST(Poison, FloatingTypesBecomeQuietNaN) {
  HostTensor half = HostTensor::empty(DType::f16, {5});
  HostTensor bfloat = HostTensor::empty(DType::bf16, {5});
  HostTensor single = HostTensor::empty(DType::f32, {5});
  HostTensor wide = HostTensor::empty(DType::f64, {5});
  for (HostTensor* tensor : {&half, &bfloat, &single, &wide})
    poison(*tensor);
  for (uint16_t bits : elements_of<uint16_t>(half))
    EXPECT_EQ(bits, 0x7E00);
  for (uint16_t bits : elements_of<uint16_t>(bfloat))
    EXPECT_EQ(bits, 0x7FC0);
  for (uint32_t bits : elements_of<uint32_t>(single))
    EXPECT_EQ(bits, 0x7FC00000u);
  for (uint64_t bits : elements_of<uint64_t>(wide))
    EXPECT_EQ(bits, 0x7FF8000000000000ull);
}

TEST(Poison, IntegerAndBoolBytesBecomeA5) {
  for (DType dtype : {DType::i8, DType::i16, DType::i32, DType::i64, DType::u8, DType::boolean}) {
    HostTensor tensor = HostTensor::empty(dtype, {3, 3});
    poison(tensor);
    for (uint8_t byte : tensor.bytes())
      EXPECT_EQ(byte, 0xA5) << request::dtype_name(dtype);
  }
}

TEST(Poison, AnUnwrittenOutputFailsEveryElement) {
  request::TensorInit arange;
  arange.kind = request::InitKind::arange;
  for (DType dtype : kAllDTypes) {
    HostTensor expected = HostTensor::empty(dtype, {4, 8});
    fill(expected, arange, 0);
    HostTensor actual = HostTensor::empty(dtype, {4, 8});
    poison(actual);
    const Comparison result = compare(expected.dl(), actual.dl(), {});
    EXPECT_FALSE(result.match) << request::dtype_name(dtype);
    EXPECT_EQ(result.mismatches, 32) << request::dtype_name(dtype);
  }
}

TEST(Poison, APartlyWrittenOutputFailsOnlyTheUnwrittenElements) {
  request::TensorInit ones;
  ones.kind = request::InitKind::ones;
  for (DType dtype : kAllDTypes) {
    HostTensor expected = HostTensor::empty(dtype, {10});
    fill(expected, ones, 0);
    HostTensor actual = HostTensor::empty(dtype, {10});
    poison(actual);
    // The "kernel" writes the first 6 elements only.
    std::memcpy(actual.data(), expected.data(), 6 * request::dtype_size(dtype));
    const Comparison result = compare(expected.dl(), actual.dl(), {});
    EXPECT_EQ(result.mismatches, 4) << request::dtype_name(dtype);
    ASSERT_FALSE(result.first_mismatches.empty());
    EXPECT_EQ(result.first_mismatches.front().index, (std::vector<int64_t>{6}));
  }
}

TEST(Poison, AStridedViewPoisonsOnlyItsElements) {
  std::vector<float> storage(8, 1.0f); // a 2x4 matrix
  std::vector<int64_t> shape = {2}, strides = {4};
  keval_dl_tensor column{};
  column.data = storage.data();
  column.device = {KEVAL_DEVICE_CPU, 0};
  column.ndim = 1;
  column.dtype = to_dl(DType::f32);
  column.shape = shape.data();
  column.strides = strides.data();
  column.byte_offset = sizeof(float); // column 1
  poison(column);
  for (size_t i = 0; i < storage.size(); ++i)
    EXPECT_EQ(std::isnan(storage[i]), i == 1 || i == 5) << i;
}

TEST(Poison, RejectsDeviceViews) {
  HostTensor tensor = HostTensor::empty(DType::f32, {2});
  keval_dl_tensor view = tensor.dl();
  view.device.device_type = KEVAL_DEVICE_CUDA;
  EXPECT_THROW(poison(view), std::invalid_argument);
}

} // namespace
} // namespace keval::tensor
