#include "cuda_plugin/detail/contract.hpp"

#include <keval/plugin.hpp>

#include <array>
#include <limits>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace keval::cuda_plugin::detail {

namespace json = boost::json;
using sdk::Error;

namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(KEVAL_ERROR_INVALID_REQUEST, message);
}

uint32_t read_uint32(const json::value& value, const std::string& path, int64_t minimum) {
  std::optional<int64_t> extent;
  if (value.is_int64())
    extent = value.get_int64();
  else if (value.is_uint64() && value.get_uint64() <= std::numeric_limits<uint32_t>::max())
    extent = static_cast<int64_t>(value.get_uint64());
  else if (value.is_double() && value.get_double() == static_cast<int64_t>(value.get_double()))
    extent = static_cast<int64_t>(value.get_double());
  if (!extent || *extent < minimum || *extent > std::numeric_limits<uint32_t>::max())
    invalid(path + (minimum > 0 ? " must be a positive integer" : " must be an integer >= 0") +
            " below 2^32, got " + json::serialize(value));
  return static_cast<uint32_t>(*extent);
}

uint32_t read_extent(const json::value& value, const std::string& path) {
  return read_uint32(value, path, 1);
}

// Limits every CUDA device since compute capability 3.0 shares; the driver would reject more
// with a bare CUDA_ERROR_INVALID_VALUE at the first launch.
void check_block(const Dim3& block) {
  if (block.x > 1024 || block.y > 1024 || block.z > 64)
    invalid("io.launch.block (" + std::to_string(block.x) + ", " + std::to_string(block.y) + ", " +
            std::to_string(block.z) + ") exceeds CUDA's limits of (1024, 1024, 64)");
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads > 1024)
    invalid("io.launch.block has " + std::to_string(threads) +
            " threads; a CUDA block holds at most 1024");
}

void check_grid(const Dim3& grid) {
  if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    invalid("io.launch.grid (" + std::to_string(grid.x) + ", " + std::to_string(grid.y) + ", " +
            std::to_string(grid.z) + ") exceeds CUDA's limits of (2^31 - 1, 65535, 65535)");
}

ArgKind parse_kind(const json::value* type, const std::string& path) {
  // ArgSpec.type defaults to nothing in the V2 contract; the host requires it, so should we.
  if (type == nullptr || !type->is_string())
    invalid(path + ".type must be one of tensor, int, float, bool, str");
  const json::string& t = type->get_string();
  if (t == "tensor")
    return ArgKind::tensor;
  if (t == "int")
    return ArgKind::int_;
  if (t == "float")
    return ArgKind::float_;
  if (t == "bool")
    return ArgKind::bool_;
  if (t == "str")
    return ArgKind::str;
  invalid(path + ".type must be one of tensor, int, float, bool, str, got \"" + std::string(t) +
          "\"");
}

std::vector<ContractArg> parse_args(const json::object& io) {
  std::vector<ContractArg> args;
  const json::value* list = io.if_contains("args");
  if (list == nullptr || list->is_null())
    return args;
  if (!list->is_array())
    invalid("io.args must be an array");
  const json::array& array = list->get_array();
  for (size_t i = 0; i < array.size(); ++i) {
    const std::string path = "io.args[" + std::to_string(i) + "]";
    const json::object* spec = array[i].if_object();
    if (spec == nullptr)
      invalid(path + " must be an object");
    ContractArg arg;
    const json::value* name = spec->if_contains("name");
    if (name == nullptr || !name->is_string())
      invalid(path + ".name must be a string");
    arg.name = std::string(name->get_string());
    arg.kind = parse_kind(spec->if_contains("type"), path);
    if (const json::value* meta = spec->if_contains("is_meta"); meta != nullptr && meta->is_bool())
      arg.is_meta = meta->get_bool();
    args.push_back(std::move(arg));
  }
  return args;
}

} // namespace

Dim3 parse_dim3(const json::value& value, const std::string& path) {
  Dim3 dim;
  std::array<uint32_t*, 3> axes{&dim.x, &dim.y, &dim.z};
  if (value.is_object()) {
    const json::object& object = value.get_object();
    for (const char* axis : {"x", "y", "z"})
      if (const json::value* extent = object.if_contains(axis))
        *axes[static_cast<size_t>(axis[0] - 'x')] =
            read_extent(*extent, path + "." + std::string(axis));
    return dim;
  }
  if (value.is_array()) {
    const json::array& extents = value.get_array();
    if (extents.empty() || extents.size() > 3)
      invalid(path + " must have 1 to 3 entries (x, y, z), got " + std::to_string(extents.size()));
    for (size_t i = 0; i < extents.size(); ++i)
      *axes[i] = read_extent(extents[i], path + "[" + std::to_string(i) + "]");
    return dim;
  }
  if (value.is_number()) {
    dim.x = read_extent(value, path);
    return dim;
  }
  invalid(path + " must be an object {x, y, z}, an array of 1 to 3 integers, or an integer");
}

Contract parse_contract(const char* io_contract_json) {
  static const std::string kNeedLaunch = "cuda kernels need io.launch.grid and io.launch.block";
  if (io_contract_json == nullptr)
    invalid("cuda kernels need an IOContract (io) with their arguments; " + kNeedLaunch);
  json::error_code ec;
  const json::value io = json::parse(io_contract_json, ec);
  if (ec || !io.is_object())
    invalid("io must be a JSON object (IOContract)");

  Contract contract;
  contract.args = parse_args(io.get_object());
  const json::value* launch = io.get_object().if_contains("launch");
  const json::object* launch_object = launch != nullptr ? launch->if_object() : nullptr;
  const json::value* grid = launch_object ? launch_object->if_contains("grid") : nullptr;
  const json::value* block = launch_object ? launch_object->if_contains("block") : nullptr;
  if (grid == nullptr || grid->is_null() || block == nullptr || block->is_null())
    invalid(kNeedLaunch);
  contract.launch.grid = parse_dim3(*grid, "io.launch.grid");
  contract.launch.block = parse_dim3(*block, "io.launch.block");
  check_grid(contract.launch.grid);
  check_block(contract.launch.block);
  if (const json::value* shared = launch_object->if_contains("shared_mem_bytes");
      shared != nullptr && !shared->is_null()) {
    contract.launch.shared_mem_bytes = read_uint32(*shared, "io.launch.shared_mem_bytes", 0);
  }
  if (const json::value* name = launch_object->if_contains("kernel_name");
      name != nullptr && !name->is_null()) {
    if (!name->is_string())
      invalid("io.launch.kernel_name must be a string");
    contract.kernel_name = std::string(name->get_string());
  }
  return contract;
}

} // namespace keval::cuda_plugin::detail
