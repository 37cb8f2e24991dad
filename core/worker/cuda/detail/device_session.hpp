// What a CUDA engine holds on its device: the retained primary context, the stream all work goes
// to, keval's kernel module, scratch buffers, and the rule that turns driver errors into
// exceptions (CudaError for failures of keval or the machine, KernelFault once the kernel under
// test has broken the context). Shared by the engine and its timers.
#pragma once

#include "common/unique_fd.hpp"
#include "cuda/driver.hpp"
#include "worker/cuda/detail/kernel_abi.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace keval::worker::detail {

// One device buffer, freed on destruction; empty (address 0) for zero bytes, which the driver
// refuses to allocate. Either cuMemAlloc'd, or stream-ordered from the device's memory pool
// (DeviceSession::allocate of a pooled session): freed on that stream, where the pool keeps it
// for the next allocation instead of handing it back to the driver.
class DeviceMemory {
public:
  DeviceMemory() = default;
  explicit DeviceMemory(size_t bytes);
  // Takes over `address`, allocated with cuMemAllocAsync on `stream` (which must outlive it).
  DeviceMemory(CUdeviceptr address, size_t bytes, CUstream stream)
      : address_(address), bytes_(bytes), stream_(stream) {}
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory();

  CUdeviceptr address() const { return address_; }
  size_t bytes() const { return bytes_; }

private:
  CUdeviceptr address_ = 0;
  size_t bytes_ = 0;
  CUstream stream_ = nullptr; // set: stream-ordered, freed with cuMemFreeAsync on it
};

// Device memory another process can map: a CUDA VMM allocation (cuMemCreate) exportable as a
// POSIX file descriptor, mapped into this context. The descriptor is a capability: a process that
// was not handed it cannot import the memory, unlike legacy IPC handles, which are plain bytes
// and work across PID namespaces only with help.
class SharedDeviceMemory {
public:
  // A new allocation of at least `bytes` (rounded up to the granularity) on device `ordinal`.
  static SharedDeviceMemory create(int ordinal, size_t bytes);
  // Imports and maps a descriptor another process exported with `bytes` bytes. Throws
  // std::invalid_argument when the descriptor is not such an allocation.
  static SharedDeviceMemory open(int ordinal, UniqueFd fd, size_t bytes);

  SharedDeviceMemory(SharedDeviceMemory&& other) noexcept;
  SharedDeviceMemory& operator=(SharedDeviceMemory&&) = delete;
  SharedDeviceMemory(const SharedDeviceMemory&) = delete;
  ~SharedDeviceMemory();

  CUdeviceptr address() const { return address_; }
  size_t bytes() const { return bytes_; } // the mapped size (a multiple of the granularity)
  int fd() const { return fd_.get(); }    // the exported descriptor (created ones only)

private:
  SharedDeviceMemory() = default;
  static size_t granularity(int ordinal);
  void map(int ordinal);
  CUmemGenericAllocationHandle handle_ = 0;
  CUdeviceptr address_ = 0;
  size_t bytes_ = 0;
  UniqueFd fd_;
};

// How a session allocates the memory only its own process uses.
enum class PrivateMemory {
  // cuMemAlloc and cuMemFree every time: memory goes back to the driver at once. For processes
  // that run user code, whose streams keval does not order.
  direct,
  // Stream-ordered from the device's default memory pool, which keeps up to a bounded amount of
  // freed memory: the trusted worker makes and drops inputs and output copies every timed
  // sample, and cuMemAlloc/cuMemFree each take the driver's device-wide lock (and cuMemFree
  // synchronises the device), so while other processes create or destroy contexts on the GPU
  // each one took 20 ms instead of 0.2 ms on the H100.
  pooled,
};

enum class Kernel {
  fill,
  fill_pattern64,
  gather,
  same_bytes,
  compare_totals,
  compare_find_mismatch,
  compare_find_max_abs,
  l2_flush,
  sample_start,
  sample_stop,
  clock_probe,
};

class DeviceSession {
public:
  // Elements per comparison window (see CudaEngine::compare).
  static constexpr size_t kWindowElements = 4096;
  static constexpr size_t kWindowBytes = kWindowElements * sizeof(uint64_t);

  // Retains device `ordinal`'s primary context, makes it current on this thread, creates a
  // non-blocking stream, loads the kernels and allocates the scratch buffers. Throws
  // cuda::DriverUnavailable or cuda::CudaError (with the failing step in the message).
  explicit DeviceSession(int ordinal, PrivateMemory memory = PrivateMemory::direct);
  ~DeviceSession();
  DeviceSession(const DeviceSession&) = delete;
  DeviceSession& operator=(const DeviceSession&) = delete;

  int ordinal() const { return ordinal_; }
  CUdevice device() const { return device_; }
  CUcontext context() const { return context_; }
  // Makes the context current on the calling thread (a session opened on another thread).
  void make_current() const;
  CUstream stream() const { return stream_; }

  // `bytes` of device memory for this process alone, as the session's PrivateMemory says. A
  // pooled allocation the device cannot fit first returns the pool's idle memory to the driver
  // and tries once more. Throws cuda::CudaError.
  DeviceMemory allocate(size_t bytes);

  // Throws KernelFault when an earlier call hit an error that leaves the context unusable
  // (CUDA_ERROR_ILLEGAL_ADDRESS and its kind): every later call would fail the same way.
  void throw_if_faulted() const;
  // For keval's own calls: CudaError for ordinary failures; KernelFault (remembered for
  // throw_if_faulted) when `result` says the context is lost, which only a kernel fault does.
  void check(CUresult result, const char* what);
  // For calls that observe the kernel's execution (synchronisation, timing): any error is the
  // kernel's, KernelFault with the driver's error text.
  void check_execution(CUresult result);
  // For calls whose ordinary failures the caller handles itself: throws KernelFault only when
  // `result` says the context is lost.
  void check_context(CUresult result, const char* what);

  // Enqueues `kernel` on the stream with a grid sized for `work_items` grid-stride iterations.
  template <typename Params> void launch(Kernel kernel, uint64_t work_items, Params params) {
    void* arguments[] = {&params};
    launch_raw(kernel, work_items, arguments);
  }

  // Waits for every stream of the context, not only keval's (work a kernel left on its own);
  // errors as check_execution.
  void synchronize_context();

  // Stream-ordered copies that return once the bytes have arrived.
  void copy_to_host(void* host, CUdeviceptr device, size_t bytes);
  void copy_from_host(CUdeviceptr device, const void* host, size_t bytes);

  // Empties the L2 of everything a kernel left there, enqueued on the stream: reads a zeroed
  // buffer of at least twice the L2's size (keval_l2_flush), so only clean lines stay behind.
  void flush_l2();
  // Enqueues keval_sample_start, which holds the stream until release_sample_start() (or a
  // timeout): see kernel_abi.hpp. Its end marks a sample's start in a device trace.
  void hold_sample_start();
  // Lets the held keval_sample_start go.
  void release_sample_start();
  // Enqueues keval_sample_stop, whose start marks a sample's end in a device trace.
  void mark_sample_stop();
  // The SM clock now, in MHz, measured on the device (keval_clock_probe; waits for it).
  double sm_clock_mhz();
  // One CompareTotals, and two windows (0: expected, 1: actual) of kWindowElements elements of
  // the widest type.
  CUdeviceptr compare_totals() const { return compare_totals_.address(); }
  CUdeviceptr window(int which) const {
    return windows_.address() + static_cast<CUdeviceptr>(which) * kWindowBytes;
  }
  // A 4-byte flag for keval_same_bytes.
  CUdeviceptr flag() const { return flag_.address(); }

private:
  void release() noexcept;
  void configure_pool();
  void launch_raw(Kernel kernel, uint64_t work_items, void** arguments);

  int ordinal_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction functions_[11] = {};
  unsigned max_blocks_ = 0;
  CUmemoryPool pool_ = nullptr; // the device's default pool, for PrivateMemory::pooled
  std::string fault_;
  // Declared after the context fields: destroyed before the context is released.
  DeviceMemory l2_flush_;
  DeviceMemory compare_totals_;
  DeviceMemory windows_;
  DeviceMemory flag_;
  DeviceMemory probe_; // keval_clock_probe's {cycles, nanoseconds}
  // keval_sample_start's release word, host-mapped.
  volatile uint32_t* hold_release_ = nullptr;
  CUdeviceptr hold_release_device_ = 0;
  uint32_t hold_token_ = 0;
};

} // namespace keval::worker::detail
