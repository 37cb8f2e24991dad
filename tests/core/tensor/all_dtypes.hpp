// Every dtype keval knows, for the tensor tests that go over all of them.
#pragma once

#include "request/model.hpp"

namespace keval::tensor::test {

inline constexpr request::DType kAllDTypes[] = {
    request::DType::f16, request::DType::bf16,   request::DType::f32, request::DType::f64,
    request::DType::i8,  request::DType::i16,    request::DType::i32, request::DType::i64,
    request::DType::u8,  request::DType::boolean};

} // namespace keval::tensor::test
