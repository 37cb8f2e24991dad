// The host-side parts of the CUDA engine, which need no GPU: views for the kernels, index
// arithmetic, the incomparable-tensor messages, GPU type detection and the embedded kernels.
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <boost/json/serialize.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tensor/compare.hpp"
#include "tensor/dtype.hpp"
#include "tensor/host_tensor.hpp"
#include "worker/cuda/detail/device_view.hpp"
#include "worker/cuda/detail/embedded_kernels.hpp"

namespace keval::worker::detail {
namespace {

using ::testing::HasSubstr;

// A CUDA view over a fake but aligned device address; make_device_view never dereferences it.
struct FakeDeviceView {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  keval_dl_tensor view{};

  FakeDeviceView(request::DType dtype, std::vector<int64_t> shape_in,
                 std::vector<int64_t> strides_in = {}, int ordinal = 0)
      : shape(std::move(shape_in)), strides(std::move(strides_in)) {
    view.data = reinterpret_cast<void*>(uintptr_t{0x7f0000000000});
    view.device = {KEVAL_DEVICE_CUDA, ordinal};
    view.ndim = static_cast<int32_t>(shape.size());
    view.dtype = tensor::to_dl(dtype);
    view.shape = shape.data();
    view.strides = strides.empty() ? nullptr : strides.data();
  }
};

TEST(DeviceView, CompactTensorsAreDense) {
  FakeDeviceView compact(request::DType::f32, {4, 5, 6});
  const DeviceView view = make_device_view(compact.view, 0, "t");
  EXPECT_TRUE(view.dense);
  EXPECT_EQ(view.data, 0x7f0000000000u);

  // Explicit row-major strides and extent-1 dimensions with arbitrary strides are dense too.
  FakeDeviceView explicit_strides(request::DType::f32, {4, 1, 6}, {6, 99, 1});
  EXPECT_TRUE(make_device_view(explicit_strides.view, 0, "t").dense);

  FakeDeviceView scalar(request::DType::f64, {});
  EXPECT_TRUE(make_device_view(scalar.view, 0, "t").dense);
}

TEST(DeviceView, MergesDimensionsLaidOutAsOne) {
  // [2, 3, 4] with the last two dimensions contiguous inside a padded row of 20 elements.
  FakeDeviceView padded(request::DType::f32, {2, 3, 4}, {20, 4, 1});
  const DeviceView view = make_device_view(padded.view, 0, "t");
  EXPECT_FALSE(view.dense);
  ASSERT_EQ(view.ndim, 2);
  EXPECT_EQ(view.shape[0], 2);
  EXPECT_EQ(view.strides[0], 20);
  EXPECT_EQ(view.shape[1], 12);
  EXPECT_EQ(view.strides[1], 1);
}

TEST(DeviceView, KeepsTransposedAndNegativeStrides) {
  FakeDeviceView transposed(request::DType::i16, {5, 3}, {1, 5});
  const DeviceView view = make_device_view(transposed.view, 0, "t");
  EXPECT_FALSE(view.dense);
  ASSERT_EQ(view.ndim, 2);
  EXPECT_EQ(view.strides[0], 1);
  EXPECT_EQ(view.strides[1], 5);

  FakeDeviceView reversed(request::DType::f32, {8}, {-1});
  reversed.view.byte_offset = 7 * 4;
  const DeviceView flipped = make_device_view(reversed.view, 0, "t");
  EXPECT_FALSE(flipped.dense);
  EXPECT_EQ(flipped.data, 0x7f0000000000u + 28);
  EXPECT_EQ(flipped.strides[0], -1);
}

TEST(DeviceView, RejectsWhatTheKernelsCannotRead) {
  FakeDeviceView on_cpu(request::DType::f32, {4});
  on_cpu.view.device = {KEVAL_DEVICE_CPU, 0};
  EXPECT_THAT([&] { make_device_view(on_cpu.view, 0, "compare: actual"); },
              ::testing::ThrowsMessage<std::invalid_argument>(
                  HasSubstr("compare: actual: not a CUDA tensor")));

  FakeDeviceView other_device(request::DType::f32, {4}, {}, 1);
  EXPECT_THAT([&] { make_device_view(other_device.view, 0, "t"); },
              ::testing::ThrowsMessage<std::invalid_argument>(
                  HasSubstr("on CUDA device 1, but this engine runs on device 0")));

  FakeDeviceView complex(request::DType::f32, {4});
  complex.view.dtype = {5, 64, 1};
  EXPECT_THROW(make_device_view(complex.view, 0, "t"), std::invalid_argument);

  FakeDeviceView null_data(request::DType::f32, {4});
  null_data.view.data = nullptr;
  EXPECT_THROW(make_device_view(null_data.view, 0, "t"), std::invalid_argument);
  FakeDeviceView empty(request::DType::f32, {0, 4});
  empty.view.data = nullptr;
  EXPECT_NO_THROW(make_device_view(empty.view, 0, "t"));

  FakeDeviceView misaligned(request::DType::f32, {4});
  misaligned.view.byte_offset = 2;
  EXPECT_THAT([&] { make_device_view(misaligned.view, 0, "t"); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("not aligned")));

  FakeDeviceView negative(request::DType::f32, {4, -1});
  EXPECT_THROW(make_device_view(negative.view, 0, "t"), std::invalid_argument);

  // 17 dimensions of extent 2, each stride 3x the next: no two can merge.
  std::vector<int64_t> shape(17, 2), strides(17);
  int64_t stride = 1;
  for (size_t d = strides.size(); d-- > 0; stride *= 3)
    strides[d] = stride;
  FakeDeviceView too_deep(request::DType::u8, shape, strides);
  EXPECT_THAT([&] { make_device_view(too_deep.view, 0, "t"); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("at most 16")));
}

TEST(DeviceView, UnravelsFlatIndicesRowMajor) {
  EXPECT_EQ(unravel_index(0, {3, 4}), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(unravel_index(7, {3, 4}), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(unravel_index(23, {2, 3, 4}), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(unravel_index(0, {}), (std::vector<int64_t>{}));
}

TEST(DeviceView, ElementTypesFollowDTypes) {
  EXPECT_EQ(element_type(request::DType::bf16), ElementType::bf16);
  EXPECT_EQ(element_type(request::DType::boolean), ElementType::boolean);
  EXPECT_EQ(element_type(request::DType::u8), ElementType::u8);
}

// tensor::compare on real host tensors is the reference for the messages.
TEST(Incomparable, GivesTensorCompareMessagesForDtypeAndShapeMismatches) {
  const request::Tolerance tolerance{1e-3, 1e-3};
  const auto check = [&](request::DType expected_dtype, std::vector<int64_t> expected_shape,
                         request::DType actual_dtype, std::vector<int64_t> actual_shape) {
    const tensor::HostTensor expected = tensor::HostTensor::empty(expected_dtype, expected_shape);
    const tensor::HostTensor actual = tensor::HostTensor::empty(actual_dtype, actual_shape);
    FakeDeviceView expected_device(expected_dtype, expected_shape);
    FakeDeviceView actual_device(actual_dtype, actual_shape);
    const std::optional<tensor::Comparison> device =
        incomparable(expected_device.view, actual_device.view, tolerance);
    ASSERT_TRUE(device.has_value());
    const tensor::Comparison host = tensor::compare(expected.dl(), actual.dl(), tolerance);
    EXPECT_FALSE(device->compared);
    EXPECT_EQ(boost::json::serialize(tensor::to_json(*device)),
              boost::json::serialize(tensor::to_json(host)));
  };
  check(request::DType::f32, {2, 3}, request::DType::f16, {2, 3});
  check(request::DType::f32, {2, 3}, request::DType::f32, {3, 2});
  check(request::DType::i64, {4}, request::DType::f32, {2, 2});
  check(request::DType::f32, {}, request::DType::f32, {1});

  FakeDeviceView a(request::DType::f32, {2, 3}), b(request::DType::f32, {2, 3});
  EXPECT_FALSE(incomparable(a.view, b.view, tolerance).has_value());

  FakeDeviceView unknown_a(request::DType::f32, {2}), unknown_b(request::DType::f32, {2});
  unknown_a.view.dtype = unknown_b.view.dtype = {KEVAL_DTYPE_FLOAT, 8, 1};
  const std::optional<tensor::Comparison> unknown =
      incomparable(unknown_a.view, unknown_b.view, tolerance);
  ASSERT_TRUE(unknown.has_value());
  EXPECT_THAT(unknown->message, HasSubstr("cannot compare unsupported DLPack dtype"));
}

TEST(GpuType, ComesFromTheModelInTheDeviceName) {
  EXPECT_EQ(gpu_type_from_name("NVIDIA H100 80GB HBM3"), "H100");
  EXPECT_EQ(gpu_type_from_name("NVIDIA H100 PCIe"), "H100");
  EXPECT_EQ(gpu_type_from_name("NVIDIA H200"), "H200");
  EXPECT_EQ(gpu_type_from_name("NVIDIA A100-SXM4-80GB"), "A100");
  EXPECT_EQ(gpu_type_from_name("A100"), "A100");
  EXPECT_EQ(gpu_type_from_name("NVIDIA GH200 480GB"), "other");
  EXPECT_EQ(gpu_type_from_name("NVIDIA GeForce RTX 4090"), "other");
  EXPECT_EQ(gpu_type_from_name("NVIDIA L40S"), "other");
}

TEST(EmbeddedKernels, AreAFatbin) {
  ASSERT_GT(kDeviceKernelsFatbinSize, 16u);
  uint32_t magic = 0;
  std::memcpy(&magic, kDeviceKernelsFatbin, sizeof magic);
  EXPECT_EQ(magic, 0xBA55ED50u); // the fatbin container's magic number
  EXPECT_EQ(reinterpret_cast<uintptr_t>(kDeviceKernelsFatbin) % 64, 0u);
}

} // namespace
} // namespace keval::worker::detail
