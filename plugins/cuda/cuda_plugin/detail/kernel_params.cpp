#include "cuda_plugin/detail/kernel_params.hpp"

#include <keval/plugin.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>

namespace keval::cuda_plugin::detail {

namespace {

using sdk::Error;

[[noreturn]] void invalid(const std::string& message) {
  throw Error(KEVAL_ERROR_INVALID_REQUEST, message);
}

const char* kind_name(ArgKind kind) {
  switch (kind) {
  case ArgKind::tensor:
    return "tensor";
  case ArgKind::int_:
    return "int";
  case ArgKind::float_:
    return "float";
  case ArgKind::bool_:
    return "bool";
  case ArgKind::str:
    return "str";
  }
  return "?";
}

std::string str_not_passable(const std::string& name) {
  return "argument '" + name + "': str arguments cannot be passed to a CUDA kernel";
}

// The types a scalar of each kind may be pinned to with metadata.arg_types.
std::optional<ParamType> pinned_type(ArgKind kind, std::string_view name) {
  struct Entry {
    std::string_view name;
    ParamType type;
    ArgKind kind;
  };
  static constexpr Entry kTypes[] = {{"int32", ParamType::int32, ArgKind::int_},
                                     {"uint32", ParamType::uint32, ArgKind::int_},
                                     {"int64", ParamType::int64, ArgKind::int_},
                                     {"uint64", ParamType::uint64, ArgKind::int_},
                                     {"float32", ParamType::float32, ArgKind::float_},
                                     {"float64", ParamType::float64, ArgKind::float_},
                                     {"bool", ParamType::boolean, ArgKind::bool_}};
  for (const Entry& e : kTypes)
    if (e.name == name && e.kind == kind)
      return e.type;
  return std::nullopt;
}

const char* allowed_types(ArgKind kind) {
  switch (kind) {
  case ArgKind::int_:
    return "int32, uint32, int64 or uint64";
  case ArgKind::float_:
    return "float32 or float64";
  case ArgKind::bool_:
    return "bool";
  default:
    return "nothing (only scalars take a type)";
  }
}

ParamType default_type(ArgKind kind) {
  switch (kind) {
  case ArgKind::int_:
    return ParamType::int32;
  case ArgKind::float_:
    return ParamType::float32;
  case ArgKind::bool_:
    return ParamType::boolean;
  default:
    return ParamType::device_pointer;
  }
}

// The type an unpinned argument takes for a kernel parameter of `size` bytes, if any.
std::optional<ParamType> type_for_size(ArgKind kind, size_t size) {
  switch (kind) {
  case ArgKind::tensor:
    return size == 8 ? std::optional(ParamType::device_pointer) : std::nullopt;
  case ArgKind::int_:
    return size == 4   ? std::optional(ParamType::int32)
           : size == 8 ? std::optional(ParamType::int64)
                       : std::nullopt;
  case ArgKind::float_:
    return size == 4   ? std::optional(ParamType::float32)
           : size == 8 ? std::optional(ParamType::float64)
                       : std::nullopt;
  case ArgKind::bool_:
    return size == 1   ? std::optional(ParamType::boolean)
           : size == 4 ? std::optional(ParamType::int32)
           : size == 8 ? std::optional(ParamType::int64)
                       : std::nullopt;
  case ArgKind::str:
    return std::nullopt;
  }
  return std::nullopt;
}

std::string names_of(const std::vector<KernelParam>& params) {
  std::string out;
  for (const auto& p : params)
    out += (out.empty() ? "" : ", ") + p.name;
  return out.empty() ? "none" : out;
}

template <class T> void store(PackedParams::Slot& slot, T value) {
  static_assert(sizeof(T) <= sizeof(PackedParams::Slot));
  slot.fill(std::byte{0});
  std::memcpy(slot.data(), &value, sizeof value);
}

void store_int(PackedParams::Slot& slot, const KernelParam& p, int64_t value) {
  auto out_of_range = [&](const char* range) {
    invalid("argument '" + p.name + "' = " + std::to_string(value) + " does not fit " +
            param_type_name(p.type) + " (" + range +
            "); declare the kernel parameter wider, or set metadata.arg_types");
  };
  switch (p.type) {
  case ParamType::int32:
    if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max())
      out_of_range("-2^31 .. 2^31 - 1");
    store(slot, static_cast<int32_t>(value));
    return;
  case ParamType::uint32:
    if (value < 0 || value > std::numeric_limits<uint32_t>::max())
      out_of_range("0 .. 2^32 - 1");
    store(slot, static_cast<uint32_t>(value));
    return;
  case ParamType::int64:
    store(slot, value);
    return;
  case ParamType::uint64:
    if (value < 0)
      out_of_range("0 .. 2^64 - 1");
    store(slot, static_cast<uint64_t>(value));
    return;
  case ParamType::boolean:
    store(slot, static_cast<uint8_t>(value != 0));
    return;
  default:
    throw Error(KEVAL_ERROR_INTERNAL, "argument '" + p.name + "': an integer cannot be passed as " +
                                          param_type_name(p.type));
  }
}

} // namespace

size_t param_size(ParamType type) {
  switch (type) {
  case ParamType::device_pointer:
  case ParamType::int64:
  case ParamType::uint64:
  case ParamType::float64:
    return 8;
  case ParamType::int32:
  case ParamType::uint32:
  case ParamType::float32:
    return 4;
  case ParamType::boolean:
    return 1;
  }
  return 0;
}

const char* param_type_name(ParamType type) {
  switch (type) {
  case ParamType::device_pointer:
    return "pointer";
  case ParamType::int32:
    return "int32";
  case ParamType::uint32:
    return "uint32";
  case ParamType::int64:
    return "int64";
  case ParamType::uint64:
    return "uint64";
  case ParamType::float32:
    return "float32";
  case ParamType::float64:
    return "float64";
  case ParamType::boolean:
    return "bool";
  }
  return "?";
}

std::vector<KernelParam> declare_params(const std::vector<ContractArg>& args,
                                        const boost::json::object& metadata) {
  std::vector<KernelParam> params;
  for (const auto& arg : args) {
    if (arg.is_meta)
      continue;
    if (arg.kind == ArgKind::str)
      invalid(str_not_passable(arg.name));
    params.push_back({arg.name, arg.kind, default_type(arg.kind), false});
  }

  const boost::json::value* types = metadata.if_contains("arg_types");
  if (types == nullptr || types->is_null())
    return params;
  if (!types->is_object())
    invalid("metadata.arg_types must be an object mapping scalar argument names to types, "
            "e.g. {\"n\": \"int64\"}");
  for (const auto& [key, value] : types->get_object()) {
    const std::string name(key);
    const std::string path = "metadata.arg_types." + name;
    auto param = std::find_if(params.begin(), params.end(),
                              [&](const KernelParam& p) { return p.name == name; });
    if (param == params.end())
      invalid(path + ": the IOContract has no argument '" + name +
              "' passed to the kernel (is_meta arguments are not passed)");
    if (!value.is_string())
      invalid(path + " must be a string: " + allowed_types(param->kind));
    const auto type = pinned_type(param->kind, value.get_string());
    if (!type)
      invalid(path + ": '" + name + "' is a " + kind_name(param->kind) + " argument; its type is " +
              allowed_types(param->kind) + ", not \"" + std::string(value.get_string()) + "\"");
    param->type = *type;
    param->pinned = true;
  }
  return params;
}

void fit_params_to_kernel(std::vector<KernelParam>& params, const std::vector<size_t>& sizes,
                          const std::string& kernel) {
  if (sizes.size() != params.size())
    invalid("kernel '" + kernel + "' takes " + std::to_string(sizes.size()) +
            " parameters, but the IOContract passes " + std::to_string(params.size()) + " (" +
            names_of(params) + "; is_meta arguments are not passed)");
  for (size_t i = 0; i < params.size(); ++i) {
    KernelParam& p = params[i];
    const std::string where = "parameter " + std::to_string(i) + " of kernel '" + kernel + "' is " +
                              std::to_string(sizes[i]) + " bytes";
    if (p.pinned) {
      if (param_size(p.type) != sizes[i])
        invalid("metadata.arg_types makes '" + p.name + "' " + param_type_name(p.type) + " (" +
                std::to_string(param_size(p.type)) + " bytes), but " + where);
      continue;
    }
    const auto fitted = type_for_size(p.kind, sizes[i]);
    if (!fitted)
      invalid("argument '" + p.name + "' (" + kind_name(p.kind) +
              (p.kind == ArgKind::tensor ? ", passed as an 8-byte device pointer" : "") +
              ") cannot be passed: " + where);
    p.type = *fitted;
  }
}

void pack_params(const std::vector<KernelParam>& params, const keval_arg* args, size_t num_args,
                 PackedParams& out) {
  out.slots_.resize(params.size());
  out.pointers_.resize(params.size());
  size_t index = 0;
  for (size_t i = 0; i < num_args; ++i) {
    const keval_arg& arg = args[i];
    if (arg.is_meta)
      continue;
    const std::string name = arg.name != nullptr ? arg.name : "";
    if (arg.kind == KEVAL_ARG_STR)
      invalid(str_not_passable(name));
    if (index >= params.size())
      invalid("the launch passes more arguments than the kernel was compiled for (" +
              names_of(params) + ")");
    const KernelParam& p = params[index];
    if (p.name != name)
      invalid("launch argument " + std::to_string(index) + " is '" + name +
              "', but the kernel was compiled for '" + p.name + "' there");
    PackedParams::Slot& slot = out.slots_[index];
    switch (arg.kind) {
    case KEVAL_ARG_TENSOR: {
      if (p.kind != ArgKind::tensor || arg.tensor == nullptr)
        invalid("argument '" + name + "' must be a tensor");
      const keval_dl_tensor& t = *arg.tensor;
      if (t.device.device_type != KEVAL_DEVICE_CUDA)
        invalid("argument '" + name + "' is not in CUDA device memory");
      store(slot, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(t.data) + t.byte_offset));
      break;
    }
    case KEVAL_ARG_INT:
    case KEVAL_ARG_BOOL:
      if (p.kind != (arg.kind == KEVAL_ARG_INT ? ArgKind::int_ : ArgKind::bool_))
        invalid("argument '" + name + "' must be a " + kind_name(p.kind));
      store_int(slot, p, arg.int_value);
      break;
    case KEVAL_ARG_FLOAT:
      if (p.kind != ArgKind::float_)
        invalid("argument '" + name + "' must be a " + kind_name(p.kind));
      if (p.type == ParamType::float64)
        store(slot, arg.float_value);
      else
        store(slot, static_cast<float>(arg.float_value));
      break;
    default:
      invalid("argument '" + name + "' has an unknown kind " + std::to_string(arg.kind));
    }
    out.pointers_[index] = slot.data();
    ++index;
  }
  if (index != params.size())
    invalid("the launch passes " + std::to_string(index) +
            " arguments, but the kernel was "
            "compiled for " +
            std::to_string(params.size()) + " (" + names_of(params) + ")");
}

} // namespace keval::cuda_plugin::detail
