#include "cuda_plugin/detail/compile_settings.hpp"

#include <keval/plugin.hpp>

#include <algorithm>
#include <charconv>
#include <optional>
#include <string_view>

namespace keval::cuda_plugin::detail {

namespace {

using sdk::Error;

#ifndef KEVAL_CUDA_TOOLKIT_INCLUDE_DIRS
#define KEVAL_CUDA_TOOLKIT_INCLUDE_DIRS ""
#endif

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(separator, start), text.size());
    if (end > start)
      parts.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

std::optional<int> parse_arch(std::string_view text) {
  if (text.starts_with("sm_"))
    text.remove_prefix(3);
  std::string digits(text);
  // "9.0" is how nvidia-smi and torch print a compute capability.
  if (const size_t dot = digits.find('.'); dot != std::string::npos && dot + 2 == digits.size())
    digits.erase(dot, 1);
  int arch = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), arch);
  if (ec != std::errc() || end != digits.data() + digits.size() || arch < 10 || arch > 999)
    return std::nullopt;
  return arch;
}

// Whether an option sets the target: "-arch=sm_90", "-arch" followed by "sm_90", or the long
// spellings "--gpu-architecture=..." and "--gpu-arch=...".
bool is_arch_option(std::string_view option) {
  for (std::string_view name : {"-arch", "--gpu-architecture", "--gpu-arch"})
    if (option == name ||
        (option.starts_with(name) && option.size() > name.size() && option[name.size()] == '='))
      return true;
  return false;
}

// The value of the option at `i`: after its '=', else the next entry.
std::string option_value(const std::vector<std::string>& options, size_t i) {
  const std::string& option = options[i];
  if (const size_t eq = option.find('='); eq != std::string::npos)
    return option.substr(eq + 1);
  return i + 1 < options.size() ? options[i + 1] : std::string();
}

bool is_std_option(std::string_view option) {
  return option.starts_with("-std") || option.starts_with("--std");
}

} // namespace

ArchChoice resolve_arch(int requested, const char* env_value) {
  if (requested > 0)
    return {requested, "worker"};
  if (env_value != nullptr && *env_value != '\0') {
    const auto arch = parse_arch(env_value);
    if (!arch)
      throw Error(KEVAL_ERROR_INTERNAL, std::string("KEVAL_CUDA_ARCH='") + env_value +
                                            "' is not an architecture such as 90, sm_90 or 9.0");
    return {*arch, "KEVAL_CUDA_ARCH"};
  }
  return {kDefaultCudaArch, "default"};
}

std::vector<std::string> toolkit_include_dirs(const char* env_value) {
  if (env_value != nullptr && *env_value != '\0')
    return split(env_value, ':');
  return split(KEVAL_CUDA_TOOLKIT_INCLUDE_DIRS, ':');
}

std::vector<std::string> user_compile_options(const boost::json::object& metadata) {
  const boost::json::value* value = metadata.if_contains("compile_options");
  if (value == nullptr || value->is_null())
    return {};
  const auto* array = value->if_array();
  if (array == nullptr)
    throw Error(KEVAL_ERROR_INVALID_REQUEST,
                "metadata.compile_options must be an array of strings (NVRTC options)");
  std::vector<std::string> options;
  for (size_t i = 0; i < array->size(); ++i) {
    const auto* option = (*array)[i].if_string();
    if (option == nullptr)
      throw Error(KEVAL_ERROR_INVALID_REQUEST,
                  "metadata.compile_options[" + std::to_string(i) + "] must be a string");
    options.emplace_back(*option);
  }
  return options;
}

NvrtcOptions build_nvrtc_options(int arch, const std::vector<std::string>& include_dirs,
                                 const std::vector<std::string>& user_options) {
  NvrtcOptions out;
  out.target = "sm_" + std::to_string(arch);
  bool user_std = false;
  for (size_t i = 0; i < user_options.size(); ++i) {
    if (is_std_option(user_options[i]))
      user_std = true;
    if (!is_arch_option(user_options[i]))
      continue;
    const std::string value = option_value(user_options, i);
    if (!value.starts_with("sm_"))
      throw Error(KEVAL_ERROR_INVALID_REQUEST,
                  "metadata.compile_options: '" + user_options[i] +
                      "' must name a real architecture such as sm_90 or sm_90a: keval loads a "
                      "CUBIN, never PTX");
    out.target = value;
    out.user_chose_target = true;
  }
  if (!out.user_chose_target)
    out.options.push_back("-arch=" + out.target);
  if (!user_std)
    out.options.emplace_back("-std=c++17");
  for (const auto& dir : include_dirs)
    out.options.push_back("-I" + dir);
  out.options.insert(out.options.end(), user_options.begin(), user_options.end());
  return out;
}

} // namespace keval::cuda_plugin::detail
