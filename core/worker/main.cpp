// keval-worker: runs exactly one job in a fresh process, talking to the host over the protocol
// descriptor it inherited. Also answers `--describe PLUGIN...` for the host's registry, so the
// host learns manifests without ever loading plugin code itself, and `--devices` for the daemon's
// GPU pool, so the host learns the GPUs without ever loading the CUDA driver itself.
//
// Usage:
//   keval-worker --protocol-fd FD
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

#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

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

int serve_one_job(int fd) {
  keval::protocol::BlockingChannel channel(fd);
  try {
    boost::json::object hello;
    hello["type"] = keval::protocol::msg::kHello;
    hello["worker_version"] = keval::kVersion;
    hello["pid"] = static_cast<int64_t>(::getpid());
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
  if (argc == 3 && std::strcmp(argv[1], "--protocol-fd") == 0)
    return serve_one_job(std::stoi(argv[2]));
  std::fprintf(stderr,
               "keval-worker %s: runs one keval job; started by keval, not by hand.\n"
               "usage: keval-worker --protocol-fd FD | --describe PLUGIN.so... | --devices\n",
               keval::kVersion);
  return 2;
}
