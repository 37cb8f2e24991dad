// The names of the device kernels a candidate's source defines itself: CUDA C++ `__global__`
// functions (in a .cu source or in the strings a Python source hands load_inline, cupy or NVRTC)
// and Triton `@triton.jit` functions. What the trusted worker matches the candidate's traced
// kernels against: a candidate none of whose timed kernels bears one of these names did its work
// in libraries (the library_only flag).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace keval::checks {

// At most this many names, each a C/Python identifier; duplicates appear once, in source order.
inline constexpr size_t kMaxKernelNames = 256;

// Never throws on any input; linear in the size of the source (at most kMaxScannedBytes of it).
std::vector<std::string> defined_kernel_names(std::string_view source);

// Whether `identifier` (not empty) occurs in `text` as a whole identifier: "add_kernel" in
// "void add_kernel<float>(float const*, int)", but not "add" or "kernel".
bool contains_identifier(std::string_view text, std::string_view identifier);

} // namespace keval::checks
