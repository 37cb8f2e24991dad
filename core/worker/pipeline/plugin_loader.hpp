// Loads a plugin library in the worker with Boost.DLL and checks its table before any use.
#pragma once

#include <keval/plugin.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include <boost/dll/shared_library.hpp>
#include <boost/json/object.hpp>

namespace keval::worker {

// The plugin cannot be used (missing symbol, version mismatch, malformed table).
class PluginLoadError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class LoadedPlugin {
public:
  // Loads and validates; throws PluginLoadError.
  explicit LoadedPlugin(const std::filesystem::path& path);

  const keval_plugin_api& api() const { return *api_; }
  const keval_manifest& manifest() const { return *manifest_; }
  const std::filesystem::path& path() const { return path_; }
  bool has(uint32_t capability) const { return (manifest_->capabilities & capability) != 0; }
  // The 1.2 entry of a program type, or nullptr (an older table, or not a program type).
  decltype(keval_plugin_api::plan_program) plan_program() const;
  // {path, kernel_type, plugin_version, api_major, api_minor, capabilities[], description}
  boost::json::object describe() const;

private:
  std::filesystem::path path_;
  boost::dll::shared_library library_;
  const keval_plugin_api* api_ = nullptr;
  const keval_manifest* manifest_ = nullptr;
};

// Owns a keval_error* from a plugin and frees it through the plugin's table.
class PluginError {
public:
  PluginError(const keval_plugin_api& api, keval_error* error) : api_(&api), error_(error) {}
  ~PluginError() {
    if (error_ != nullptr && api_->error_destroy != nullptr)
      api_->error_destroy(error_);
  }
  PluginError(const PluginError&) = delete;
  PluginError& operator=(const PluginError&) = delete;

  explicit operator bool() const { return error_ != nullptr; }
  int32_t code() const;
  std::string message() const;
  std::string details() const;

private:
  const keval_plugin_api* api_;
  keval_error* error_;
};

const char* error_code_name(int32_t code);

} // namespace keval::worker
