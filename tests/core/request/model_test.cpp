// The request model's names and sizes.
#include "request/model.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace keval::request {
namespace {

constexpr DType kAllDTypes[] = {DType::f16, DType::bf16, DType::f32, DType::f64, DType::i8,
                                DType::i16, DType::i32,  DType::i64, DType::u8,  DType::boolean};

TEST(DTypeNames, CanonicalNamesRoundTrip) {
  for (DType dtype : kAllDTypes) {
    EXPECT_EQ(parse_dtype(dtype_name(dtype)), dtype) << dtype_name(dtype);
    EXPECT_EQ(parse_dtype(std::string("torch.") + dtype_name(dtype)), dtype) << dtype_name(dtype);
  }
}

TEST(DTypeNames, CanonicalSpellings) {
  EXPECT_STREQ(dtype_name(DType::f32), "float32");
  EXPECT_STREQ(dtype_name(DType::f16), "float16");
  EXPECT_STREQ(dtype_name(DType::bf16), "bfloat16");
  EXPECT_STREQ(dtype_name(DType::f64), "float64");
  EXPECT_STREQ(dtype_name(DType::i8), "int8");
  EXPECT_STREQ(dtype_name(DType::i16), "int16");
  EXPECT_STREQ(dtype_name(DType::i32), "int32");
  EXPECT_STREQ(dtype_name(DType::i64), "int64");
  EXPECT_STREQ(dtype_name(DType::u8), "uint8");
  EXPECT_STREQ(dtype_name(DType::boolean), "bool");
}

TEST(DTypeNames, TorchAliases) {
  EXPECT_EQ(parse_dtype("float"), DType::f32);
  EXPECT_EQ(parse_dtype("half"), DType::f16);
  EXPECT_EQ(parse_dtype("double"), DType::f64);
  EXPECT_EQ(parse_dtype("char"), DType::i8);
  EXPECT_EQ(parse_dtype("short"), DType::i16);
  EXPECT_EQ(parse_dtype("int"), DType::i32);
  EXPECT_EQ(parse_dtype("long"), DType::i64);
  EXPECT_EQ(parse_dtype("byte"), DType::u8);
  EXPECT_EQ(parse_dtype("torch.long"), DType::i64);
}

TEST(DTypeNames, UnknownNames) {
  for (const char* name :
       {"", "torch.", "complex64", "Float32", "float8", "torch.torch.float", " float32", "uint16"})
    EXPECT_FALSE(parse_dtype(name).has_value()) << name;
}

TEST(DTypeSize, Bytes) {
  EXPECT_EQ(dtype_size(DType::boolean), 1u);
  EXPECT_EQ(dtype_size(DType::i8), 1u);
  EXPECT_EQ(dtype_size(DType::u8), 1u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i16), 2u);
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::i32), 4u);
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
}

TEST(EnumNames, InitKindArgTypeRole) {
  EXPECT_STREQ(init_kind_name(InitKind::randn), "randn");
  EXPECT_STREQ(init_kind_name(InitKind::uniform), "uniform");
  EXPECT_STREQ(init_kind_name(InitKind::zeros), "zeros");
  EXPECT_STREQ(init_kind_name(InitKind::ones), "ones");
  EXPECT_STREQ(init_kind_name(InitKind::full), "full");
  EXPECT_STREQ(init_kind_name(InitKind::arange), "arange");
  EXPECT_STREQ(arg_type_name(ArgType::tensor), "tensor");
  EXPECT_STREQ(arg_type_name(ArgType::int_), "int");
  EXPECT_STREQ(arg_type_name(ArgType::float_), "float");
  EXPECT_STREQ(arg_type_name(ArgType::bool_), "bool");
  EXPECT_STREQ(arg_type_name(ArgType::str), "str");
  EXPECT_STREQ(role_name(Role::input), "input");
  EXPECT_STREQ(role_name(Role::output), "output");
  EXPECT_STREQ(role_name(Role::inout), "inout");
}

TEST(TensorSpecNumel, ProductOfShape) {
  TensorSpec spec;
  EXPECT_EQ(spec.numel(), 1); // 0-d tensor
  spec.shape = {2, 3, 4};
  EXPECT_EQ(spec.numel(), 24);
  spec.dtype = DType::f64;
  EXPECT_EQ(spec.nbytes(), 192u);
}

TEST(TensorSpecNumel, OverflowThrows) {
  TensorSpec spec;
  spec.shape = {int64_t{1} << 32, int64_t{1} << 31};
  EXPECT_THROW(spec.numel(), std::overflow_error);
  spec.shape = {4, -1};
  EXPECT_THROW(spec.numel(), std::invalid_argument);
}

} // namespace
} // namespace keval::request
