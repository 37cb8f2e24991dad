// HostTensor: a dense row-major tensor in host memory, the form in which the core generates
// inputs, keeps reference outputs and compares results.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <keval/plugin.h>

#include "request/model.hpp"

namespace keval::tensor {

using request::DType;

class HostTensor {
public:
  // A float32 tensor of shape [0] without storage; also the state of a moved-from tensor.
  HostTensor();

  // A tensor of the given dtype and shape in a 64-byte-aligned buffer (a cache line, and the
  // widest vector load). Unlike torch.empty its bytes are zero, so nothing ever depends on
  // leftover memory. Throws std::invalid_argument on a negative dimension or a size overflow.
  static HostTensor empty(DType dtype, std::vector<int64_t> shape);

  // A dense copy of any CPU view: strides (in elements) and byte_offset are honoured. Throws
  // std::invalid_argument for a non-CPU view or a dtype keval does not handle.
  static HostTensor copy_of(const keval_dl_tensor& cpu_view);

  HostTensor(HostTensor&& other) noexcept;
  HostTensor& operator=(HostTensor&& other) noexcept;
  // Copies are explicit (clone) so a multi-megabyte buffer is never duplicated by accident.
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;
  ~HostTensor() = default;

  HostTensor clone() const;

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return nbytes_; }

  // Null when nbytes() == 0.
  void* data() { return buffer_.get(); }
  const void* data() const { return buffer_.get(); }
  std::span<uint8_t> bytes() { return {buffer_.get(), nbytes_}; }
  std::span<const uint8_t> bytes() const { return {buffer_.get(), nbytes_}; }

  // A DLPack view of this tensor (CPU, compact strides). Its pointers stay valid for as long as
  // this HostTensor lives, moves included: the view follows the tensor it was taken from.
  keval_dl_tensor& dl() { return view_; }
  const keval_dl_tensor& dl() const { return view_; }

  // Same dtype, same shape and bit-identical contents.
  bool same_bytes(const HostTensor& other) const;

private:
  struct FreeAligned {
    void operator()(uint8_t* buffer) const noexcept;
  };

  void swap(HostTensor& other) noexcept;
  // The view holds pointers into shape_ and buffer_; re-aims it after any change to them.
  void refresh_view() noexcept;

  DType dtype_ = DType::f32;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  size_t nbytes_ = 0;
  std::unique_ptr<uint8_t[], FreeAligned> buffer_;
  keval_dl_tensor view_{};
};

} // namespace keval::tensor
