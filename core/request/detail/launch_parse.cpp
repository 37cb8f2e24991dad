// LaunchConfig: grid and block dimensions, Triton's num_warps / num_stages, dynamic shared memory.
#include "request/detail/io_parse.hpp"

namespace keval::request::detail {

namespace {

struct Axis {
  std::string_view name;
  int64_t LaunchDim::*field;
};

constexpr Axis kAxes[] = {{"x", &LaunchDim::x}, {"y", &LaunchDim::y}, {"z", &LaunchDim::z}};
constexpr int64_t kMaxNumWarps = 64;

int64_t parse_extent(const json::value& value, const std::string& path, const Limits& limits) {
  return read_positive_int(value, path, limits.max_launch_dim);
}

// [x], [x, y] or [x, y, z], as Python's grid tuples are written.
LaunchDim parse_dim_array(const json::array& extents, const std::string& path,
                          const Limits& limits) {
  if (extents.empty() || extents.size() > std::size(kAxes))
    throw RequestError(path,
                       "must have 1 to 3 entries (x, y, z), got " + std::to_string(extents.size()));
  LaunchDim dim;
  for (size_t i = 0; i < extents.size(); ++i)
    dim.*kAxes[i].field = parse_extent(extents[i], element_path(path, i), limits);
  return dim;
}

// {"x": 8, "y": 2}: the V2 contract's LaunchDim; missing components are 1.
LaunchDim parse_dim_object(const json::value& value, const std::string& path,
                           const ParseContext& ctx) {
  ObjectReader reader(value, path, ctx);
  LaunchDim dim;
  for (const Axis& axis : kAxes)
    if (const json::value* extent = reader.optional(axis.name))
      dim.*axis.field = parse_extent(*extent, reader.path_of(axis.name), ctx.limits);
  reader.warn_unknown_fields();
  return dim;
}

LaunchDim parse_launch_dim(const json::value& value, const std::string& path,
                           const ParseContext& ctx) {
  if (value.is_object())
    return parse_dim_object(value, path, ctx);
  if (value.is_array())
    return parse_dim_array(value.get_array(), path, ctx.limits);
  if (value.is_number()) {
    LaunchDim dim;
    dim.x = parse_extent(value, path, ctx.limits);
    return dim;
  }
  throw RequestError(path, std::string("must be an object {x, y, z}, an array of 1 to 3 "
                                       "integers, or an integer; got ") +
                               kind_name(value));
}

int64_t parse_num_warps(const json::value& value, const std::string& path) {
  int64_t warps = read_int64(value, path);
  bool power_of_two = warps > 0 && (warps & (warps - 1)) == 0;
  if (!power_of_two || warps > kMaxNumWarps)
    throw RequestError(path, "must be a power of two from 1 to " + std::to_string(kMaxNumWarps) +
                                 ", got " + std::to_string(warps));
  return warps;
}

} // namespace

LaunchConfig parse_launch_config(const json::value& value, const std::string& path,
                                 const ParseContext& ctx) {
  ObjectReader reader(value, path, ctx);
  LaunchConfig launch;
  if (const json::value* grid = reader.optional("grid"))
    launch.grid = parse_launch_dim(*grid, reader.path_of("grid"), ctx);
  if (const json::value* block = reader.optional("block"))
    launch.block = parse_launch_dim(*block, reader.path_of("block"), ctx);
  if (const json::value* warps = reader.optional("num_warps"))
    launch.num_warps = parse_num_warps(*warps, reader.path_of("num_warps"));
  if (const json::value* stages = reader.optional("num_stages"))
    launch.num_stages = read_positive_int(*stages, reader.path_of("num_stages"));
  if (const json::value* shared = reader.optional("shared_mem_bytes"))
    launch.shared_mem_bytes = read_non_negative_int(*shared, reader.path_of("shared_mem_bytes"));
  reader.warn_unknown_fields();
  return launch;
}

} // namespace keval::request::detail
