#include "tensor/detail/view.hpp"

#include <stdexcept>
#include <string>

namespace keval::tensor::detail {

void require_cpu_view(const keval_dl_tensor& view, const char* what) {
  const auto fail = [&](const std::string& problem) {
    throw std::invalid_argument(std::string(what) + ": " + problem);
  };
  if (view.device.device_type != KEVAL_DEVICE_CPU)
    fail("not a CPU tensor (device type " + std::to_string(view.device.device_type) + ")");
  if (view.ndim < 0 || (view.ndim > 0 && view.shape == nullptr))
    fail("malformed shape");
  for (int32_t d = 0; d < view.ndim; ++d)
    if (view.shape[d] < 0)
      fail("negative dimension " + std::to_string(view.shape[d]));
  if (view.data == nullptr && view_numel(view) > 0)
    fail("null data pointer");
  if (view.dtype.bits == 0 || view.dtype.bits % 8 != 0)
    fail("element size of " + std::to_string(view.dtype.bits) + " bits is not whole bytes");
}

std::vector<int64_t> view_shape(const keval_dl_tensor& view) {
  return std::vector<int64_t>(view.shape, view.shape + view.ndim);
}

int64_t view_numel(const keval_dl_tensor& view) {
  int64_t numel = 1;
  for (int32_t d = 0; d < view.ndim; ++d)
    numel *= view.shape[d];
  return numel;
}

bool is_row_major(const keval_dl_tensor& view) {
  if (view.strides == nullptr)
    return true;
  int64_t expected_stride = 1;
  for (int32_t d = view.ndim; d-- > 0;) {
    if (view.shape[d] != 1 && view.strides[d] != expected_stride)
      return false;
    expected_stride *= view.shape[d];
  }
  return true;
}

ElementWalker::ElementWalker(const keval_dl_tensor& view)
    : base_(static_cast<uint8_t*>(view.data) + view.byte_offset),
      element_size_(view.dtype.bits / 8), shape_(view_shape(view)), strides_(shape_.size()),
      index_(shape_.size(), 0) {
  if (view.strides != nullptr) {
    strides_.assign(view.strides, view.strides + view.ndim);
  } else {
    int64_t stride = 1;
    for (size_t d = shape_.size(); d-- > 0;) {
      strides_[d] = stride;
      stride *= shape_[d];
    }
  }
}

void ElementWalker::next() {
  for (size_t d = shape_.size(); d-- > 0;) {
    ++index_[d];
    offset_ += strides_[d];
    if (index_[d] < shape_[d])
      return;
    offset_ -= strides_[d] * shape_[d];
    index_[d] = 0;
  }
}

} // namespace keval::tensor::detail
