#include "tensor/host_tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "tensor/detail/view.hpp"
#include "tensor/dtype.hpp"

namespace keval::tensor {
namespace {

constexpr size_t kAlignment = 64;

} // namespace

void HostTensor::FreeAligned::operator()(uint8_t* buffer) const noexcept {
  std::free(buffer);
}

HostTensor::HostTensor() : shape_{0} {
  refresh_view();
}

HostTensor HostTensor::empty(DType dtype, std::vector<int64_t> shape) {
  uint64_t numel = 1;
  for (int64_t dim : shape) {
    if (dim < 0)
      throw std::invalid_argument("HostTensor: negative dimension " + std::to_string(dim));
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dim), &numel))
      throw std::invalid_argument("HostTensor: element count overflows");
  }
  uint64_t nbytes = 0;
  if (numel > static_cast<uint64_t>(INT64_MAX) ||
      __builtin_mul_overflow(numel, request::dtype_size(dtype), &nbytes) ||
      nbytes > SIZE_MAX - kAlignment)
    throw std::invalid_argument("HostTensor: size overflows");

  HostTensor tensor;
  tensor.dtype_ = dtype;
  tensor.shape_ = std::move(shape);
  tensor.numel_ = static_cast<int64_t>(numel);
  tensor.nbytes_ = static_cast<size_t>(nbytes);
  if (nbytes > 0) {
    // aligned_alloc wants a multiple of the alignment; the padding is zeroed too so that
    // vectorised readers past the end never see uninitialised bytes.
    const size_t padded = (tensor.nbytes_ + kAlignment - 1) / kAlignment * kAlignment;
    auto* raw = static_cast<uint8_t*>(std::aligned_alloc(kAlignment, padded));
    if (raw == nullptr)
      throw std::bad_alloc();
    std::memset(raw, 0, padded);
    tensor.buffer_.reset(raw);
  }
  tensor.refresh_view();
  return tensor;
}

HostTensor HostTensor::copy_of(const keval_dl_tensor& cpu_view) {
  detail::require_cpu_view(cpu_view, "HostTensor::copy_of");
  const std::optional<DType> dtype = from_dl(cpu_view.dtype);
  if (!dtype)
    throw std::invalid_argument("HostTensor::copy_of: unsupported DLPack dtype (code " +
                                std::to_string(cpu_view.dtype.code) + ", bits " +
                                std::to_string(cpu_view.dtype.bits) + ")");
  HostTensor tensor = empty(*dtype, detail::view_shape(cpu_view));
  if (tensor.numel_ == 0)
    return tensor;
  if (detail::is_row_major(cpu_view)) {
    std::memcpy(tensor.data(), static_cast<const uint8_t*>(cpu_view.data) + cpu_view.byte_offset,
                tensor.nbytes_);
    return tensor;
  }
  const size_t element_size = request::dtype_size(*dtype);
  uint8_t* out = tensor.buffer_.get();
  detail::ElementWalker walker(cpu_view);
  for (int64_t i = 0; i < tensor.numel_; ++i) {
    if (i > 0)
      walker.next();
    std::memcpy(out + i * element_size, walker.address(), element_size);
  }
  return tensor;
}

HostTensor::HostTensor(HostTensor&& other) noexcept : HostTensor() {
  swap(other);
}

HostTensor& HostTensor::operator=(HostTensor&& other) noexcept {
  // Swapping leaves `other` holding our old buffer: it is freed when `other` goes, and
  // `other` stays a consistent tensor meanwhile.
  swap(other);
  return *this;
}

HostTensor HostTensor::clone() const {
  HostTensor copy = empty(dtype_, shape_);
  if (nbytes_ > 0)
    std::memcpy(copy.data(), data(), nbytes_);
  return copy;
}

bool HostTensor::same_bytes(const HostTensor& other) const {
  return dtype_ == other.dtype_ && shape_ == other.shape_ &&
         (nbytes_ == 0 || std::memcmp(data(), other.data(), nbytes_) == 0);
}

void HostTensor::swap(HostTensor& other) noexcept {
  std::swap(dtype_, other.dtype_);
  shape_.swap(other.shape_);
  std::swap(numel_, other.numel_);
  std::swap(nbytes_, other.nbytes_);
  buffer_.swap(other.buffer_);
  refresh_view();
  other.refresh_view();
}

void HostTensor::refresh_view() noexcept {
  view_.data = buffer_.get();
  view_.device = {KEVAL_DEVICE_CPU, 0};
  view_.ndim = static_cast<int32_t>(shape_.size());
  view_.dtype = to_dl(dtype_);
  view_.shape = shape_.data();
  view_.strides = nullptr;
  view_.byte_offset = 0;
}

} // namespace keval::tensor
