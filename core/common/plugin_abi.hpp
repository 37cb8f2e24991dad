// The host's side of the SDK contract: the version policy and capability names, shared by the
// registry (host) and the plugin loader (worker) so both judge a plugin the same way.
#pragma once

#include <keval/plugin.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace keval {

// Why a plugin built for API `major.minor` cannot be used by this host, or nullopt if it can.
std::optional<std::string> api_version_problem(uint32_t major, uint32_t minor);

// Capability bits <-> names ("requires_io_contract", "default_inputs", "cuda", "cpu", ...).
std::vector<std::string> capability_names(uint32_t capabilities);
uint32_t capabilities_from_names(const std::vector<std::string>& names);
// Every capability bit this SDK defines (the ones with names).
uint32_t known_capabilities();

} // namespace keval
