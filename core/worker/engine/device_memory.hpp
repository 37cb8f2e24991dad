// A GPU's memory as the host sizes its pools of prestarted workers by (protocol::Hello and
// protocol::Done carry it; supervisor/gpu_memory.hpp decides with it).
#pragma once

#include "protocol/job_contract.hpp"
#include "worker/engine/engine.hpp"

#include <optional>

namespace keval::worker {

// `engine`'s GPU now, every process's allocations counted; nullopt for an engine that has no
// such count (the CPU) or a driver that cannot say (logged at debug: the host then sizes its
// pools by the machine's memory alone).
std::optional<protocol::DeviceMemoryReading> read_device_memory(Engine& engine);

} // namespace keval::worker
