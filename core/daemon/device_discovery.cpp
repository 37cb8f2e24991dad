#include "daemon/device_discovery.hpp"

#include "supervisor/process.hpp"

#include <stdexcept>

#include <boost/json/parse.hpp>
#include <boost/json/value_to.hpp>

namespace keval::daemon {

namespace json = boost::json;

DeviceDiscovery parse_device_list(std::string_view text) {
  json::error_code ec;
  const json::value doc = json::parse(text, ec);
  if (ec || !doc.is_object() || !doc.as_object().contains("devices") ||
      !doc.at("devices").is_array())
    throw std::runtime_error("keval-worker --devices printed no device list: '" +
                             std::string(text.substr(0, 200)) + "'");
  DeviceDiscovery found;
  try {
    for (const auto& entry : doc.at("devices").as_array()) {
      const auto& d = entry.as_object();
      GpuDevice gpu;
      gpu.index = static_cast<int>(d.at("index").to_number<int64_t>());
      gpu.name = json::value_to<std::string>(d.at("name"));
      gpu.gpu_type = json::value_to<std::string>(d.at("gpu_type"));
      gpu.arch = static_cast<int>(d.at("arch").to_number<int64_t>());
      gpu.memory_bytes = d.at("memory_bytes").to_number<uint64_t>();
      found.gpus.push_back(std::move(gpu));
    }
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("keval-worker --devices printed a malformed device: ") +
                             e.what());
  }
  if (const auto* reason = doc.as_object().if_contains("reason"); reason && reason->is_string())
    found.reason = reason->as_string();
  return found;
}

DeviceDiscovery discover_devices(const std::filesystem::path& worker_exe) {
  try {
    const auto result =
        supervisor::run_command(worker_exe, {"--devices"}, std::chrono::seconds(60));
    if (result.timed_out)
      return {{}, "keval-worker --devices did not answer within 60 s"};
    if (result.exit_code != 0)
      return {{},
              "keval-worker --devices failed" +
                  (result.signal ? " (" + supervisor::describe_signal(*result.signal) + ")"
                                 : std::string()) +
                  (result.err.empty() ? "" : ": " + result.err)};
    return parse_device_list(result.out);
  } catch (const std::exception& e) {
    return {{}, e.what()};
  }
}

} // namespace keval::daemon
