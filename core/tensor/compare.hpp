// Output comparison with torch.allclose semantics (equal_nan = false), plus the evidence a user
// needs to see why a kernel failed: counts, largest differences and the first mismatches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>
#include <keval/plugin.h>

#include "request/model.hpp"

namespace keval::tensor {

using request::DType;

// One element of the comparison, by its multi-dimensional index.
struct ElementReport {
  std::vector<int64_t> index;
  double expected = 0.0;
  double actual = 0.0;
};

inline constexpr size_t kMaxReportedMismatches = 8;

struct Comparison {
  bool match = false;
  // False when a dtype or shape mismatch (or a dtype keval does not handle) kept the elements
  // from being compared at all; `message` then says why and the counts below stay zero.
  bool compared = false;
  std::string message;        // one line; for compared tensors the text of summary()
  std::optional<DType> dtype; // of `expected`, when keval handles it
  request::Tolerance tolerance;
  int64_t numel = 0; // of `expected`
  int64_t mismatches = 0;
  double max_abs_diff = 0.0; // over elements finite on both sides
  double max_rel_diff = 0.0; // |actual - expected| / |expected| over those with expected != 0
  std::optional<ElementReport> max_abs_diff_at; // where max_abs_diff was first reached
  int64_t nan_in_expected = 0;
  int64_t nan_in_actual = 0;
  int64_t inf_in_actual = 0;
  std::vector<ElementReport> first_mismatches; // up to kMaxReportedMismatches, in index order
};

// Compares two CPU views (any strides). Floating elements pass when
// |actual - expected| <= atol + rtol * |expected| with both finite, or when both are the same
// infinity; NaN on either side fails. Integers compare exactly as values and bool by raw byte,
// so a poisoned 0xA5 byte matches neither false nor true. Throws std::invalid_argument for a
// non-CPU or malformed view; mismatched dtypes or shapes are a failed Comparison, not an error.
Comparison compare(const keval_dl_tensor& expected, const keval_dl_tensor& actual,
                   const request::Tolerance& tolerance);

// "1024 of 4096 elements differ (max abs diff 2.0 at [0, 17], expected 1.5 got 3.5;
// atol=0.01 rtol=0.01)", or "all 4096 elements match (...)"; the message for tensors that could
// not be compared.
std::string summary(const Comparison& comparison);

// Every field of the Comparison; non-finite numbers are written as "nan", "inf" or "-inf".
boost::json::object to_json(const Comparison& comparison);
// Reads what to_json wrote (a Comparison made in another process: the device verifier's). Throws
// std::invalid_argument naming the field that is missing or of the wrong kind.
Comparison comparison_from_json(const boost::json::object& o);

} // namespace keval::tensor
