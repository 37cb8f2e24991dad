// Kernel names as ComputeEval reports them.
#pragma once

#include <string>

namespace keval::profiler {

// The demangled name without its parameter list: "scale(float*, int)" -> "scale",
// "void axpy<float>(float, float const*, float*)" -> "void axpy<float>" (the return type that the
// demangler writes for templates stays, as in ComputeEval). Unlike cutting at the first '(', the
// matching '(' of the trailing list is found, so "(anonymous namespace)::k(int)" keeps its
// namespace. A name that does not demangle (extern "C" kernels) is returned unchanged.
std::string kernel_display_name(const std::string& mangled);

} // namespace keval::profiler
