#include "common/plugin_abi.hpp"

#include <array>
#include <utility>

namespace keval {

namespace {

constexpr std::array<std::pair<uint32_t, const char*>, 8> kCapabilityNames{{
    {KEVAL_CAP_REQUIRES_IO_CONTRACT, "requires_io_contract"},
    {KEVAL_CAP_DEFAULT_INPUTS, "default_inputs"},
    {KEVAL_CAP_DEVICE_CUDA, "cuda"},
    {KEVAL_CAP_DEVICE_CPU, "cpu"},
    {KEVAL_CAP_RETURNS_OUTPUTS, "returns_outputs"},
    {KEVAL_CAP_NEEDS_PYTHON, "python"},
    {KEVAL_CAP_PROGRAM, "program"},
    {KEVAL_CAP_ONE_STREAM, "one_stream"},
}};

} // namespace

std::optional<std::string> api_version_problem(uint32_t major, uint32_t minor) {
  const std::string theirs = std::to_string(major) + "." + std::to_string(minor);
  const std::string ours =
      std::to_string(KEVAL_PLUGIN_API_MAJOR) + "." + std::to_string(KEVAL_PLUGIN_API_MINOR);
  if (major != KEVAL_PLUGIN_API_MAJOR)
    return "plugin API major version mismatch: plugin built for " + theirs + ", host supports " +
           std::to_string(KEVAL_PLUGIN_API_MAJOR) + ".x";
  if (minor > KEVAL_PLUGIN_API_MINOR)
    return "plugin built for newer API " + theirs + " than this host provides (" + ours +
           "); upgrade keval";
  return std::nullopt;
}

std::vector<std::string> capability_names(uint32_t capabilities) {
  std::vector<std::string> names;
  for (const auto& [bit, name] : kCapabilityNames)
    if (capabilities & bit)
      names.emplace_back(name);
  return names;
}

uint32_t known_capabilities() {
  uint32_t bits = 0;
  for (const auto& [bit, name] : kCapabilityNames)
    bits |= bit;
  return bits;
}

uint32_t capabilities_from_names(const std::vector<std::string>& names) {
  uint32_t bits = 0;
  for (const auto& name : names)
    for (const auto& [bit, known] : kCapabilityNames)
      if (name == known)
        bits |= bit;
  return bits;
}

} // namespace keval
