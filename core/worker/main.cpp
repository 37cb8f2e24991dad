// keval-worker: runs exactly one job in a fresh process, talking to the host over the protocol
// descriptor it inherited. Also answers `--describe PLUGIN...` for the host's registry, so the
// host learns manifests without ever loading plugin code itself, and `--devices` for the daemon's
// GPU pool, so the host learns the GPUs without ever loading the CUDA driver itself.
//
// Usage:
//   keval-worker --protocol-fd FD [--prewarm PLUGIN.so]...
//     (--prewarm: started ahead of its job by `keval serve`; each plugin's SDK 1.1 prewarm runs
//      before the hello, so the job finds its interpreter and frameworks loaded)
//   keval-worker --describe PLUGIN.so [PLUGIN.so ...]   (one JSON object per line on stdout)
//   keval-worker --devices                              (one JSON object on stdout)
#include "common/log.hpp"
#include "common/version.hpp"
#include "protocol/blocking_channel.hpp"
#include "protocol/messages.hpp"
#include "worker/pipeline/pipeline.hpp"
#include "worker/pipeline/plugin_loader.hpp"

#ifdef KEVAL_HAVE_CUDA
#include "cuda/driver.hpp"
#endif

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value_to.hpp>
#include <unistd.h>

namespace {

int describe(int argc, char** argv) {
  int status = 0;
  for (int i = 2; i < argc; ++i) {
    boost::json::object line;
    try {
      keval::worker::LoadedPlugin plugin(argv[i]);
      line = plugin.describe();
      line["ok"] = true;
    } catch (const std::exception& e) {
      line["path"] = argv[i];
      line["ok"] = false;
      line["error"] = e.what();
      status = 1;
    }
    std::cout << boost::json::serialize(line) << '\n';
  }
  std::cout.flush();
  return status;
}

// Seed 000's GPU types ("Server automatically detects A100, H100, H200"), else "other".
std::string gpu_type_of(const std::string& device_name) {
  for (const char* type : {"H200", "H100", "A100"})
    if (device_name.find(type) != std::string::npos)
      return type;
  return "other";
}

// The CUDA devices this process can see (CUDA_VISIBLE_DEVICES applies: the driver honours it, and
// the indices are the ordinals a job's grant names): {"devices": [{index, name, gpu_type, arch,
// memory_bytes}]}, plus "reason" when there are none.
int list_devices() {
  boost::json::array devices;
  std::string reason;
#ifdef KEVAL_HAVE_CUDA
  try {
    const int count = keval::cuda::usable_device_count(&reason);
    if (count > 0) {
      const keval::cuda::DriverApi& d = keval::cuda::driver();
      for (int ordinal = 0; ordinal < count; ++ordinal) {
        CUdevice device = 0;
        keval::cuda::check(d.cuDeviceGet(&device, ordinal), "cuDeviceGet");
        char name[256] = {};
        keval::cuda::check(d.cuDeviceGetName(name, sizeof name - 1, device), "cuDeviceGetName");
        int major = 0, minor = 0;
        keval::cuda::check(
            d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
            "cuDeviceGetAttribute");
        keval::cuda::check(
            d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
            "cuDeviceGetAttribute");
        size_t memory = 0;
        keval::cuda::check(d.cuDeviceTotalMem(&memory, device), "cuDeviceTotalMem");
        boost::json::object entry;
        entry["index"] = ordinal;
        entry["name"] = name;
        entry["gpu_type"] = gpu_type_of(name);
        entry["arch"] = major * 10 + minor;
        entry["memory_bytes"] = static_cast<uint64_t>(memory);
        devices.push_back(std::move(entry));
      }
    }
  } catch (const std::exception& e) { // no device (CUDA_ERROR_NO_DEVICE), a broken driver, ...
    devices.clear();
    reason = e.what();
  }
#else
  reason = "this keval-worker was built without the CUDA toolkit";
#endif
  boost::json::object out;
  out["devices"] = std::move(devices);
  if (out["devices"].as_array().empty())
    out["reason"] = reason;
  std::cout << boost::json::serialize(out) << std::endl;
  return 0;
}

// Loads the plugins and runs their prewarm hooks. Failures are logged and reported in the hello,
// never fatal: the job then does that setup itself. The libraries stay loaded for the job.
struct Prewarmed {
  std::vector<std::unique_ptr<keval::worker::LoadedPlugin>> plugins;
  boost::json::array kernel_types;
  boost::json::array errors;
  double seconds = 0;
};

Prewarmed prewarm(const std::vector<std::string>& paths) {
  Prewarmed out;
  const auto started = std::chrono::steady_clock::now();
  for (const std::string& path : paths) {
    try {
      auto plugin = std::make_unique<keval::worker::LoadedPlugin>(path);
      const keval_plugin_api& api = plugin->api();
      if (KEVAL_STRUCT_HAS(&api, keval_plugin_api, prewarm) && api.prewarm != nullptr) {
        keval::worker::PluginError error(api, api.prewarm());
        if (error)
          throw std::runtime_error(error.message() +
                                   (error.details().empty() ? "" : "\n" + error.details()));
        out.kernel_types.emplace_back(plugin->manifest().kernel_type);
      }
      out.plugins.push_back(std::move(plugin));
    } catch (const std::exception& e) {
      spdlog::warn("prewarm of {} failed (the job will do that setup itself): {}", path, e.what());
      out.errors.emplace_back(path + ": " + e.what());
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

int serve_one_job(int fd, const std::vector<std::string>& prewarm_paths) {
  keval::protocol::BlockingChannel channel(fd);
  try {
    const Prewarmed prewarmed = prewarm(prewarm_paths);
    boost::json::object hello;
    hello["type"] = keval::protocol::msg::kHello;
    hello["worker_version"] = keval::kVersion;
    hello["pid"] = static_cast<int64_t>(::getpid());
    if (!prewarm_paths.empty()) {
      hello["prewarmed"] = prewarmed.kernel_types;
      hello["prewarm_seconds"] = prewarmed.seconds;
      if (!prewarmed.errors.empty())
        hello["prewarm_errors"] = prewarmed.errors;
    }
    channel.send(std::move(hello));

    boost::json::object frame = channel.receive();
    if (frame.at("type").as_string() != keval::protocol::msg::kJob)
      throw std::runtime_error("expected a job frame, got '" +
                               std::string(frame.at("type").as_string()) + "'");
    const keval::worker::JobSpec job = keval::worker::parse_job(frame);
    keval::worker::run_pipeline(channel, job);
    return 0;
  } catch (const std::exception& e) {
    spdlog::error("worker failed: {}", e.what());
    try {
      boost::json::object fatal;
      fatal["type"] = keval::protocol::msg::kFatal;
      fatal["message"] = e.what();
      channel.send(std::move(fatal));
    } catch (...) {
      // The host is gone or the channel is broken; the exit code tells the rest.
    }
    return 1;
  }
}

} // namespace

int main(int argc, char** argv) {
  keval::init_logging("keval-worker", "warn");
  if (argc >= 3 && std::strcmp(argv[1], "--describe") == 0)
    return describe(argc, argv);
  if (argc == 2 && std::strcmp(argv[1], "--devices") == 0)
    return list_devices();
  if (argc >= 3 && argc % 2 == 1 && std::strcmp(argv[1], "--protocol-fd") == 0) {
    std::vector<std::string> prewarm_paths;
    for (int i = 3; i + 1 < argc; i += 2) {
      if (std::strcmp(argv[i], "--prewarm") != 0) {
        std::fprintf(stderr, "keval-worker: unknown option '%s'\n", argv[i]);
        return 2;
      }
      prewarm_paths.emplace_back(argv[i + 1]);
    }
    return serve_one_job(std::stoi(argv[2]), prewarm_paths);
  }
  std::fprintf(
      stderr,
      "keval-worker %s: runs one keval job; started by keval, not by hand.\n"
      "usage: keval-worker --protocol-fd FD [--prewarm PLUGIN.so]... | --describe PLUGIN.so... "
      "| --devices\n",
      keval::kVersion);
  return 2;
}
