// The engine for CUDA devices: tensors in device memory, generation, poisoning and comparison by
// keval's own kernels on the device (only summaries come back to the host), timing by CUDA graph
// replay or CUDA events with the L2 cache flushed before every sample.
#pragma once

#include "worker/engine/engine.hpp"

#include <memory>
#include <string>

namespace keval::worker {

struct CudaAvailability {
  bool usable = false;
  // Why not, when !usable: "no CUDA driver: cannot load libcuda.so.1 (...)", "cuInit failed:
  // CUDA_ERROR_NO_DEVICE: ...", "no CUDA device present (cuDeviceGetCount returned 0)". Empty
  // when usable.
  std::string reason;
  int device_count = 0;
  int arch_of_first = 0;     // compute capability of device 0 as major * 10 + minor (90 for sm_90)
  std::string name_of_first; // "NVIDIA H100 80GB HBM3"
};

// Loads the driver, initialises it and reads device 0's compute capability. Creates no context
// (cheap enough to run before compiling) and never throws.
CudaAvailability probe_cuda();

// Which process an engine serves. The trusted worker's engine keeps the memory it frees in the
// device's pool for its next allocation (it makes and drops inputs and output copies every timed
// sample); a runner's hands memory back at once, since user code shares its device and streams.
enum class EngineUse { runner, trusted };

// An engine on device `ordinal`: retains its primary context and makes it current on the calling
// thread, which must be the thread that uses the engine. Throws cuda::DriverUnavailable or
// cuda::CudaError (the failing step and the driver's error text in the message).
//
// The engine's operations throw KernelFault once the kernel under test has broken the context
// (CUDA_ERROR_ILLEGAL_ADDRESS and its kind), synchronize() and Timer::sample() for any device
// error; std::invalid_argument for tensors they cannot handle; cuda::CudaError for other driver
// failures. Tensors and timers must not outlive their engine.
std::unique_ptr<Engine> make_cuda_engine(int ordinal, EngineUse use);

// Loads the device tracer (CUPTI) into this process, tracing nothing yet, so that a job's first
// timer only turns it on: a runner does it once its kernel has compiled, before its job's grant,
// instead of with the GPU held (where it was most of a job's profiling set-up: 63 to 87 ms a side
// for torch on the H200, 0.1 ms left to turn it on). Never throws: a tracer that cannot be loaded
// says why when a timer asks for it.
void load_device_trace_ahead();

} // namespace keval::worker
