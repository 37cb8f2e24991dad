// The plugin registry: which kernel types exist, where their libraries are, and why any
// candidate was turned away. The host never loads plugin code: a candidate's exported symbols
// are read from the file (Boost.DLL library_info), and its manifest is obtained by asking
// `keval-worker --describe` in a child process, so a broken plugin cannot take the host down.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/array.hpp>

namespace keval::registry {

struct PluginInfo {
  std::filesystem::path path;
  std::string kernel_type;
  std::string plugin_version;
  std::string description;
  uint32_t api_major = 0;
  uint32_t api_minor = 0;
  uint32_t capabilities = 0; // KEVAL_CAP_* bits
  bool prewarm = false;      // has an SDK 1.1 prewarm hook (worth a prestarted worker)
  // Empty when the plugin is usable; otherwise why it was rejected.
  std::string error;

  bool usable() const { return error.empty(); }
  bool has(uint32_t capability) const { return (capabilities & capability) != 0; }
};

// Directories searched, in priority order: each entry of KEVAL_PLUGIN_PATH (colon-separated),
// then `<exe_dir>/../lib/keval/plugins` (build tree and install prefix share this layout).
std::vector<std::filesystem::path> default_search_path(const std::filesystem::path& exe_dir);

class Registry {
public:
  // Scans `dirs` for shared objects and probes each with `worker_exe`. Never throws for a bad
  // plugin: it is listed with its error instead.
  static Registry discover(const std::vector<std::filesystem::path>& dirs,
                           const std::filesystem::path& worker_exe,
                           std::chrono::milliseconds probe_timeout = std::chrono::seconds(30));

  // Every candidate, usable or not, in discovery order.
  const std::vector<PluginInfo>& plugins() const { return plugins_; }
  // The usable plugin serving `kernel_type`, or nullptr.
  const PluginInfo* find(std::string_view kernel_type) const;
  std::vector<std::string> kernel_types() const;
  const std::vector<std::filesystem::path>& search_path() const { return dirs_; }

  boost::json::array to_json() const;

private:
  std::vector<std::filesystem::path> dirs_;
  std::vector<PluginInfo> plugins_;
};

} // namespace keval::registry
