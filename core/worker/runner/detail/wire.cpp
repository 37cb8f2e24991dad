#include "worker/runner/detail/wire.hpp"

#include "common/json_fields.hpp"

#include "request/model.hpp"

#include <boost/json/value_to.hpp>

namespace keval::worker::detail {

namespace json = boost::json;

namespace {

constexpr size_t kMaxDims = 64;

// {dtype, shape, bytes} of a shared tensor.
json::object describe_layout(const Tensor& tensor) {
  json::object d;
  d["dtype"] = request::dtype_name(tensor.dtype());
  json::array shape;
  for (int64_t extent : tensor.shape())
    shape.emplace_back(extent);
  d["shape"] = std::move(shape);
  d["bytes"] = tensor.shared_bytes();
  return d;
}

} // namespace

json::object describe_shared(const Tensor& tensor, std::vector<int>& fds) {
  json::object d = describe_layout(tensor);
  d["fd"] = tensor.shared_fd() >= 0;
  if (tensor.shared_fd() >= 0)
    fds.push_back(tensor.shared_fd());
  return d;
}

json::object describe_reused(const Tensor& tensor) {
  json::object d = describe_layout(tensor);
  d["fd"] = false;
  d["reuse"] = true;
  return d;
}

std::vector<SharedTensorHandle> read_shared(const json::array& descriptions,
                                            protocol::BlockingChannel& channel) {
  size_t with_fd = 0;
  for (const auto& d : descriptions)
    if (d.is_object() && d.as_object().contains("fd") && d.as_object().at("fd").is_bool() &&
        d.as_object().at("fd").as_bool())
      ++with_fd;
  std::vector<UniqueFd> fds = channel.take_fds(with_fd);
  size_t next_fd = 0;
  std::vector<SharedTensorHandle> handles;
  for (const auto& value : descriptions) {
    if (!value.is_object())
      throw WireError("a tensor description is not an object");
    const json::object& d = value.as_object();
    SharedTensorHandle h;
    const std::string dtype = string_field(d, "dtype");
    const auto parsed = request::parse_dtype(dtype);
    if (!parsed)
      throw WireError("a tensor description has an unknown dtype '" + dtype + "'");
    h.dtype = *parsed;
    const json::array& shape = array_field(d, "shape");
    if (shape.size() > kMaxDims)
      throw WireError("a tensor description has " + std::to_string(shape.size()) + " dimensions");
    for (const auto& extent : shape) {
      if (!extent.is_int64() || extent.as_int64() < 0)
        throw WireError("a tensor description has an invalid extent");
      h.shape.push_back(extent.as_int64());
    }
    const int64_t bytes = int_field(d, "bytes");
    if (bytes < 0)
      throw WireError("a tensor description has a negative size");
    h.bytes = static_cast<uint64_t>(bytes);
    if (bool_field(d, "fd"))
      h.fd = std::move(fds[next_fd++]);
    if (const json::value* reuse = d.if_contains("reuse"); reuse != nullptr) {
      if (!reuse->is_bool())
        throw WireError("'reuse' is not a boolean");
      h.reuses_previous = reuse->as_bool();
    }
    if (h.reuses_previous && h.fd)
      throw WireError("a tensor description both reuses a buffer and sends a new one");
    handles.push_back(std::move(h));
  }
  return handles;
}

const json::object& object_field(const json::object& o, const char* key) {
  return json_fields::object_field<WireError>(o, key);
}
const json::array& array_field(const json::object& o, const char* key) {
  return json_fields::array_field<WireError>(o, key);
}
std::string string_field(const json::object& o, const char* key) {
  return json_fields::string_field<WireError>(o, key);
}
int64_t int_field(const json::object& o, const char* key) {
  return json_fields::int_field<WireError>(o, key);
}
uint64_t uint_field(const json::object& o, const char* key) {
  return json_fields::uint_field<WireError>(o, key);
}
double number_field(const json::object& o, const char* key) {
  return json_fields::number_field<WireError>(o, key);
}
bool bool_field(const json::object& o, const char* key) {
  return json_fields::bool_field<WireError>(o, key);
}

} // namespace keval::worker::detail
