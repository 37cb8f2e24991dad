// What the cuda plugin needs from the request's IOContract (`io`, as JSON text): the launch
// configuration and the order, names and kinds of the arguments. The host has validated the
// contract already; these parsers still reject what a CUDA launch cannot use.
#pragma once

#include <boost/json/value.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace keval::cuda_plugin::detail {

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  uint32_t shared_mem_bytes = 0; // dynamic shared memory (keval's launch.shared_mem_bytes)
};

enum class ArgKind { tensor, int_, float_, bool_, str };

struct ContractArg {
  std::string name;
  ArgKind kind = ArgKind::tensor;
  bool is_meta = false; // Triton constexpr: never passed to a CUDA kernel
};

struct Contract {
  LaunchConfig launch;
  std::vector<ContractArg> args;
  std::optional<std::string> kernel_name; // io.launch.kernel_name, if given
};

// Throws sdk::Error(KEVAL_ERROR_INVALID_REQUEST): no contract, no grid or block ("cuda kernels
// need io.launch.grid and io.launch.block"), or extents beyond what any CUDA device launches
// (block x, y <= 1024, z <= 64, at most 1024 threads; grid x < 2^31, y, z <= 65535).
Contract parse_contract(const char* io_contract_json);

// {"x": 8, "y": 2}, [8, 2] or 8, as the request parser accepts; missing components are 1.
Dim3 parse_dim3(const boost::json::value& value, const std::string& path);

} // namespace keval::cuda_plugin::detail
