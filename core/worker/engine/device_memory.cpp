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
    if (!memory)
      return std::nullopt;
    protocol::DeviceMemoryReading reading{gpu, memory->free_bytes, memory->total_bytes};
    if (!protocol::plausible(reading))
      return std::nullopt; // the host would refuse the whole `done` for it
    return reading;
  } catch (const std::exception& e) {
    spdlog::debug("the memory of GPU {} cannot be read: {}", gpu, e.what());
    return std::nullopt;
  }
}

} // namespace keval::worker
