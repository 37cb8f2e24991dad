// Kernel parameters: how each IOContract argument is passed to cuLaunchKernel.
//
// Tensors are passed as their device address (data + byte_offset), 8 bytes. The IOContract only
// says "int" or "float", so scalars take the width the kernel declares, read from the loaded
// function (cuFuncGetParamInfo): an int fills a 4-byte (int32) or 8-byte (int64) parameter, a
// float a 4-byte (float32) or 8-byte (float64) one, a bool a 1-byte one (or 4/8 as 0/1). Before
// that is known (and where it cannot be), int means int32, float float32 and bool one byte.
// metadata.arg_types pins a scalar's type instead: {"n": "int64"} with int32, uint32, int64,
// uint64, float32, float64 or bool; a kernel whose parameter size disagrees is then an error.
// is_meta arguments (Triton constexprs) are not passed; str arguments cannot be.
#pragma once

#include "cuda_plugin/detail/contract.hpp"

#include <keval/plugin.h>

#include <boost/json/object.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <vector>

namespace keval::cuda_plugin::detail {

enum class ParamType { device_pointer, int32, uint32, int64, uint64, float32, float64, boolean };

size_t param_size(ParamType type);
const char* param_type_name(ParamType type); // "pointer", "int32", ..., "bool"

struct KernelParam {
  std::string name;
  ArgKind kind = ArgKind::tensor;
  ParamType type = ParamType::device_pointer;
  bool pinned = false; // set by metadata.arg_types: never adapted to the kernel's sizes
};

// The parameters for the contract's non-meta arguments, in order. Throws
// sdk::Error(KEVAL_ERROR_INVALID_REQUEST) for a str argument, and for metadata.arg_types that is
// not an object, names no scalar argument of the contract, or gives a type the argument's kind
// cannot take.
std::vector<KernelParam> declare_params(const std::vector<ContractArg>& args,
                                        const boost::json::object& metadata);

// Adapts the unpinned scalars to the kernel's parameter sizes (bytes, in order) and checks the
// rest. Throws sdk::Error(KEVAL_ERROR_INVALID_REQUEST) naming the kernel and the argument when
// the count or a size cannot agree: launching anyway would hand the kernel garbage.
void fit_params_to_kernel(std::vector<KernelParam>& params, const std::vector<size_t>& sizes,
                          const std::string& kernel);

// The kernelParams array of cuLaunchKernel: one pointer per parameter, each to an 8-byte slot
// holding the value in its declared width. Reused across launches without reallocating.
class PackedParams {
public:
  using Slot = std::array<std::byte, 8>;

  PackedParams() = default;
  PackedParams(const PackedParams&) = delete;
  PackedParams& operator=(const PackedParams&) = delete;
  PackedParams(PackedParams&&) = default;
  PackedParams& operator=(PackedParams&&) = default;

  void** pointers() { return pointers_.empty() ? nullptr : pointers_.data(); }
  size_t size() const { return slots_.size(); }
  const Slot& slot(size_t i) const { return slots_.at(i); }

private:
  friend void pack_params(const std::vector<KernelParam>&, const keval_arg*, size_t, PackedParams&);
  std::vector<Slot> slots_;
  std::vector<void*> pointers_;
};

// Fills `out` from a launch's arguments (contract order; is_meta ones skipped). Throws
// sdk::Error(KEVAL_ERROR_INVALID_REQUEST) for a str argument or a value that does not fit its
// type (5e9 as int32, -1 as uint64), and for arguments that do not match the compiled contract.
void pack_params(const std::vector<KernelParam>& params, const keval_arg* args, size_t num_args,
                 PackedParams& out);

} // namespace keval::cuda_plugin::detail
