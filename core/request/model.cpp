#include "request/model.hpp"

#include <stdexcept>

namespace keval::request {

namespace {

struct DTypeName {
  std::string_view name;
  DType dtype;
};

// Canonical names first (dtype_name returns these), then torch's aliases ("torch.float" is
// torch.float32, "byte" is torch.uint8 as in Tensor.byte(), "char" is torch.int8).
constexpr DTypeName kDTypeNames[] = {
    {"float32", DType::f32},  {"float16", DType::f16}, {"bfloat16", DType::bf16},
    {"float64", DType::f64},  {"int8", DType::i8},     {"int16", DType::i16},
    {"int32", DType::i32},    {"int64", DType::i64},   {"uint8", DType::u8},
    {"bool", DType::boolean}, {"float", DType::f32},   {"half", DType::f16},
    {"double", DType::f64},   {"char", DType::i8},     {"short", DType::i16},
    {"int", DType::i32},      {"long", DType::i64},    {"byte", DType::u8},
};

} // namespace

const char* dtype_name(DType dtype) {
  switch (dtype) {
  case DType::f16:
    return "float16";
  case DType::bf16:
    return "bfloat16";
  case DType::f32:
    return "float32";
  case DType::f64:
    return "float64";
  case DType::i8:
    return "int8";
  case DType::i16:
    return "int16";
  case DType::i32:
    return "int32";
  case DType::i64:
    return "int64";
  case DType::u8:
    return "uint8";
  case DType::boolean:
    return "bool";
  }
  return "unknown";
}

std::optional<DType> parse_dtype(std::string_view name) {
  constexpr std::string_view kTorchPrefix = "torch.";
  if (name.starts_with(kTorchPrefix))
    name.remove_prefix(kTorchPrefix.size());
  for (const auto& entry : kDTypeNames)
    if (entry.name == name)
      return entry.dtype;
  return std::nullopt;
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
  case DType::i8:
  case DType::u8:
  case DType::boolean:
    return 1;
  case DType::f16:
  case DType::bf16:
  case DType::i16:
    return 2;
  case DType::f32:
  case DType::i32:
    return 4;
  case DType::f64:
  case DType::i64:
    return 8;
  }
  return 0;
}

const char* init_kind_name(InitKind kind) {
  switch (kind) {
  case InitKind::randn:
    return "randn";
  case InitKind::uniform:
    return "uniform";
  case InitKind::zeros:
    return "zeros";
  case InitKind::ones:
    return "ones";
  case InitKind::full:
    return "full";
  case InitKind::arange:
    return "arange";
  }
  return "unknown";
}

int64_t TensorSpec::numel() const {
  int64_t count = 1;
  for (int64_t extent : shape) {
    if (extent < 0)
      throw std::invalid_argument("TensorSpec::numel: negative extent in shape");
    if (__builtin_mul_overflow(count, extent, &count))
      throw std::overflow_error("TensorSpec::numel: element count overflows int64");
  }
  return count;
}

const char* arg_type_name(ArgType type) {
  switch (type) {
  case ArgType::tensor:
    return "tensor";
  case ArgType::int_:
    return "int";
  case ArgType::float_:
    return "float";
  case ArgType::bool_:
    return "bool";
  case ArgType::str:
    return "str";
  }
  return "unknown";
}

const char* role_name(Role role) {
  switch (role) {
  case Role::input:
    return "input";
  case Role::output:
    return "output";
  case Role::inout:
    return "inout";
  }
  return "unknown";
}

} // namespace keval::request
