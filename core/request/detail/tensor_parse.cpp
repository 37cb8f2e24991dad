// TensorSpec, TensorInit and TensorData.
#include "request/detail/base64.hpp"
#include "request/detail/io_parse.hpp"
#include "request/detail/zlib_inflate.hpp"

#include <algorithm>
#include <stdexcept>

namespace keval::request::detail {

namespace {

constexpr const char* kAcceptedDTypes =
    "accepted: float32, float16, bfloat16, float64, int8, int16, int32, int64, uint8, bool "
    "(and torch's aliases float, half, double, char, short, int, long, byte, each also with "
    "a \"torch.\" prefix)";

std::vector<int64_t> parse_shape(const json::value& value, const std::string& path,
                                 size_t max_ndim) {
  const json::array& extents = read_array(value, path);
  if (extents.size() > max_ndim)
    throw RequestError(path, "has " + std::to_string(extents.size()) +
                                 " dimensions, more than the limit of " + std::to_string(max_ndim));
  std::vector<int64_t> shape;
  shape.reserve(extents.size());
  for (size_t i = 0; i < extents.size(); ++i)
    shape.push_back(read_positive_int(extents[i], element_path(path, i)));
  return shape;
}

DType parse_dtype_field(const json::value& value, const std::string& path) {
  std::string_view name = read_string(value, path);
  std::optional<DType> dtype = parse_dtype(name);
  if (!dtype)
    throw RequestError(path, "unsupported dtype '" + std::string(name) + "'; " + kAcceptedDTypes);
  return *dtype;
}

// "shape [2, 3] float32" in messages.
std::string describe_tensor(const TensorSpec& spec) {
  return "shape " + format_shape(spec.shape) + " " + dtype_name(spec.dtype);
}

// Rejects a tensor over the per-tensor limit, or one that brings the kernel over the total.
void charge_budget(const TensorSpec& spec, const std::string& path, TensorBudget& budget,
                   const Limits& limits) {
  std::optional<uint64_t> bytes = checked_tensor_bytes(spec.shape, spec.dtype);
  std::string limit_text = std::to_string(limits.max_tensor_bytes) + " bytes per tensor";
  if (!bytes)
    throw RequestError(path, "tensor of " + describe_tensor(spec) +
                                 " is too large: its size overflows 64 bits, over the limit of " +
                                 limit_text);
  if (*bytes > limits.max_tensor_bytes)
    throw RequestError(path, "tensor of " + describe_tensor(spec) + " is " +
                                 std::to_string(*bytes) + " bytes, over the limit of " +
                                 limit_text);
  uint64_t total = 0;
  if (__builtin_add_overflow(budget.used_bytes, *bytes, &total))
    total = UINT64_MAX;
  if (total > limits.max_total_tensor_bytes)
    throw RequestError(path, "this tensor brings the kernel's tensors to " + std::to_string(total) +
                                 " bytes, over the limit of " +
                                 std::to_string(limits.max_total_tensor_bytes) +
                                 " bytes for all tensors of one kernel");
  budget.used_bytes = total;
}

// ---- TensorInit ----

constexpr InitKind kInitKinds[] = {InitKind::randn, InitKind::uniform, InitKind::zeros,
                                   InitKind::ones,  InitKind::full,    InitKind::arange};

InitKind parse_init_kind(const json::value& value, const std::string& path) {
  std::string_view name = read_string(value, path);
  for (InitKind kind : kInitKinds)
    if (name == init_kind_name(kind))
      return kind;
  throw RequestError(path, "unknown init kind '" + std::string(name) +
                               "'; accepted: randn, uniform, zeros, ones, full, arange");
}

struct InitParameter {
  std::string_view key;
  double TensorInit::*field;
};

constexpr InitParameter kInitParameters[] = {
    {"mean", &TensorInit::mean},
    {"std", &TensorInit::std},
    {"low", &TensorInit::low},
    {"high", &TensorInit::high},
    {"fill_value", &TensorInit::fill_value},
    {"start", &TensorInit::start},
    {"step", &TensorInit::step},
};

// The parameters (seed included) that `kind` reads; others given are ignored with a warning.
bool kind_uses(InitKind kind, std::string_view key) {
  switch (kind) {
  case InitKind::randn:
    return key == "seed" || key == "mean" || key == "std";
  case InitKind::uniform:
    return key == "seed" || key == "low" || key == "high";
  case InitKind::full:
    return key == "fill_value";
  case InitKind::arange:
    return key == "start" || key == "step";
  case InitKind::zeros:
  case InitKind::ones:
    return false;
  }
  return false;
}

void warn_if_unused(InitKind kind, std::string_view key, const ObjectReader& reader,
                    const ParseContext& ctx) {
  if (!kind_uses(kind, key))
    ctx.warn(reader.path_of(key),
             std::string("not used by init kind '") + init_kind_name(kind) + "', ignored");
}

// Checks the chosen kind's parameters against each other (defaults included).
void check_init_parameters(const TensorInit& init, const ObjectReader& reader) {
  if (init.kind == InitKind::randn && init.std < 0)
    throw RequestError(reader.path_of("std"), "must be >= 0, got " + format_number(init.std));
  if (init.kind == InitKind::uniform && !(init.low < init.high))
    throw RequestError(reader.path(), "low (" + format_number(init.low) +
                                          ") must be less than high (" + format_number(init.high) +
                                          ")");
  if (init.kind == InitKind::arange && init.step == 0)
    throw RequestError(reader.path_of("step"), "must not be 0");
}

TensorInit parse_tensor_init(const json::value& value, const std::string& path,
                             const ParseContext& ctx) {
  ObjectReader reader(value, path, ctx);
  TensorInit init;
  init.kind = parse_init_kind(reader.required("kind"), reader.path_of("kind"));
  if (const json::value* seed = reader.optional("seed")) {
    init.seed = read_uint64(*seed, reader.path_of("seed"));
    warn_if_unused(init.kind, "seed", reader, ctx);
  }
  for (const InitParameter& parameter : kInitParameters) {
    if (const json::value* number = reader.optional(parameter.key)) {
      init.*parameter.field = read_finite_number(*number, reader.path_of(parameter.key));
      warn_if_unused(init.kind, parameter.key, reader, ctx);
    }
  }
  if (init.kind == InitKind::full && reader.optional("fill_value") == nullptr)
    throw RequestError(reader.path_of("fill_value"), "required for init kind 'full'");
  check_init_parameters(init, reader);
  reader.warn_unknown_fields();
  return init;
}

// ---- TensorData ----

// "" for no compression ("none", null or absent), "zlib" for zlib.
std::string parse_compress(const json::value* value, const std::string& path) {
  if (value == nullptr)
    return "";
  std::string_view name = read_string(*value, path);
  if (name == "zlib")
    return "zlib";
  if (name == "none")
    return "";
  throw RequestError(path, "unsupported compression '" + std::string(name) +
                               "'; accepted: zlib, none (or null)");
}

// How much of a zlib stream the host inflates (into a fixed buffer, then dropped) to check it.
constexpr uint64_t kZlibProbeBytes = 1ull << 20;

// Base64, then zlib when compressed; the result must be exactly the tensor's size. Inflation
// is capped at that size so a zlib bomb fails after producing one tensor's worth of bytes.
// Without `decode`, zlib data is only checked (check_zlib_prefix) and nothing is returned.
std::vector<uint8_t> decode_tensor_bytes(std::string_view base64, const std::string& compress,
                                         const TensorSpec& spec, const std::string& path,
                                         bool decode) {
  const uint64_t expected = spec.nbytes();
  std::vector<uint8_t> bytes;
  try {
    bytes = decode_base64(base64);
  } catch (const std::invalid_argument& error) {
    throw RequestError(path, error.what());
  }
  if (compress == "zlib") {
    try {
      if (!decode) {
        check_zlib_prefix(bytes, expected, kZlibProbeBytes);
        return {};
      }
      bytes = inflate_zlib(bytes, expected);
    } catch (const std::runtime_error& error) {
      throw RequestError(path, std::string("zlib data ") + error.what() + " (" +
                                   describe_tensor(spec) + " needs " + std::to_string(expected) +
                                   " bytes)");
    }
  }
  if (bytes.size() != expected)
    throw RequestError(path, "decoded data is " + std::to_string(bytes.size()) + " bytes, but " +
                                 describe_tensor(spec) + " needs " + std::to_string(expected) +
                                 " bytes");
  if (!decode)
    return {};
  return bytes;
}

// TensorData may repeat the tensor's shape and dtype; when it does they must agree.
void check_data_matches_spec(ObjectReader& reader, const TensorSpec& spec, const Limits& limits) {
  if (const json::value* shape = reader.optional("shape")) {
    std::string path = reader.path_of("shape");
    std::vector<int64_t> data_shape = parse_shape(*shape, path, limits.max_ndim);
    if (data_shape != spec.shape)
      throw RequestError(path, format_shape(data_shape) + " differs from the tensor_spec shape " +
                                   format_shape(spec.shape));
  }
  if (const json::value* dtype = reader.optional("dtype")) {
    std::string path = reader.path_of("dtype");
    DType data_dtype = parse_dtype_field(*dtype, path);
    if (data_dtype != spec.dtype)
      throw RequestError(path, std::string(dtype_name(data_dtype)) +
                                   " differs from the tensor_spec dtype " + dtype_name(spec.dtype));
  }
}

TensorData parse_tensor_data(const json::value& value, const std::string& path,
                             const TensorSpec& spec, const ParseContext& ctx, bool decode) {
  ObjectReader reader(value, path, ctx);
  std::string base64_path = reader.path_of("data_b64");
  std::string_view base64 = read_string(reader.required("data_b64"), base64_path);
  TensorData data;
  data.compress = parse_compress(reader.optional("compress"), reader.path_of("compress"));
  check_data_matches_spec(reader, spec, ctx.limits);
  reader.warn_unknown_fields();
  data.bytes = decode_tensor_bytes(base64, data.compress, spec, base64_path, decode);
  return data;
}

// An output tensor is written by the kernel, so contents given for it are never used.
void drop_output_contents(TensorSpec& spec, const ObjectReader& reader, const ParseContext& ctx) {
  constexpr const char* kIgnored = "ignored: the tensor's role is output";
  if (spec.init) {
    ctx.warn(reader.path_of("init"), kIgnored);
    spec.init.reset();
  }
  if (spec.data) {
    ctx.warn(reader.path_of("data"), kIgnored);
    spec.data.reset();
  }
}

} // namespace

std::optional<uint64_t> checked_tensor_bytes(const std::vector<int64_t>& shape, DType dtype) {
  int64_t numel = 1;
  for (int64_t extent : shape)
    if (extent < 0 || __builtin_mul_overflow(numel, extent, &numel))
      return std::nullopt;
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), dtype_size(dtype), &bytes))
    return std::nullopt;
  return bytes;
}

TensorSpec parse_tensor_spec(const json::value& value, const std::string& path, Role role,
                             TensorBudget& budget, const ParseContext& ctx) {
  ObjectReader reader(value, path, ctx);
  TensorSpec spec;
  spec.shape = parse_shape(reader.required("shape"), reader.path_of("shape"), ctx.limits.max_ndim);
  if (const json::value* dtype = reader.optional("dtype"))
    spec.dtype = parse_dtype_field(*dtype, reader.path_of("dtype"));
  charge_budget(spec, path, budget, ctx.limits);
  const json::value* init = reader.optional("init");
  const json::value* data = reader.optional("data");
  if (init != nullptr && data != nullptr)
    throw RequestError(path, "init and data are mutually exclusive: give one of them");
  if (init != nullptr)
    spec.init = parse_tensor_init(*init, reader.path_of("init"), ctx);
  // An output's data is dropped below: checked, never decoded.
  if (data != nullptr)
    spec.data =
        parse_tensor_data(*data, reader.path_of("data"), spec, ctx,
                          ctx.decoding == TensorDataDecoding::decode && role != Role::output);
  if (role == Role::output)
    drop_output_contents(spec, reader, ctx);
  reader.warn_unknown_fields();
  return spec;
}

} // namespace keval::request::detail
