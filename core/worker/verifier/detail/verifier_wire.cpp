#include "worker/verifier/detail/verifier_wire.hpp"

#include "common/json_fields.hpp"

#include <bit>
#include <cstddef>
#include <cstring>

#include <boost/json/array.hpp>

namespace keval::worker::verifier::detail {

namespace json = boost::json;

namespace {

// At most this many dimensions in a view or shape: keval's tensors have a handful.
constexpr size_t kMaxDims = 16;

const json::value& at(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr)
    throw BadRequest(std::string("'") + key + "' is missing");
  return *v;
}

std::vector<int64_t> int_list(const json::value& v, const char* key) {
  if (!v.is_array() || v.as_array().size() > kMaxDims)
    throw BadRequest(std::string("'") + key + "' is not an array of at most " +
                     std::to_string(kMaxDims) + " integers");
  std::vector<int64_t> out;
  for (const json::value& x : v.as_array()) {
    if (!x.is_int64() || x.as_int64() < 0)
      throw BadRequest(std::string("'") + key + "' holds something but a non-negative integer");
    out.push_back(x.as_int64());
  }
  return out;
}

} // namespace

json::object view_to_json(const keval_dl_tensor& view) {
  json::array shape, dtype{view.dtype.code, view.dtype.bits, view.dtype.lanes};
  for (int32_t k = 0; k < view.ndim; ++k)
    shape.push_back(view.shape[k]);
  json::object o{{"at", reinterpret_cast<uintptr_t>(view.data)},
                 {"offset", view.byte_offset},
                 {"dtype", std::move(dtype)},
                 {"shape", std::move(shape)}};
  if (view.strides != nullptr) {
    json::array strides;
    for (int32_t k = 0; k < view.ndim; ++k)
      strides.push_back(view.strides[k]);
    o["strides"] = std::move(strides);
  }
  return o;
}

uint64_t ReadView::extent_bytes() const {
  const uint64_t element = (dl.dtype.bits / 8u) * dl.dtype.lanes;
  // The last element reached, in elements: compact row-major where there are no strides.
  uint64_t last = 0, stride = 1;
  for (size_t k = shape.size(); k-- > 0;) {
    if (shape[k] == 0)
      return 0;
    const uint64_t step = strides.empty() ? stride : static_cast<uint64_t>(strides[k]);
    last += static_cast<uint64_t>(shape[k] - 1) * step;
    stride *= static_cast<uint64_t>(shape[k]);
  }
  return (last + 1) * element;
}

std::unique_ptr<ReadView> view_from_json(const json::object& o) {
  auto view = std::make_unique<ReadView>();
  view->at = uint_at(o, "at");
  view->dl.byte_offset = uint_at(o, "offset");
  const json::value& dtype = at(o, "dtype");
  const std::vector<int64_t> code_bits_lanes = int_list(dtype, "dtype");
  if (code_bits_lanes.size() != 3)
    throw BadRequest("'dtype' is not [code, bits, lanes]");
  const int64_t bits = code_bits_lanes[1];
  if ((bits != 8 && bits != 16 && bits != 32 && bits != 64) || code_bits_lanes[2] != 1 ||
      code_bits_lanes[0] > 255)
    throw BadRequest("'dtype' is not one keval handles (bits 8, 16, 32 or 64, one lane)");
  view->dl.dtype.code = static_cast<uint8_t>(code_bits_lanes[0]);
  view->dl.dtype.bits = static_cast<uint8_t>(bits);
  view->dl.dtype.lanes = 1;
  view->shape = int_list(at(o, "shape"), "shape");
  if (const json::value* strides = o.if_contains("strides")) {
    view->strides = int_list(*strides, "strides");
    if (view->strides.size() != view->shape.size())
      throw BadRequest("'strides' and 'shape' differ in length");
  }
  // Elements past 2^62 bytes overflow the extent's arithmetic; no device has them.
  for (int64_t n : view->shape)
    if (n > (int64_t(1) << 40))
      throw BadRequest("'shape' holds a dimension past 2^40");
  for (int64_t s : view->strides)
    if (s > (int64_t(1) << 40))
      throw BadRequest("'strides' holds a stride past 2^40");
  view->dl.ndim = static_cast<int32_t>(view->shape.size());
  view->dl.shape = view->shape.data();
  view->dl.strides = view->strides.empty() ? nullptr : view->strides.data();
  return view;
}

json::value exact_doubles(const json::value& v) {
  if (v.is_double())
    return json::object{{"f64", std::bit_cast<uint64_t>(v.as_double())}};
  if (v.is_array()) {
    json::array out;
    for (const json::value& x : v.as_array())
      out.push_back(exact_doubles(x));
    return out;
  }
  if (v.is_object()) {
    json::object out;
    for (const auto& [key, x] : v.as_object())
      out[key] = exact_doubles(x);
    return out;
  }
  return v;
}

json::value from_exact_doubles(const json::value& v) {
  if (v.is_object()) {
    const json::object& o = v.as_object();
    if (o.size() == 1 && o.contains("f64")) {
      const json::value& bits = o.at("f64");
      if (!bits.is_uint64() && !(bits.is_int64() && bits.as_int64() >= 0))
        throw BadRequest("'f64' is not a double's bits");
      return std::bit_cast<double>(bits.to_number<uint64_t>());
    }
    json::object out;
    for (const auto& [key, x] : o)
      out[key] = from_exact_doubles(x);
    return out;
  }
  if (v.is_array()) {
    json::array out;
    for (const json::value& x : v.as_array())
      out.push_back(from_exact_doubles(x));
    return out;
  }
  return v;
}

json::object init_to_json(const request::TensorInit& init) {
  json::object o{{"kind", request::init_kind_name(init.kind)},
                 {"mean", init.mean},
                 {"std", init.std},
                 {"low", init.low},
                 {"high", init.high},
                 {"fill_value", init.fill_value},
                 {"start", init.start},
                 {"step", init.step}};
  if (init.seed)
    o["seed"] = *init.seed;
  return o;
}

request::TensorInit init_from_json(const json::object& o) {
  request::TensorInit init;
  const std::string kind = string_at(o, "kind");
  bool known = false;
  for (request::InitKind k :
       {request::InitKind::randn, request::InitKind::uniform, request::InitKind::zeros,
        request::InitKind::ones, request::InitKind::full, request::InitKind::arange})
    if (kind == request::init_kind_name(k)) {
      init.kind = k;
      known = true;
    }
  if (!known)
    throw BadRequest("'kind' names no tensor init: '" + kind + "'");
  if (o.contains("seed"))
    init.seed = uint_at(o, "seed");
  init.mean = number_at(o, "mean");
  init.std = number_at(o, "std");
  init.low = number_at(o, "low");
  init.high = number_at(o, "high");
  init.fill_value = number_at(o, "fill_value");
  init.start = number_at(o, "start");
  init.step = number_at(o, "step");
  return init;
}

AbstractAddress abstract_address(const std::string& name) {
  AbstractAddress out;
  if (name.size() < 2 || name.front() != '@' || name.size() >= sizeof(out.address.sun_path))
    throw BadRequest("not an abstract socket's name: '" + name + "'");
  out.address.sun_family = AF_UNIX;
  std::memcpy(out.address.sun_path + 1, name.data() + 1, name.size() - 1); // sun_path[0]: '\0'
  out.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  return out;
}

const json::object& object_at(const json::object& o, const char* key) {
  return json_fields::object_field<BadRequest>(o, key);
}
int64_t int_at(const json::object& o, const char* key) {
  return json_fields::int_field<BadRequest>(o, key);
}
uint64_t uint_at(const json::object& o, const char* key) {
  return json_fields::uint_field<BadRequest>(o, key);
}
double number_at(const json::object& o, const char* key) {
  return json_fields::number_field<BadRequest>(o, key);
}
bool bool_at(const json::object& o, const char* key) {
  return json_fields::bool_field<BadRequest>(o, key);
}
std::string string_at(const json::object& o, const char* key) {
  return json_fields::string_field<BadRequest>(o, key);
}

std::vector<int64_t> shape_at(const json::object& o, const char* key) {
  return int_list(at(o, key), key);
}

request::DType dtype_at(const json::object& o, const char* key) {
  const std::string name = string_at(o, key);
  const std::optional<request::DType> dtype = request::parse_dtype(name);
  if (!dtype)
    throw BadRequest("'" + std::string(key) + "' names no dtype: '" + name + "'");
  return *dtype;
}

} // namespace keval::worker::verifier::detail
