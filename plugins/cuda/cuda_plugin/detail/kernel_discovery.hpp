// Which kernels a compiled source defines, read from its CUBIN rather than guessed from the text:
// templates, macros and namespaces make any pattern over the source wrong somewhere. A kernel
// entry point S is an ELF symbol with a section ".nv.info.S" (its launch metadata); __device__
// functions and variables have none.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace keval::cuda_plugin::detail {

struct KernelSymbol {
  std::string lowered;   // the ELF symbol: "vector_add", "_Z5scaleIfEvPT_S0_i"
  std::string signature; // demangled, return type dropped: "scale<float>(float*, float, int)"
  std::string name;      // signature without parameters: "scale<float>", "ns::inner", "vector_add"
};

// The kernels in a CUBIN file, sorted by name. Throws sdk::Error(KEVAL_ERROR_INTERNAL) when the
// file cannot be read as ELF.
std::vector<KernelSymbol> discover_kernels(const std::filesystem::path& cubin);

// abi::__cxa_demangle, or the input unchanged when it is not a mangled C++ name (extern "C").
std::string demangle(const std::string& symbol);

// "void scale<float>(float*, float, int)" -> "scale<float>(float*, float, int)": demangled
// function templates carry their return type, which nobody writes when naming a kernel.
std::string drop_return_type(std::string_view demangled);
// "scale<float>(float*, float, int)" -> "scale<float>".
std::string drop_parameters(std::string_view signature);

struct KernelMatch {
  std::vector<const KernelSymbol*> kernels; // empty: not found; more than one: ambiguous
};

// Finds `requested` by exact symbol (extern "C" or mangled name), by signature, or by name;
// spaces are ignored in the last two ("tk<float,4>" finds "tk<float, 4>").
KernelMatch find_kernel(const std::vector<KernelSymbol>& kernels, std::string_view requested);

// Whether a name that matched no compiled kernel could instantiate one as an NVRTC name
// expression: a template-id such as "scale<float>" or "ns::tk<int, 4>".
bool is_name_expression(std::string_view requested);

// "a, b, c" (signatures where two kernels share a name, so each entry identifies one kernel).
std::string describe_kernels(const std::vector<const KernelSymbol*>& kernels);
std::string describe_kernels(const std::vector<KernelSymbol>& kernels);

} // namespace keval::cuda_plugin::detail
