// The parts of an IOContract, parsed one JSON value at a time. parse.cpp assembles them.
#pragma once

#include "request/detail/json_reader.hpp"
#include "request/model.hpp"

#include <optional>
#include <string>
#include <vector>

namespace keval::request::detail {

// Running total of one kernel's tensor bytes, held against Limits::max_total_tensor_bytes.
struct TensorBudget {
  uint64_t used_bytes = 0;
};

// Bytes a tensor of this shape and dtype occupies, or nullopt when the element count does not
// fit int64 or the byte count does not fit uint64.
std::optional<uint64_t> checked_tensor_bytes(const std::vector<int64_t>& shape, DType dtype);

// `role` decides whether init/data matter: on a pure output tensor they are ignored (warning).
// Size limits are checked, and the tensor charged to `budget`, before any data is decoded.
TensorSpec parse_tensor_spec(const json::value& value, const std::string& path, Role role,
                             TensorBudget& budget, const ParseContext& ctx);

ArgSpec parse_arg_spec(const json::value& value, const std::string& path, TensorBudget& budget,
                       const ParseContext& ctx);

LaunchConfig parse_launch_config(const json::value& value, const std::string& path,
                                 const ParseContext& ctx);

} // namespace keval::request::detail
