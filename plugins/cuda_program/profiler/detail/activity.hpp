// CUPTI activity intake: the buffer callbacks, and turning records into State.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cupti.h>

namespace keval::profiler {

// 8 MiB buffers, 8-byte aligned, as CUPTI requires.
void CUPTIAPI buffer_requested(uint8_t** buffer, std::size_t* size, std::size_t* max_records);

// Aggregates kernels and copies as they arrive; keeps per-record data only once NVTX ranges
// exist (see State::ranges_seen). Runs on CUPTI's thread, or on the thread that flushes.
void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                               std::size_t size, std::size_t valid_size);

} // namespace keval::profiler
