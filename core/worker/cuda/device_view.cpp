#include "worker/cuda/detail/device_view.hpp"

#include "tensor/dtype.hpp"

#include <cctype>
#include <cstring>
#include <stdexcept>

namespace keval::worker::detail {

ElementType element_type(request::DType dtype) {
  switch (dtype) {
  case request::DType::f16:
    return ElementType::f16;
  case request::DType::bf16:
    return ElementType::bf16;
  case request::DType::f32:
    return ElementType::f32;
  case request::DType::f64:
    return ElementType::f64;
  case request::DType::i8:
    return ElementType::i8;
  case request::DType::i16:
    return ElementType::i16;
  case request::DType::i32:
    return ElementType::i32;
  case request::DType::i64:
    return ElementType::i64;
  case request::DType::u8:
    return ElementType::u8;
  case request::DType::boolean:
    return ElementType::boolean;
  }
  throw std::invalid_argument("invalid keval DType value");
}

int64_t view_numel(const keval_dl_tensor& view) {
  int64_t numel = 1;
  for (int32_t d = 0; d < view.ndim; ++d)
    numel *= view.shape[d];
  return numel;
}

DeviceView make_device_view(const keval_dl_tensor& view, int ordinal, const char* what) {
  const auto fail = [&](const std::string& problem) {
    throw std::invalid_argument(std::string(what) + ": " + problem);
  };
  if (view.device.device_type != KEVAL_DEVICE_CUDA)
    fail("not a CUDA tensor (device type " + std::to_string(view.device.device_type) + ")");
  if (view.device.device_id != ordinal)
    fail("on CUDA device " + std::to_string(view.device.device_id) +
         ", but this engine runs on device " + std::to_string(ordinal));
  if (view.ndim < 0 || (view.ndim > 0 && view.shape == nullptr))
    fail("malformed shape");
  for (int32_t d = 0; d < view.ndim; ++d)
    if (view.shape[d] < 0)
      fail("negative dimension " + std::to_string(view.shape[d]));
  const std::optional<request::DType> dtype = tensor::from_dl(view.dtype);
  if (!dtype)
    fail("unsupported DLPack dtype (code " + std::to_string(view.dtype.code) + ", bits " +
         std::to_string(view.dtype.bits) + ", lanes " + std::to_string(view.dtype.lanes) + ")");
  const int64_t numel = view_numel(view);
  const uint64_t address = reinterpret_cast<uint64_t>(view.data) + view.byte_offset;
  const size_t element_size = request::dtype_size(*dtype);
  if (numel > 0 && view.data == nullptr)
    fail("null data pointer");
  // Kernels load whole elements; a misaligned one would be a device fault, not a wrong answer.
  if (address % element_size != 0)
    fail("data + byte_offset is not aligned to the " + std::to_string(element_size) +
         "-byte element size");

  DeviceView out{};
  out.data = address;
  struct Dim {
    int64_t extent, stride;
  };
  std::vector<Dim> kept;
  if (numel > 0) {
    int64_t compact_stride = numel;
    for (int32_t d = 0; d < view.ndim; ++d) {
      compact_stride /= view.shape[d];
      const Dim dim{view.shape[d], view.strides ? view.strides[d] : compact_stride};
      if (dim.extent == 1)
        continue; // never stepped over, whatever its stride
      if (!kept.empty() && kept.back().stride == dim.extent * dim.stride)
        kept.back() = {kept.back().extent * dim.extent, dim.stride}; // one run of memory
      else
        kept.push_back(dim);
    }
  }
  if (kept.size() > static_cast<size_t>(kMaxDeviceViewDims))
    fail(std::to_string(kept.size()) + " dimensions that cannot be merged; at most " +
         std::to_string(kMaxDeviceViewDims) + " are supported");
  out.ndim = static_cast<int32_t>(kept.size());
  out.dense = kept.empty() || (kept.size() == 1 && kept[0].stride == 1);
  for (size_t d = 0; d < kept.size(); ++d) {
    out.shape[d] = kept[d].extent;
    out.strides[d] = kept[d].stride;
  }
  return out;
}

std::vector<int64_t> unravel_index(uint64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    const auto extent = static_cast<uint64_t>(shape[d]);
    if (extent == 0)
      break;
    index[d] = static_cast<int64_t>(flat % extent);
    flat /= extent;
  }
  return index;
}

std::optional<tensor::Comparison> incomparable(const keval_dl_tensor& expected,
                                               const keval_dl_tensor& actual,
                                               const request::Tolerance& tolerance) {
  const bool same_dtype = std::memcmp(&expected.dtype, &actual.dtype, sizeof expected.dtype) == 0;
  const bool known_dtype = tensor::from_dl(expected.dtype).has_value();
  const bool same_shape =
      expected.ndim == actual.ndim &&
      (expected.ndim <= 0 ||
       (expected.shape != nullptr && actual.shape != nullptr &&
        std::memcmp(expected.shape, actual.shape, sizeof(int64_t) * expected.ndim) == 0));
  if (same_dtype && known_dtype && same_shape)
    return std::nullopt;
  // Host stand-ins with the same dtypes and shapes. tensor::compare returns before reading any
  // element when dtype or shape differ, so their one byte of storage is never read as a tensor.
  static const uint8_t stand_in_storage = 0;
  const auto stand_in = [](const keval_dl_tensor& view) {
    keval_dl_tensor host = view;
    host.data = const_cast<uint8_t*>(&stand_in_storage);
    host.device = {KEVAL_DEVICE_CPU, 0};
    host.strides = nullptr;
    host.byte_offset = 0;
    return host;
  };
  return tensor::compare(stand_in(expected), stand_in(actual), tolerance);
}

std::string gpu_type_from_name(const std::string& name) {
  for (const char* model : {"A100", "H100", "H200"}) {
    for (size_t at = name.find(model); at != std::string::npos; at = name.find(model, at + 1)) {
      const size_t end = at + std::strlen(model);
      const bool word_start = at == 0 || !std::isalnum(static_cast<unsigned char>(name[at - 1]));
      const bool number_ends =
          end == name.size() || !std::isdigit(static_cast<unsigned char>(name[end]));
      if (word_start && number_ends) // "GH200" is a Grace Hopper superchip, not an H200
        return model;
    }
  }
  return "other";
}

} // namespace keval::worker::detail
