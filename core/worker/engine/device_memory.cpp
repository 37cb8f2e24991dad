#include "worker/engine/device_memory.hpp"

#include "common/log.hpp"
#include "worker/engine/device_turn.hpp"

#include <exception>

namespace keval::worker {

std::optional<protocol::DeviceMemoryReading> read_device_memory(Engine& engine) {
  const std::string gpu = DeviceTurn::gpu_of(engine);
  if (gpu.empty())
    return std::nullopt;
  try {
    const std::optional<Engine::DeviceMemory> memory = engine.device_memory();
    if (!memory || memory->total_bytes == 0 || memory->free_bytes > memory->total_bytes)
      return std::nullopt;
    return protocol::DeviceMemoryReading{gpu, memory->free_bytes, memory->total_bytes};
  } catch (const std::exception& e) {
    spdlog::debug("the memory of GPU {} cannot be read: {}", gpu, e.what());
    return std::nullopt;
  }
}

} // namespace keval::worker
