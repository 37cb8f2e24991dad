#include "registry/registry.hpp"

#include "common/plugin_abi.hpp"
#include "supervisor/process.hpp"

#include <keval/plugin.h>

#include <algorithm>
#include <cstdlib>
#include <future>
#include <set>
#include <sstream>

#include <boost/dll/library_info.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value_to.hpp>

namespace keval::registry {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

bool looks_like_shared_object(const fs::path& p) {
  const std::string name = p.filename().string();
  return name.size() > 3 && (name.ends_with(".so") || name.find(".so.") != std::string::npos);
}

// Reads the file's dynamic symbol table without loading it.
std::string entry_symbol_problem(const fs::path& path) {
  try {
    boost::dll::library_info info(path);
    const auto symbols = info.symbols();
    if (std::find(symbols.begin(), symbols.end(), KEVAL_PLUGIN_ENTRY_NAME) == symbols.end())
      return "missing entry symbol " KEVAL_PLUGIN_ENTRY_NAME
             " (not a keval plugin, or built without KEVAL_PLUGIN)";
    return {};
  } catch (const std::exception& e) {
    return std::string("not a readable shared library: ") + e.what();
  }
}

void probe(PluginInfo& info, const fs::path& worker_exe, std::chrono::milliseconds timeout) {
  supervisor::CommandResult r;
  try {
    r = supervisor::run_command(worker_exe, {"--describe", info.path.string()}, timeout);
  } catch (const std::exception& e) {
    info.error = "cannot start plugin probe " + worker_exe.string() + ": " + e.what();
    return;
  }
  if (r.timed_out) {
    info.error = "plugin probe timed out after " + std::to_string(timeout.count()) +
                 " ms (the library hangs while loading)";
    return;
  }
  if (r.signal) {
    info.error =
        "loading the plugin crashed the probe with " + supervisor::describe_signal(*r.signal);
    return;
  }
  json::error_code ec;
  const json::value line = json::parse(r.out, ec);
  if (ec || !line.is_object()) {
    info.error = "plugin probe gave no manifest (exit " + std::to_string(r.exit_code.value_or(-1)) +
                 "): " + r.err;
    return;
  }
  const auto& o = line.as_object();
  if (!o.at("ok").as_bool()) {
    info.error = json::value_to<std::string>(o.at("error"));
    return;
  }
  info.kernel_type = json::value_to<std::string>(o.at("kernel_type"));
  info.plugin_version = json::value_to<std::string>(o.at("plugin_version"));
  info.description = json::value_to<std::string>(o.at("description"));
  info.api_major = static_cast<uint32_t>(o.at("api_major").to_number<int64_t>());
  info.api_minor = static_cast<uint32_t>(o.at("api_minor").to_number<int64_t>());
  info.capabilities =
      capabilities_from_names(json::value_to<std::vector<std::string>>(o.at("capabilities")));
  info.prewarm = o.contains("prewarm") && o.at("prewarm").is_bool() && o.at("prewarm").as_bool();
  // The worker already refused incompatible versions; judging again here keeps the policy in
  // the host even if a different worker binary answered.
  if (auto problem = api_version_problem(info.api_major, info.api_minor))
    info.error = *problem;
}

} // namespace

std::vector<fs::path> default_search_path(const fs::path& exe_dir) {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("KEVAL_PLUGIN_PATH")) {
    std::stringstream ss(env);
    std::string item;
    while (std::getline(ss, item, ':'))
      if (!item.empty())
        dirs.emplace_back(item);
  }
  dirs.push_back((exe_dir / ".." / "lib" / "keval" / "plugins").lexically_normal());
  return dirs;
}

Registry Registry::discover(const std::vector<fs::path>& dirs, const fs::path& worker_exe,
                            std::chrono::milliseconds probe_timeout) {
  Registry registry;
  registry.dirs_ = dirs;
  std::set<fs::path> seen;
  for (const auto& dir : dirs) {
    std::error_code ec;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (entry.is_regular_file(ec) && looks_like_shared_object(entry.path()))
        files.push_back(entry.path());
    std::sort(files.begin(), files.end()); // deterministic order within a directory
    for (const auto& file : files) {
      const fs::path canonical = fs::weakly_canonical(file, ec);
      if (!seen.insert(canonical).second)
        continue; // the same library reached through two search entries
      PluginInfo info;
      info.path = canonical;
      info.error = entry_symbol_problem(canonical);
      registry.plugins_.push_back(std::move(info));
    }
  }

  // Probe all candidates at once: each in its own short-lived process.
  std::vector<std::future<void>> probes;
  for (auto& info : registry.plugins_)
    if (info.usable())
      probes.push_back(std::async(std::launch::async, [&info, &worker_exe, probe_timeout] {
        probe(info, worker_exe, probe_timeout);
      }));
  for (auto& p : probes)
    p.get();

  // First usable provider of a kernel type wins (search path order); later ones are rejected.
  for (auto& info : registry.plugins_) {
    if (!info.usable())
      continue;
    for (const auto& earlier : registry.plugins_) {
      if (&earlier == &info)
        break;
      if (earlier.usable() && earlier.kernel_type == info.kernel_type) {
        info.error = "duplicate kernel type '" + info.kernel_type + "': already provided by " +
                     earlier.path.string();
        break;
      }
    }
  }
  return registry;
}

const PluginInfo* Registry::find(std::string_view kernel_type) const {
  for (const auto& info : plugins_)
    if (info.usable() && info.kernel_type == kernel_type)
      return &info;
  return nullptr;
}

std::vector<std::string> Registry::kernel_types() const {
  std::vector<std::string> types;
  for (const auto& info : plugins_)
    if (info.usable())
      types.push_back(info.kernel_type);
  return types;
}

json::array Registry::to_json() const {
  json::array out;
  for (const auto& info : plugins_) {
    json::object o;
    o["path"] = info.path.string();
    o["usable"] = info.usable();
    if (!info.kernel_type.empty()) {
      o["kernel_type"] = info.kernel_type;
      o["plugin_version"] = info.plugin_version;
      o["api_version"] = std::to_string(info.api_major) + "." + std::to_string(info.api_minor);
      o["description"] = info.description;
      json::array caps;
      for (const auto& c : capability_names(info.capabilities))
        caps.emplace_back(c);
      o["capabilities"] = std::move(caps);
    }
    if (!info.usable())
      o["error"] = info.error;
    out.push_back(std::move(o));
  }
  return out;
}

} // namespace keval::registry
