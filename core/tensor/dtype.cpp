#include "tensor/dtype.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "tensor/detail/float16.hpp"

namespace keval::tensor {
namespace {

template <typename T> T load(const void* element) {
  T value;
  std::memcpy(&value, element, sizeof value);
  return value;
}

template <typename T> void store(void* element, T value) {
  std::memcpy(element, &value, sizeof value);
}

// Casting a NaN or out-of-range double to an integer is undefined behaviour, so clamp first.
template <typename Int> Int saturating_cast(double value) {
  if (std::isnan(value))
    return 0;
  // min() is 0 or -2^digits and max() + 1 is 2^digits: both exact in double.
  if (value <= static_cast<double>(std::numeric_limits<Int>::min()))
    return std::numeric_limits<Int>::min();
  if (value >= std::ldexp(1.0, std::numeric_limits<Int>::digits))
    return std::numeric_limits<Int>::max();
  return static_cast<Int>(value);
}

[[noreturn]] void invalid_dtype() {
  throw std::invalid_argument("invalid keval DType value");
}

} // namespace

keval_dl_dtype to_dl(DType dtype) {
  switch (dtype) {
  case DType::f16:
    return {KEVAL_DTYPE_FLOAT, 16, 1};
  case DType::bf16:
    return {KEVAL_DTYPE_BFLOAT, 16, 1};
  case DType::f32:
    return {KEVAL_DTYPE_FLOAT, 32, 1};
  case DType::f64:
    return {KEVAL_DTYPE_FLOAT, 64, 1};
  case DType::i8:
    return {KEVAL_DTYPE_INT, 8, 1};
  case DType::i16:
    return {KEVAL_DTYPE_INT, 16, 1};
  case DType::i32:
    return {KEVAL_DTYPE_INT, 32, 1};
  case DType::i64:
    return {KEVAL_DTYPE_INT, 64, 1};
  case DType::u8:
    return {KEVAL_DTYPE_UINT, 8, 1};
  case DType::boolean:
    return {KEVAL_DTYPE_BOOL, 8, 1};
  }
  invalid_dtype();
}

std::optional<DType> from_dl(keval_dl_dtype dtype) {
  if (dtype.lanes != 1)
    return std::nullopt;
  switch (dtype.code) {
  case KEVAL_DTYPE_FLOAT:
    switch (dtype.bits) {
    case 16:
      return DType::f16;
    case 32:
      return DType::f32;
    case 64:
      return DType::f64;
    }
    break;
  case KEVAL_DTYPE_BFLOAT:
    if (dtype.bits == 16)
      return DType::bf16;
    break;
  case KEVAL_DTYPE_INT:
    switch (dtype.bits) {
    case 8:
      return DType::i8;
    case 16:
      return DType::i16;
    case 32:
      return DType::i32;
    case 64:
      return DType::i64;
    }
    break;
  case KEVAL_DTYPE_UINT:
    if (dtype.bits == 8)
      return DType::u8;
    break;
  case KEVAL_DTYPE_BOOL:
    if (dtype.bits == 8)
      return DType::boolean;
    break;
  }
  return std::nullopt;
}

bool is_floating(DType dtype) {
  return dtype == DType::f16 || dtype == DType::bf16 || dtype == DType::f32 || dtype == DType::f64;
}

bool is_integral(DType dtype) {
  return !is_floating(dtype);
}

uint16_t float_to_half(float value) {
  return detail::float_to_half_bits(value);
}
float half_to_float(uint16_t bits) {
  return detail::half_bits_to_float(bits);
}
uint16_t float_to_bfloat16(float value) {
  return detail::float_to_bfloat16_bits(value);
}
float bfloat16_to_float(uint16_t bits) {
  return detail::bfloat16_bits_to_float(bits);
}

double read_element(DType dtype, const void* element) {
  switch (dtype) {
  case DType::f16:
    return half_to_float(load<uint16_t>(element));
  case DType::bf16:
    return bfloat16_to_float(load<uint16_t>(element));
  case DType::f32:
    return load<float>(element);
  case DType::f64:
    return load<double>(element);
  case DType::i8:
    return load<int8_t>(element);
  case DType::i16:
    return load<int16_t>(element);
  case DType::i32:
    return load<int32_t>(element);
  case DType::i64:
    return static_cast<double>(load<int64_t>(element));
  case DType::u8:
  case DType::boolean:
    return load<uint8_t>(element);
  }
  invalid_dtype();
}

void write_element(DType dtype, void* element, double value) {
  switch (dtype) {
  case DType::f16:
    return store(element, float_to_half(static_cast<float>(value)));
  case DType::bf16:
    return store(element, float_to_bfloat16(static_cast<float>(value)));
  case DType::f32:
    return store(element, static_cast<float>(value));
  case DType::f64:
    return store(element, value);
  case DType::i8:
    return store(element, saturating_cast<int8_t>(value));
  case DType::i16:
    return store(element, saturating_cast<int16_t>(value));
  case DType::i32:
    return store(element, saturating_cast<int32_t>(value));
  case DType::i64:
    return store(element, saturating_cast<int64_t>(value));
  case DType::u8:
    return store(element, saturating_cast<uint8_t>(value));
  case DType::boolean:
    return store(element, static_cast<uint8_t>(value != 0.0 ? 1 : 0)); // NaN != 0: true
  }
  invalid_dtype();
}

} // namespace keval::tensor
