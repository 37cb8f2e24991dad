// Which GPUs the daemon can lease. The host never loads the CUDA driver: it asks
// `keval-worker --devices` once at start-up, in a child process, so a broken driver cannot take
// the daemon down and CUDA_VISIBLE_DEVICES means what it means to every job's worker.
#pragma once

#include "daemon/device_pool.hpp"

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace keval::daemon {

struct DeviceDiscovery {
  std::vector<GpuDevice> gpus;
  std::string reason; // why there are none ("no CUDA driver: ...")
};

// Parses the worker's one-line answer. Throws std::runtime_error when it is not that.
DeviceDiscovery parse_device_list(std::string_view text);

// Runs `worker_exe --devices`. Never throws: a worker that fails is a host without GPUs, with
// the failure as the reason.
DeviceDiscovery discover_devices(const std::filesystem::path& worker_exe);

} // namespace keval::daemon
