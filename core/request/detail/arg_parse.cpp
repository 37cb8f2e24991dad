// ArgSpec: one kernel argument, a tensor or a scalar.
#include "request/detail/io_parse.hpp"

namespace keval::request::detail {

namespace {

constexpr ArgType kArgTypes[] = {ArgType::tensor, ArgType::int_, ArgType::float_, ArgType::bool_,
                                 ArgType::str};
constexpr Role kRoles[] = {Role::input, Role::output, Role::inout};

ArgType parse_arg_type(const json::value& value, const std::string& path) {
  std::string_view name = read_string(value, path);
  for (ArgType type : kArgTypes)
    if (name == arg_type_name(type))
      return type;
  throw RequestError(path, "unknown type '" + std::string(name) +
                               "'; accepted: tensor, int, float, bool, str");
}

Role parse_role(const json::value& value, const std::string& path) {
  std::string_view name = read_string(value, path);
  for (Role role : kRoles)
    if (name == role_name(role))
      return role;
  throw RequestError(path,
                     "unknown role '" + std::string(name) + "'; accepted: input, output, inout");
}

// Integers keep their JSON form; an integral double (4.0) becomes the integer it spells, so
// consumers can read every int argument as an integer.
json::value parse_int_value(const json::value& value, const std::string& path) {
  if (value.is_int64() || value.is_uint64())
    return value;
  return json::value(read_int64(value, path));
}

json::value parse_scalar_value(const json::value& value, ArgType type, const std::string& path) {
  switch (type) {
  case ArgType::int_:
    return parse_int_value(value, path);
  case ArgType::float_:
    read_finite_number(value, path);
    return value;
  case ArgType::bool_:
    read_bool(value, path);
    return value;
  case ArgType::str:
    read_c_string(value, path, kMaxStrArgBytes, /*nonempty=*/false);
    return value;
  case ArgType::tensor:
    break;
  }
  throw std::logic_error("parse_scalar_value called for a tensor argument");
}

void parse_tensor_arg(ArgSpec& arg, const json::value* tensor_spec, const json::value* scalar,
                      const ObjectReader& reader, TensorBudget& budget, const ParseContext& ctx) {
  if (arg.is_meta)
    throw RequestError(reader.path_of("is_meta"),
                       "only scalar arguments can be meta parameters; this argument is a tensor");
  if (tensor_spec == nullptr)
    throw RequestError(reader.path_of("tensor_spec"), "required for a tensor argument");
  if (scalar != nullptr)
    ctx.warn(reader.path_of("value"), "ignored for a tensor argument");
  arg.tensor_spec =
      parse_tensor_spec(*tensor_spec, reader.path_of("tensor_spec"), arg.role, budget, ctx);
}

void parse_scalar_arg(ArgSpec& arg, const json::value* tensor_spec, const json::value* scalar,
                      const ObjectReader& reader) {
  std::string this_argument = std::string("this argument is of type ") + arg_type_name(arg.type);
  if (tensor_spec != nullptr)
    throw RequestError(reader.path_of("tensor_spec"),
                       "only tensor arguments take a tensor_spec; " + this_argument);
  if (arg.role != Role::input)
    throw RequestError(reader.path_of("role"),
                       "only tensor arguments can be output or inout; " + this_argument);
  if (scalar == nullptr)
    throw RequestError(reader.path_of("value"),
                       std::string("required for a scalar argument (type ") +
                           arg_type_name(arg.type) + ")");
  arg.value = parse_scalar_value(*scalar, arg.type, reader.path_of("value"));
}

} // namespace

ArgSpec parse_arg_spec(const json::value& value, const std::string& path, TensorBudget& budget,
                       const ParseContext& ctx) {
  ObjectReader reader(value, path, ctx);
  ArgSpec arg;
  arg.name = std::string(
      read_c_string(reader.required("name"), reader.path_of("name"), kMaxArgNameBytes, true));
  arg.type = parse_arg_type(reader.required("type"), reader.path_of("type"));
  if (const json::value* role = reader.optional("role"))
    arg.role = parse_role(*role, reader.path_of("role"));
  if (const json::value* is_meta = reader.optional("is_meta"))
    arg.is_meta = read_bool(*is_meta, reader.path_of("is_meta"));
  const json::value* tensor_spec = reader.optional("tensor_spec");
  const json::value* scalar = reader.optional("value");
  if (arg.type == ArgType::tensor)
    parse_tensor_arg(arg, tensor_spec, scalar, reader, budget, ctx);
  else
    parse_scalar_arg(arg, tensor_spec, scalar, reader);
  reader.warn_unknown_fields();
  return arg;
}

} // namespace keval::request::detail
