#include "worker/pipeline/plugin_loader.hpp"

#include "common/plugin_abi.hpp"

#include <boost/json/array.hpp>
#include <dlfcn.h>

namespace keval::worker {

namespace {

// Boost.DLL reports a generic error code; the dynamic loader's own text names the missing
// dependency or symbol, which is what a plugin author needs. Ask the loader once more for it.
std::string loader_error_text(const std::filesystem::path& path,
                              const boost::system::error_code& ec) {
  if (void* handle = ::dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL)) {
    ::dlclose(handle);
    return ec.message();
  }
  const char* text = ::dlerror();
  return text != nullptr ? text : ec.message();
}

} // namespace

LoadedPlugin::LoadedPlugin(const std::filesystem::path& path) : path_(path) {
  boost::system::error_code ec;
  // Local binding: two plugins may carry different copies of the same library symbols.
  library_.load(path, ec, boost::dll::load_mode::rtld_lazy | boost::dll::load_mode::rtld_local);
  if (ec)
    throw PluginLoadError("cannot load " + path.string() + ": " + loader_error_text(path, ec));
  if (!library_.has(KEVAL_PLUGIN_ENTRY_NAME))
    throw PluginLoadError(path.string() + " does not export " KEVAL_PLUGIN_ENTRY_NAME);
  auto entry = library_.get<const keval_plugin_api*()>(KEVAL_PLUGIN_ENTRY_NAME);
  api_ = entry();
  if (api_ == nullptr)
    throw PluginLoadError(path.string() + ": entry returned no function table");
  if (api_->struct_size < offsetof(keval_plugin_api, kernel_destroy) + sizeof(void*))
    throw PluginLoadError(path.string() + ": function table too small (" +
                          std::to_string(api_->struct_size) + " bytes)");
  if (auto problem = api_version_problem(api_->api_major, api_->api_minor))
    throw PluginLoadError(*problem);
  if (!api_->error_destroy || !api_->manifest || !api_->compile || !api_->launch ||
      !api_->kernel_destroy || !api_->bind_device)
    throw PluginLoadError(path.string() + ": function table has a required entry missing");
  manifest_ = api_->manifest();
  if (manifest_ == nullptr || !KEVAL_STRUCT_HAS(manifest_, keval_manifest, capabilities) ||
      manifest_->kernel_type == nullptr || manifest_->kernel_type[0] == '\0' ||
      manifest_->plugin_version == nullptr)
    throw PluginLoadError(path.string() + ": manifest missing or incomplete");
  if ((manifest_->capabilities & KEVAL_CAP_DEFAULT_INPUTS) && api_->default_inputs == nullptr)
    throw PluginLoadError(path.string() +
                          ": declares default_inputs but its table has no default_inputs entry");
  if ((manifest_->capabilities & KEVAL_CAP_PROGRAM) && plan_program() == nullptr)
    throw PluginLoadError(path.string() +
                          ": declares program but its table has no plan_program entry (1.2)");
}

decltype(keval_plugin_api::plan_program) LoadedPlugin::plan_program() const {
  return KEVAL_STRUCT_HAS(api_, keval_plugin_api, plan_program) ? api_->plan_program : nullptr;
}

boost::json::object LoadedPlugin::describe() const {
  boost::json::object o;
  o["path"] = path_.string();
  o["kernel_type"] = manifest_->kernel_type;
  o["plugin_version"] = manifest_->plugin_version;
  o["api_major"] = api_->api_major;
  o["api_minor"] = api_->api_minor;
  o["description"] = manifest_->description ? manifest_->description : "";
  boost::json::array caps;
  for (const auto& name : capability_names(manifest_->capabilities))
    caps.emplace_back(name);
  o["capabilities"] = std::move(caps);
  o["prewarm"] = KEVAL_STRUCT_HAS(api_, keval_plugin_api, prewarm) && api_->prewarm != nullptr;
  o["warm_device"] =
      KEVAL_STRUCT_HAS(api_, keval_plugin_api, warm_device) && api_->warm_device != nullptr;
  return o;
}

int32_t PluginError::code() const {
  return error_ ? error_->code : 0;
}

std::string PluginError::message() const {
  if (!error_)
    return {};
  return error_->message ? error_->message : "(no message)";
}

std::string PluginError::details() const {
  if (!error_ || !KEVAL_STRUCT_HAS(error_, keval_error, details) || !error_->details)
    return {};
  return error_->details;
}

const char* error_code_name(int32_t code) {
  switch (code) {
  case KEVAL_ERROR_COMPILE:
    return "compile_error";
  case KEVAL_ERROR_RUNTIME:
    return "runtime_error";
  case KEVAL_ERROR_INVALID_REQUEST:
    return "invalid_request";
  case KEVAL_ERROR_UNSUPPORTED:
    return "unsupported";
  case KEVAL_ERROR_INTERNAL:
    return "internal_error";
  default:
    return "unknown_error";
  }
}

} // namespace keval::worker
