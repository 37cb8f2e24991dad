// Helpers for walking CPU keval_dl_tensor views, strided or not.
#pragma once

#include <cstdint>
#include <vector>

#include <keval/plugin.h>

namespace keval::tensor::detail {

// Throws std::invalid_argument, naming the view `what`, unless `view` is a well-formed CPU view
// (the core only ever reads or writes host memory here).
void require_cpu_view(const keval_dl_tensor& view, const char* what);

std::vector<int64_t> view_shape(const keval_dl_tensor& view);
int64_t view_numel(const keval_dl_tensor& view);
// True when the view's elements are laid out densely in row-major order, so one memcpy or
// memset covers them (dimensions of size 1 may carry any stride).
bool is_row_major(const keval_dl_tensor& view);

// Visits the elements of a view in row-major order of their logical index, following the
// view's strides (negative and zero strides included) and its byte_offset.
class ElementWalker {
public:
  explicit ElementWalker(const keval_dl_tensor& view);

  uint8_t* address() const { return base_ + offset_ * element_size_; }
  const std::vector<int64_t>& index() const { return index_; }
  // Moves to the next element; call it at most numel - 1 times.
  void next();

private:
  uint8_t* base_;
  int64_t element_size_;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_; // in elements
  std::vector<int64_t> index_;
  int64_t offset_ = 0; // in elements, from base_
};

} // namespace keval::tensor::detail
