// The bytes a compact tensor of a dtype and shape holds, checked: every engine allocates, and
// checks what a peer announces, with this one rule.
#pragma once

#include "request/model.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace keval::worker::detail {

// Throws std::invalid_argument, naming `what`, for a negative extent or a size that overflows.
inline size_t tensor_bytes(request::DType dtype, const std::vector<int64_t>& shape,
                           const char* what = "allocate") {
  size_t bytes = request::dtype_size(dtype);
  for (int64_t extent : shape) {
    if (extent < 0)
      throw std::invalid_argument(std::string(what) + ": negative dimension " +
                                  std::to_string(extent));
    if (__builtin_mul_overflow(bytes, static_cast<size_t>(extent), &bytes))
      throw std::invalid_argument(std::string(what) + ": tensor size overflows");
  }
  return bytes;
}

} // namespace keval::worker::detail
