#include "cuda_plugin/detail/kernel_discovery.hpp"

#include <keval/plugin.hpp>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <set>

#include <boost/dll/library_info.hpp>
#include <cxxabi.h>

namespace keval::cuda_plugin::detail {

namespace {

constexpr std::string_view kKernelInfoSection = ".nv.info.";

std::string without_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text)
    if (c != ' ')
      out.push_back(c);
  return out;
}

} // namespace

std::string demangle(const std::string& symbol) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && demangled ? std::string(demangled.get()) : symbol;
}

std::string drop_parameters(std::string_view signature) {
  if (signature.empty() || signature.back() != ')')
    return std::string(signature);
  // Walk back to the '(' matching the final ')': parameter types may hold parentheses themselves
  // (function pointers), and so may template arguments before it.
  int depth = 0;
  for (size_t i = signature.size(); i-- > 0;) {
    if (signature[i] == ')')
      ++depth;
    else if (signature[i] == '(' && --depth == 0)
      return std::string(signature.substr(0, i));
  }
  return std::string(signature);
}

std::string drop_return_type(std::string_view demangled) {
  // The return type ends at the last space outside any <...> or (...) before the parameter list;
  // "(anonymous namespace)::k(float*)" has a space, but inside parentheses.
  const std::string head = drop_parameters(demangled);
  int depth = 0;
  size_t name_start = 0;
  for (size_t i = 0; i < head.size(); ++i) {
    const char c = head[i];
    if (c == '<' || c == '(')
      ++depth;
    else if (c == '>' || c == ')')
      --depth;
    else if (c == ' ' && depth == 0)
      name_start = i + 1;
  }
  return std::string(demangled.substr(name_start));
}

std::vector<KernelSymbol> discover_kernels(const std::filesystem::path& cubin) {
  std::vector<std::string> sections, symbols;
  try {
    // false: a CUBIN is ELF for another machine (EM_CUDA); read it anyway.
    boost::dll::library_info info(cubin, false);
    sections = info.sections();
    symbols = info.symbols();
  } catch (const std::exception& e) {
    throw sdk::Error(KEVAL_ERROR_INTERNAL,
                     "cannot read the symbols of the CUBIN " + cubin.string() + ": " + e.what());
  }
  std::set<std::string> info_sections;
  for (const auto& section : sections)
    if (section.starts_with(kKernelInfoSection))
      info_sections.insert(section.substr(kKernelInfoSection.size()));

  std::set<std::string> seen;
  std::vector<KernelSymbol> kernels;
  for (const auto& symbol : symbols) {
    if (!info_sections.contains(symbol) || !seen.insert(symbol).second)
      continue;
    KernelSymbol k;
    k.lowered = symbol;
    k.signature = drop_return_type(demangle(symbol));
    k.name = drop_parameters(k.signature);
    kernels.push_back(std::move(k));
  }
  std::sort(kernels.begin(), kernels.end(), [](const KernelSymbol& a, const KernelSymbol& b) {
    return a.name != b.name ? a.name < b.name : a.signature < b.signature;
  });
  return kernels;
}

KernelMatch find_kernel(const std::vector<KernelSymbol>& kernels, std::string_view requested) {
  KernelMatch match;
  // An exact symbol identifies one kernel, whatever else shares its name.
  for (const auto& k : kernels)
    if (k.lowered == requested) {
      match.kernels.push_back(&k);
      return match;
    }
  const std::string wanted = without_spaces(requested);
  for (const auto& k : kernels)
    if (without_spaces(k.signature) == wanted) {
      match.kernels.push_back(&k);
      return match;
    }
  for (const auto& k : kernels)
    if (without_spaces(k.name) == wanted)
      match.kernels.push_back(&k);
  return match;
}

bool is_name_expression(std::string_view requested) {
  const size_t open = requested.find('<');
  return open != std::string_view::npos && open > 0 && requested.find('>') > open;
}

std::string describe_kernels(const std::vector<const KernelSymbol*>& kernels) {
  std::string out;
  for (const auto* k : kernels) {
    const bool shared_name = std::count_if(kernels.begin(), kernels.end(), [&](const auto* other) {
                               return other->name == k->name;
                             }) > 1;
    if (!out.empty())
      out += ", ";
    out += shared_name ? k->signature : k->name;
  }
  return out;
}

std::string describe_kernels(const std::vector<KernelSymbol>& kernels) {
  std::vector<const KernelSymbol*> pointers;
  for (const auto& k : kernels)
    pointers.push_back(&k);
  return describe_kernels(pointers);
}

} // namespace keval::cuda_plugin::detail
