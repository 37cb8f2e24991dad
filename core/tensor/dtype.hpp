// Element types on the host: DType <-> DLPack dtype, half/bfloat16 bit conversions, and reading
// or writing one element of any dtype as a double (generation and comparison work in doubles).
#pragma once

#include <cstdint>
#include <optional>

#include <keval/plugin.h>

#include "request/model.hpp"

namespace keval::tensor {

using request::DType;

keval_dl_dtype to_dl(DType dtype);
// nullopt for DLPack dtypes keval does not handle (complex, float8, lanes != 1, ...).
std::optional<DType> from_dl(keval_dl_dtype dtype);

bool is_floating(DType dtype); // f16, bf16, f32, f64
bool is_integral(DType dtype); // signed and unsigned integers and bool

// IEEE binary16 and bfloat16, round-to-nearest-even; Inf and NaN are preserved.
uint16_t float_to_half(float value);
float half_to_float(uint16_t bits);
uint16_t float_to_bfloat16(float value);
float bfloat16_to_float(uint16_t bits);

// Reads the element stored at `element` (exact for every dtype but int64 beyond 2^53). A bool
// reads as its raw byte, so a byte that is neither 0 nor 1 stays visible.
double read_element(DType dtype, const void* element);

// Writes `value` converted the way torch's .to(dtype) would: floats round to nearest (half and
// bfloat16 through float), integers truncate toward zero and saturate at the type's range (NaN
// gives 0), bool stores 1 for any nonzero value (NaN included) and 0 otherwise.
void write_element(DType dtype, void* element, double value);

} // namespace keval::tensor
