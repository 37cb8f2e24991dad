#include "detail/kernel_names.hpp"

#include <cstdlib>
#include <memory>

#include <cxxabi.h>

namespace keval::profiler {

namespace {

std::string demangle(const std::string& mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), std::free);
  return status == 0 && out != nullptr ? std::string(out.get()) : mangled;
}

// Drops a trailing "(...)" (balanced), if the name ends with one.
std::string without_parameters(const std::string& name) {
  if (name.empty() || name.back() != ')')
    return name;
  int depth = 0;
  for (std::size_t i = name.size(); i-- > 0;) {
    if (name[i] == ')') {
      ++depth;
    } else if (name[i] == '(' && --depth == 0) {
      return i == 0 ? name : name.substr(0, i);
    }
  }
  return name;
}

} // namespace

std::string kernel_display_name(const std::string& mangled) {
  return without_parameters(demangle(mangled));
}

} // namespace keval::profiler
