#include "tensor/compare.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include <boost/json/array.hpp>
#include <boost/json/value.hpp>

#include "tensor/detail/view.hpp"
#include "tensor/dtype.hpp"

namespace keval::tensor {
namespace {

std::string dtype_text(keval_dl_dtype dtype) {
  if (const std::optional<DType> known = from_dl(dtype))
    return request::dtype_name(*known);
  return "unsupported DLPack dtype (code " + std::to_string(dtype.code) + ", bits " +
         std::to_string(dtype.bits) + ", lanes " + std::to_string(dtype.lanes) + ")";
}

std::string index_text(const std::vector<int64_t>& index) {
  std::string text = "[";
  for (size_t d = 0; d < index.size(); ++d)
    text += (d > 0 ? ", " : "") + std::to_string(index[d]);
  return text + "]";
}

// Shortest round-trip text, with ".0" on integral values so floats read as floats ("2.0").
template <typename Float> std::string float_text(Float value) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value > 0 ? "inf" : "-inf";
  char buffer[64];
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, value).ptr;
  std::string text(buffer, end);
  if (text.find_first_of(".e") == std::string::npos)
    text += ".0";
  return text;
}

// A value as its dtype would print it: float32 values (and half, bfloat16) through float so that
// 0.1f shows as 0.1, not 0.10000000149011612.
std::string value_text(double value, std::optional<DType> dtype) {
  if (dtype && is_integral(*dtype) && std::abs(value) < 0x1p63)
    return std::to_string(static_cast<int64_t>(value));
  if (dtype == DType::f64)
    return float_text(value);
  return float_text(static_cast<float>(value));
}

// Integers are compared as int64 so int64 values beyond 2^53 stay exact.
int64_t read_integer(DType dtype, const void* element) {
  if (dtype == DType::i64) {
    int64_t value;
    std::memcpy(&value, element, sizeof value);
    return value;
  }
  return static_cast<int64_t>(read_element(dtype, element));
}

boost::json::value json_number(double value) {
  if (std::isfinite(value))
    return value;
  return boost::json::value(std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf"));
}

boost::json::object to_json(const ElementReport& element) {
  boost::json::array index;
  for (int64_t i : element.index)
    index.push_back(i);
  return {{"index", std::move(index)},
          {"expected", json_number(element.expected)},
          {"actual", json_number(element.actual)}};
}

// Fills the element-wise fields of `result`; both views have the same dtype and shape.
void compare_elements(const keval_dl_tensor& expected, const keval_dl_tensor& actual,
                      Comparison& result) {
  const DType dtype = *result.dtype;
  const bool integral = is_integral(dtype);
  const double atol = result.tolerance.atol, rtol = result.tolerance.rtol;
  detail::ElementWalker expected_at(expected), actual_at(actual);
  for (int64_t i = 0; i < result.numel; ++i) {
    if (i > 0) {
      expected_at.next();
      actual_at.next();
    }
    double e, a;
    bool close;
    if (integral) {
      const int64_t e_int = read_integer(dtype, expected_at.address());
      const int64_t a_int = read_integer(dtype, actual_at.address());
      e = static_cast<double>(e_int);
      a = static_cast<double>(a_int);
      close = e_int == a_int;
    } else {
      e = read_element(dtype, expected_at.address());
      a = read_element(dtype, actual_at.address());
      result.nan_in_expected += std::isnan(e);
      result.nan_in_actual += std::isnan(a);
      result.inf_in_actual += std::isinf(a);
      // Like torch.isclose: non-finite pairs must be equal (same infinity); NaN never is.
      close = (std::isfinite(e) && std::isfinite(a)) ? std::abs(a - e) <= atol + rtol * std::abs(e)
                                                     : a == e;
    }
    if (std::isfinite(e) && std::isfinite(a)) {
      const double diff = std::abs(a - e);
      if (!result.max_abs_diff_at || diff > result.max_abs_diff) {
        result.max_abs_diff = diff;
        result.max_abs_diff_at = ElementReport{actual_at.index(), e, a};
      }
      if (e != 0.0)
        result.max_rel_diff = std::max(result.max_rel_diff, diff / std::abs(e));
    }
    if (!close) {
      ++result.mismatches;
      if (result.first_mismatches.size() < kMaxReportedMismatches)
        result.first_mismatches.push_back({actual_at.index(), e, a});
    }
  }
}

} // namespace

Comparison compare(const keval_dl_tensor& expected, const keval_dl_tensor& actual,
                   const request::Tolerance& tolerance) {
  detail::require_cpu_view(expected, "compare: expected");
  detail::require_cpu_view(actual, "compare: actual");
  Comparison result;
  result.tolerance = tolerance;
  result.dtype = from_dl(expected.dtype);
  result.numel = detail::view_numel(expected);

  std::string problems;
  const auto add_problem = [&](const std::string& problem) {
    problems += (problems.empty() ? "" : "; ") + problem;
  };
  const bool same_dtype = std::memcmp(&expected.dtype, &actual.dtype, sizeof expected.dtype) == 0;
  if (!same_dtype)
    add_problem("dtype mismatch: expected " + dtype_text(expected.dtype) + ", got " +
                dtype_text(actual.dtype));
  else if (!result.dtype)
    add_problem("cannot compare " + dtype_text(expected.dtype));
  const std::vector<int64_t> expected_shape = detail::view_shape(expected);
  const std::vector<int64_t> actual_shape = detail::view_shape(actual);
  if (expected_shape != actual_shape)
    add_problem("shape mismatch: expected " + index_text(expected_shape) + ", got " +
                index_text(actual_shape));
  if (!problems.empty()) {
    result.message = problems;
    return result;
  }

  compare_elements(expected, actual, result);
  result.compared = true;
  result.match = result.mismatches == 0;
  result.message = summary(result);
  return result;
}

std::string summary(const Comparison& comparison) {
  if (!comparison.compared)
    return comparison.message;
  const auto value = [&](double v) { return value_text(v, comparison.dtype); };
  const std::string tolerance = "atol=" + float_text(comparison.tolerance.atol) +
                                " rtol=" + float_text(comparison.tolerance.rtol);
  if (comparison.match)
    return "all " + std::to_string(comparison.numel) + " elements match (max abs diff " +
           value(comparison.max_abs_diff) + "; " + tolerance + ")";

  // Point at the worst finite difference; when there is none (NaN or Inf mismatches only), at
  // the first mismatch.
  const bool worst_is_finite_diff = comparison.max_abs_diff_at && comparison.max_abs_diff > 0.0;
  const ElementReport& shown =
      worst_is_finite_diff ? *comparison.max_abs_diff_at : comparison.first_mismatches.front();
  std::string text = std::to_string(comparison.mismatches) + " of " +
                     std::to_string(comparison.numel) + " elements differ (";
  text += worst_is_finite_diff ? "max abs diff " + value(comparison.max_abs_diff) + " at "
                               : std::string("first at ");
  text += index_text(shown.index) + ", expected " + value(shown.expected) + " got " +
          value(shown.actual);
  if (comparison.nan_in_actual > 0)
    text += ", " + std::to_string(comparison.nan_in_actual) + " NaN in actual";
  if (comparison.nan_in_expected > 0)
    text += ", " + std::to_string(comparison.nan_in_expected) + " NaN in expected";
  return text + "; " + tolerance + ")";
}

boost::json::object to_json(const Comparison& comparison) {
  boost::json::array first_mismatches;
  for (const ElementReport& element : comparison.first_mismatches)
    first_mismatches.push_back(to_json(element));
  boost::json::value max_abs_diff_at = nullptr;
  if (comparison.max_abs_diff_at)
    max_abs_diff_at = to_json(*comparison.max_abs_diff_at);
  boost::json::value dtype = nullptr;
  if (comparison.dtype)
    dtype = request::dtype_name(*comparison.dtype);
  return {{"match", comparison.match},
          {"compared", comparison.compared},
          {"message", comparison.message},
          {"dtype", std::move(dtype)},
          {"numel", comparison.numel},
          {"mismatches", comparison.mismatches},
          {"max_abs_diff", json_number(comparison.max_abs_diff)},
          {"max_rel_diff", json_number(comparison.max_rel_diff)},
          {"max_abs_diff_at", std::move(max_abs_diff_at)},
          {"nan_in_expected", comparison.nan_in_expected},
          {"nan_in_actual", comparison.nan_in_actual},
          {"inf_in_actual", comparison.inf_in_actual},
          {"first_mismatches", std::move(first_mismatches)},
          {"atol", json_number(comparison.tolerance.atol)},
          {"rtol", json_number(comparison.tolerance.rtol)}};
}

namespace {

const boost::json::value& field(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  if (v == nullptr)
    throw std::invalid_argument(std::string("comparison: '") + key + "' is missing");
  return *v;
}

double number_from_json(const boost::json::value& v, const char* key) {
  if (v.is_number())
    return v.to_number<double>();
  if (v.is_string()) {
    if (v.as_string() == "nan")
      return std::numeric_limits<double>::quiet_NaN();
    if (v.as_string() == "inf")
      return std::numeric_limits<double>::infinity();
    if (v.as_string() == "-inf")
      return -std::numeric_limits<double>::infinity();
  }
  throw std::invalid_argument(std::string("comparison: '") + key + "' is not a number");
}

int64_t integer_from_json(const boost::json::object& o, const char* key) {
  const boost::json::value& v = field(o, key);
  if (!v.is_int64() && !v.is_uint64())
    throw std::invalid_argument(std::string("comparison: '") + key + "' is not an integer");
  return v.to_number<int64_t>();
}

ElementReport element_from_json(const boost::json::value& v) {
  if (!v.is_object())
    throw std::invalid_argument("comparison: an element report is not an object");
  const boost::json::object& o = v.as_object();
  ElementReport element;
  const boost::json::value& index = field(o, "index");
  if (!index.is_array())
    throw std::invalid_argument("comparison: 'index' is not an array");
  for (const boost::json::value& i : index.as_array()) {
    if (!i.is_int64())
      throw std::invalid_argument("comparison: 'index' holds a non-integer");
    element.index.push_back(i.as_int64());
  }
  element.expected = number_from_json(field(o, "expected"), "expected");
  element.actual = number_from_json(field(o, "actual"), "actual");
  return element;
}

bool bool_from_json(const boost::json::object& o, const char* key) {
  const boost::json::value& v = field(o, key);
  if (!v.is_bool())
    throw std::invalid_argument(std::string("comparison: '") + key + "' is not a boolean");
  return v.as_bool();
}

} // namespace

Comparison comparison_from_json(const boost::json::object& o) {
  Comparison c;
  c.match = bool_from_json(o, "match");
  c.compared = bool_from_json(o, "compared");
  const boost::json::value& message = field(o, "message");
  if (!message.is_string())
    throw std::invalid_argument("comparison: 'message' is not a string");
  c.message = std::string(message.as_string());
  if (const boost::json::value& dtype = field(o, "dtype"); !dtype.is_null()) {
    if (!dtype.is_string())
      throw std::invalid_argument("comparison: 'dtype' is not a string");
    c.dtype = request::parse_dtype(std::string_view(dtype.as_string()));
    if (!c.dtype)
      throw std::invalid_argument("comparison: 'dtype' names no dtype");
  }
  c.numel = integer_from_json(o, "numel");
  c.mismatches = integer_from_json(o, "mismatches");
  c.max_abs_diff = number_from_json(field(o, "max_abs_diff"), "max_abs_diff");
  c.max_rel_diff = number_from_json(field(o, "max_rel_diff"), "max_rel_diff");
  if (const boost::json::value& at = field(o, "max_abs_diff_at"); !at.is_null())
    c.max_abs_diff_at = element_from_json(at);
  c.nan_in_expected = integer_from_json(o, "nan_in_expected");
  c.nan_in_actual = integer_from_json(o, "nan_in_actual");
  c.inf_in_actual = integer_from_json(o, "inf_in_actual");
  const boost::json::value& first = field(o, "first_mismatches");
  if (!first.is_array())
    throw std::invalid_argument("comparison: 'first_mismatches' is not an array");
  for (const boost::json::value& element : first.as_array())
    c.first_mismatches.push_back(element_from_json(element));
  c.tolerance.atol = number_from_json(field(o, "atol"), "atol");
  c.tolerance.rtol = number_from_json(field(o, "rtol"), "rtol");
  return c;
}

} // namespace keval::tensor
