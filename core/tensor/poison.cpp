#include "tensor/poison.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

#include "tensor/detail/view.hpp"
#include "tensor/dtype.hpp"

namespace keval::tensor {
namespace {

constexpr uint8_t kPoisonByte = 0xA5;

// One element's poison pattern, little-endian like the host: the canonical quiet NaN of each
// floating format, 0xA5 bytes otherwise.
void poison_pattern(DType dtype, uint8_t* pattern) {
  const auto put = [&](auto bits) { std::memcpy(pattern, &bits, sizeof bits); };
  switch (dtype) {
  case DType::f16:
    return put(uint16_t{0x7E00});
  case DType::bf16:
    return put(uint16_t{0x7FC0});
  case DType::f32:
    return put(uint32_t{0x7FC00000});
  case DType::f64:
    return put(uint64_t{0x7FF8000000000000});
  default:
    std::memset(pattern, kPoisonByte, request::dtype_size(dtype));
  }
}

} // namespace

void poison(HostTensor& tensor) {
  poison(tensor.dl());
}

void poison(keval_dl_tensor& cpu_view) {
  detail::require_cpu_view(cpu_view, "poison");
  const std::optional<DType> dtype = from_dl(cpu_view.dtype);
  if (!dtype)
    throw std::invalid_argument("poison: unsupported DLPack dtype (code " +
                                std::to_string(cpu_view.dtype.code) + ", bits " +
                                std::to_string(cpu_view.dtype.bits) + ")");
  const int64_t numel = detail::view_numel(cpu_view);
  if (numel == 0)
    return;
  const size_t element_size = request::dtype_size(*dtype);
  uint8_t pattern[8];
  poison_pattern(*dtype, pattern);

  if (is_integral(*dtype) && detail::is_row_major(cpu_view)) {
    std::memset(static_cast<uint8_t*>(cpu_view.data) + cpu_view.byte_offset, kPoisonByte,
                static_cast<size_t>(numel) * element_size);
    return;
  }
  detail::ElementWalker walker(cpu_view);
  for (int64_t i = 0; i < numel; ++i) {
    if (i > 0)
      walker.next();
    std::memcpy(walker.address(), pattern, element_size);
  }
}

} // namespace keval::tensor
