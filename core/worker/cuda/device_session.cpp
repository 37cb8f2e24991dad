#include "worker/cuda/detail/device_session.hpp"

#include "common/log.hpp"
#include "worker/cuda/detail/embedded_kernels.hpp"
#include "worker/engine/engine.hpp"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <utility>

#include <fcntl.h>

namespace keval::worker::detail {

namespace {

const cuda::DriverApi& api() {
  return cuda::driver();
}

// Errors after which "any further CUDA work will return the same error" (cuda.h): the context is
// gone for good, and only a kernel can have done that. The two newest are spelled as numbers so
// that this builds with CUDA 12 headers that predate them.
bool loses_context(CUresult result) {
  switch (static_cast<int>(result)) {
  case CUDA_ERROR_ILLEGAL_ADDRESS:
  case CUDA_ERROR_LAUNCH_TIMEOUT:
  case CUDA_ERROR_ASSERT:
  case CUDA_ERROR_HARDWARE_STACK_ERROR:
  case CUDA_ERROR_ILLEGAL_INSTRUCTION:
  case CUDA_ERROR_MISALIGNED_ADDRESS:
  case CUDA_ERROR_INVALID_ADDRESS_SPACE:
  case CUDA_ERROR_INVALID_PC:
  case CUDA_ERROR_LAUNCH_FAILED:
  case CUDA_ERROR_EXTERNAL_DEVICE:
  case 226: // CUDA_ERROR_CONTAINED
  case 721: // CUDA_ERROR_TENSOR_MEMORY_LEAK
    return true;
  default:
    return false;
  }
}

const char* kernel_name(Kernel kernel) {
  switch (kernel) {
  case Kernel::fill:
    return kFillKernel;
  case Kernel::fill_pattern64:
    return kFillPattern64Kernel;
  case Kernel::gather:
    return kGatherKernel;
  case Kernel::same_bytes:
    return kSameBytesKernel;
  case Kernel::compare_totals:
    return kCompareTotalsKernel;
  case Kernel::compare_find_mismatch:
    return kCompareFindMismatchKernel;
  case Kernel::compare_find_max_abs:
    return kCompareFindMaxAbsKernel;
  case Kernel::l2_flush:
    return kL2FlushKernel;
  case Kernel::sample_start:
    return kSampleStartKernel;
  case Kernel::sample_stop:
    return kSampleStopKernel;
  case Kernel::clock_probe:
    return kClockProbeKernel;
  }
  return "?";
}

constexpr Kernel kAllKernels[] = {Kernel::fill,
                                  Kernel::fill_pattern64,
                                  Kernel::gather,
                                  Kernel::same_bytes,
                                  Kernel::compare_totals,
                                  Kernel::compare_find_mismatch,
                                  Kernel::compare_find_max_abs,
                                  Kernel::l2_flush,
                                  Kernel::sample_start,
                                  Kernel::sample_stop,
                                  Kernel::clock_probe};

constexpr unsigned kThreadsPerBlock = 256;
// Enough resident blocks to fill every multiprocessor several times over; grid-stride loops do
// the rest.
constexpr unsigned kBlocksPerMultiprocessor = 16;

} // namespace

// ---------------------------------------------------------------------------------------------
// DeviceMemory

DeviceMemory::DeviceMemory(size_t bytes) : bytes_(bytes) {
  if (bytes > 0)
    cuda::check(api().cuMemAlloc(&address_, bytes),
                ("cuMemAlloc of " + std::to_string(bytes) + " bytes").c_str());
}

DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : address_(std::exchange(other.address_, 0)), bytes_(std::exchange(other.bytes_, 0)),
      stream_(std::exchange(other.stream_, nullptr)) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    DeviceMemory old(std::move(*this));
    address_ = std::exchange(other.address_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

DeviceMemory::~DeviceMemory() {
  if (address_ == 0)
    return;
  // These fail only on a lost context, whose memory is gone anyway.
  if (stream_ != nullptr)
    api().cuMemFreeAsync(address_, stream_);
  else
    api().cuMemFree(address_);
}

// ---------------------------------------------------------------------------------------------
// SharedDeviceMemory

namespace {

CUmemAllocationProp shareable_prop(int ordinal) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

} // namespace

size_t SharedDeviceMemory::granularity(int ordinal) {
  const CUmemAllocationProp prop = shareable_prop(ordinal);
  size_t granularity = 0;
  cuda::check(
      api().cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
      "cuMemGetAllocationGranularity");
  return granularity;
}

void SharedDeviceMemory::map(int ordinal) {
  const cuda::DriverApi& d = api();
  cuda::check(d.cuMemAddressReserve(&address_, bytes_, 0, 0, 0), "cuMemAddressReserve");
  CUresult mapped = d.cuMemMap(address_, bytes_, 0, handle_, 0);
  if (mapped != CUDA_SUCCESS) {
    d.cuMemAddressFree(address_, bytes_);
    address_ = 0;
    cuda::check(mapped, "cuMemMap");
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = ordinal;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  cuda::check(d.cuMemSetAccess(address_, bytes_, &access, 1), "cuMemSetAccess");
}

SharedDeviceMemory SharedDeviceMemory::create(int ordinal, size_t bytes) {
  const cuda::DriverApi& d = api();
  const size_t unit = granularity(ordinal);
  SharedDeviceMemory memory;
  memory.bytes_ = (std::max<size_t>(bytes, 1) + unit - 1) / unit * unit;
  const CUmemAllocationProp prop = shareable_prop(ordinal);
  cuda::check(d.cuMemCreate(&memory.handle_, memory.bytes_, &prop, 0),
              ("cuMemCreate of " + std::to_string(memory.bytes_) + " bytes").c_str());
  memory.map(ordinal);
  int fd = -1;
  cuda::check(d.cuMemExportToShareableHandle(&fd, memory.handle_,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              "cuMemExportToShareableHandle");
  memory.fd_.reset(fd);
  ::fcntl(fd, F_SETFD, FD_CLOEXEC); // never inherited by a process this one starts
  return memory;
}

SharedDeviceMemory SharedDeviceMemory::open(int ordinal, UniqueFd fd, size_t bytes) {
  const cuda::DriverApi& d = api();
  const size_t unit = granularity(ordinal);
  if (bytes == 0 || bytes % unit != 0)
    throw std::invalid_argument("a shared device tensor was announced with " +
                                std::to_string(bytes) + " bytes, not a multiple of " +
                                std::to_string(unit));
  SharedDeviceMemory memory;
  memory.bytes_ = bytes;
  const CUresult imported = d.cuMemImportFromShareableHandle(
      &memory.handle_, reinterpret_cast<void*>(static_cast<uintptr_t>(fd.get())),
      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (imported != CUDA_SUCCESS)
    throw std::invalid_argument("a shared device tensor's descriptor could not be imported: " +
                                cuda::error_text(imported));
  try {
    memory.map(ordinal); // fails when the allocation is smaller than announced
  } catch (const cuda::CudaError& error) {
    throw std::invalid_argument(std::string("a shared device tensor could not be mapped: ") +
                                error.what());
  }
  return memory; // the import holds the allocation; the descriptor closes here
}

SharedDeviceMemory::SharedDeviceMemory(SharedDeviceMemory&& other) noexcept
    : handle_(std::exchange(other.handle_, 0)), address_(std::exchange(other.address_, 0)),
      bytes_(std::exchange(other.bytes_, 0)), fd_(std::move(other.fd_)) {}

SharedDeviceMemory::~SharedDeviceMemory() {
  const cuda::DriverApi& d = api();
  if (address_ != 0) { // these fail only on a lost context, whose memory is gone anyway
    d.cuMemUnmap(address_, bytes_);
    d.cuMemAddressFree(address_, bytes_);
  }
  if (handle_ != 0)
    d.cuMemRelease(handle_);
}

// ---------------------------------------------------------------------------------------------
// DeviceSession

void DeviceSession::make_current() const {
  cuda::check(api().cuCtxSetCurrent(context_), "cuCtxSetCurrent");
}

DeviceMemory DeviceSession::allocate(size_t bytes) {
  if (pool_ == nullptr || bytes == 0)
    return DeviceMemory(bytes);
  const cuda::DriverApi& d = api();
  CUdeviceptr address = 0;
  CUresult result = d.cuMemAllocAsync(&address, bytes, stream_);
  if (result == CUDA_ERROR_OUT_OF_MEMORY) {
    // The pool may hold freed memory (up to its release threshold) that a big allocation needs:
    // once the frees have happened on the stream, all of it goes back to the driver.
    check(d.cuStreamSynchronize(stream_), "cuStreamSynchronize");
    check(d.cuMemPoolTrimTo(pool_, 0), "cuMemPoolTrimTo");
    result = d.cuMemAllocAsync(&address, bytes, stream_);
  }
  cuda::check(result, ("cuMemAllocAsync of " + std::to_string(bytes) + " bytes").c_str());
  return DeviceMemory(address, bytes, stream_);
}

DeviceSession::DeviceSession(int ordinal, PrivateMemory memory) : ordinal_(ordinal) {
  const cuda::DriverApi& d = api();
  cuda::check(d.cuInit(0), "cuInit");
  int count = 0;
  cuda::check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count)
    throw cuda::CudaError(CUDA_ERROR_INVALID_DEVICE, "CUDA device " + std::to_string(ordinal) +
                                                         " does not exist (" +
                                                         std::to_string(count) + " device" +
                                                         (count == 1 ? "" : "s") + " present)");
  cuda::check(d.cuDeviceGet(&device_, ordinal), "cuDeviceGet");
  cuda::check(d.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
  try {
    cuda::check(d.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
    // A blocking stream, not CU_STREAM_NON_BLOCKING: kernels written for torch's load_inline
    // usually launch on the legacy default stream (`<<<grid, block>>>`, no stream). A blocking
    // stream is implicitly ordered with that one, so such a launch stays between keval's input
    // writes, its timing events and its output reads. A non-blocking stream races it: on the
    // H100, outputs were read before the kernel had run when two jobs shared the GPU, and events
    // would time nothing. (Capturing such a launch into a graph fails; the timer then uses
    // events.)
    cuda::check(d.cuStreamCreate(&stream_, CU_STREAM_DEFAULT), "cuStreamCreate");
    if (memory == PrivateMemory::pooled)
      configure_pool();
    const CUresult loaded = d.cuModuleLoadData(&module_, kDeviceKernelsFatbin);
    if (loaded != CUDA_SUCCESS)
      throw cuda::CudaError(loaded, "loading keval's device kernels (built for sm_80, sm_90 and "
                                    "PTX compute_90): " +
                                        cuda::error_text(loaded));
    for (Kernel kernel : kAllKernels)
      cuda::check(d.cuModuleGetFunction(&functions_[static_cast<int>(kernel)], module_,
                                        kernel_name(kernel)),
                  kernel_name(kernel));

    int multiprocessors = 0, l2_bytes = 0;
    cuda::check(
        d.cuDeviceGetAttribute(&multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_),
        "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
    cuda::check(d.cuDeviceGetAttribute(&l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device_),
                "cuDeviceGetAttribute(L2_CACHE_SIZE)");
    max_blocks_ = static_cast<unsigned>(std::max(1, multiprocessors)) * kBlocksPerMultiprocessor;
    // Never less than 32 MiB, in case a device reports no L2 size.
    l2_flush_ = DeviceMemory(std::max<size_t>(2 * static_cast<size_t>(l2_bytes), 32u << 20));
    // Zeros, which keval_l2_flush relies on to never write its sink (a 16-byte multiple).
    cuda::check(d.cuMemsetD8(l2_flush_.address(), 0, l2_flush_.bytes()), "cuMemsetD8");
    compare_totals_ = DeviceMemory(sizeof(CompareTotals));
    windows_ = DeviceMemory(2 * kWindowBytes);
    flag_ = DeviceMemory(sizeof(uint32_t));
    probe_ = DeviceMemory(2 * sizeof(uint64_t));
    void* words = nullptr;
    cuda::check(d.cuMemHostAlloc(&words, sizeof(uint32_t), CU_MEMHOSTALLOC_DEVICEMAP),
                "cuMemHostAlloc");
    hold_release_ = static_cast<volatile uint32_t*>(words);
    *hold_release_ = 0;
    cuda::check(d.cuMemHostGetDevicePointer(&hold_release_device_, words, 0),
                "cuMemHostGetDevicePointer");
  } catch (...) {
    release(); // the destructor does not run for a constructor that throws
    throw;
  }
}

void DeviceSession::configure_pool() {
  const cuda::DriverApi& d = api();
  int supported = 0;
  if (d.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device_) !=
          CUDA_SUCCESS ||
      supported == 0) {
    spdlog::debug("CUDA device {} has no memory pools: private memory is allocated directly",
                  ordinal_);
    return;
  }
  CUmemoryPool pool = nullptr;
  cuda::check(d.cuDeviceGetDefaultMemPool(&pool, device_), "cuDeviceGetDefaultMemPool");
  // The pool keeps at most this much freed memory: an eighth of the device, at most 4 GiB, so a
  // job's churn of inputs and output copies is served from it while the runners, whose contexts
  // need the rest of the device, are not squeezed (a bigger allocation still trims the pool).
  size_t total = 0;
  cuda::check(d.cuDeviceTotalMem(&total, device_), "cuDeviceTotalMem");
  cuuint64_t threshold = std::min<cuuint64_t>(total / 8, cuuint64_t{4} << 30);
  cuda::check(d.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
              "cuMemPoolSetAttribute(RELEASE_THRESHOLD)");
  pool_ = pool;
}

DeviceSession::~DeviceSession() {
  release();
}

void DeviceSession::release() noexcept {
  const cuda::DriverApi& d = api();
  // Buffers first, while the context is still retained; errors are ignored throughout (a lost
  // context reports them, and there is nothing left to do about it).
  probe_ = DeviceMemory();
  if (hold_release_ != nullptr)
    d.cuMemFreeHost(const_cast<uint32_t*>(std::exchange(hold_release_, nullptr)));
  flag_ = DeviceMemory();
  windows_ = DeviceMemory();
  compare_totals_ = DeviceMemory();
  l2_flush_ = DeviceMemory();
  if (module_ != nullptr)
    d.cuModuleUnload(std::exchange(module_, nullptr));
  if (stream_ != nullptr)
    d.cuStreamDestroy(std::exchange(stream_, nullptr));
  if (context_ != nullptr) {
    context_ = nullptr;
    d.cuDevicePrimaryCtxRelease(device_);
  }
}

void DeviceSession::throw_if_faulted() const {
  if (!fault_.empty())
    throw KernelFault("the CUDA context was lost to an earlier device fault: " + fault_);
}

void DeviceSession::check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS)
    return;
  if (loses_context(result)) {
    fault_ = cuda::error_text(result);
    throw KernelFault(fault_ + " (reported by " + what + ")");
  }
  throw cuda::CudaError(result, std::string(what) + ": " + cuda::error_text(result));
}

void DeviceSession::check_context(CUresult result, const char* what) {
  if (loses_context(result))
    check(result, what);
}

void DeviceSession::check_execution(CUresult result) {
  if (result == CUDA_SUCCESS)
    return;
  const std::string text = cuda::error_text(result);
  if (loses_context(result))
    fault_ = text;
  throw KernelFault(text);
}

void DeviceSession::launch_raw(Kernel kernel, uint64_t work_items, void** arguments) {
  const uint64_t wanted = (work_items + kThreadsPerBlock - 1) / kThreadsPerBlock;
  const auto blocks = static_cast<unsigned>(std::clamp<uint64_t>(wanted, 1, max_blocks_));
  check(api().cuLaunchKernel(functions_[static_cast<int>(kernel)], blocks, 1, 1, kThreadsPerBlock,
                             1, 1, 0, stream_, arguments, nullptr),
        kernel_name(kernel));
}

void DeviceSession::flush_l2() {
  // The sink is never written (the buffer holds zeros); flag_ is a valid address all the same.
  launch(Kernel::l2_flush, l2_flush_.bytes() / 16,
         L2FlushParams{l2_flush_.address(), l2_flush_.bytes() / 16, flag_.address()});
}

void DeviceSession::hold_sample_start() {
  // Bounded, so that nothing the driver or a tracer might wait for while enqueueing can hang the
  // stream: 20 ms is thousands of times what enqueueing a replay takes.
  SampleStartParams params{hold_release_device_, 20'000'000, ++hold_token_};
  void* arguments[] = {&params};
  check(api().cuLaunchKernel(functions_[static_cast<int>(Kernel::sample_start)], 1, 1, 1, 1, 1, 1,
                             0, stream_, arguments, nullptr),
        kSampleStartKernel);
}

void DeviceSession::release_sample_start() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  *hold_release_ = hold_token_;
}

void DeviceSession::mark_sample_stop() {
  SampleStopParams params{0};
  void* arguments[] = {&params};
  check(api().cuLaunchKernel(functions_[static_cast<int>(Kernel::sample_stop)], 1, 1, 1, 1, 1, 1, 0,
                             stream_, arguments, nullptr),
        kSampleStopKernel);
}

double DeviceSession::sm_clock_mhz() {
  // 50 us of the global timer: its resolution is 1 us on some devices, so the reading is within
  // a few percent, which is all a throttling check needs.
  ClockProbeParams params{probe_.address(), 50'000};
  void* arguments[] = {&params};
  check(api().cuLaunchKernel(functions_[static_cast<int>(Kernel::clock_probe)], 1, 1, 1, 1, 1, 1, 0,
                             stream_, arguments, nullptr),
        kClockProbeKernel);
  uint64_t reading[2] = {0, 0};
  copy_to_host(reading, probe_.address(), sizeof reading);
  return reading[1] == 0 ? 0.0
                         : static_cast<double>(reading[0]) * 1e3 / static_cast<double>(reading[1]);
}

void DeviceSession::synchronize_context() {
  check_execution(api().cuCtxSynchronize(context_));
}

void DeviceSession::copy_to_host(void* host, CUdeviceptr device, size_t bytes) {
  if (bytes == 0)
    return;
  check(api().cuMemcpyDtoHAsync(host, device, bytes, stream_), "cuMemcpyDtoHAsync");
  check(api().cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

void DeviceSession::copy_from_host(CUdeviceptr device, const void* host, size_t bytes) {
  if (bytes == 0)
    return;
  check(api().cuMemcpyHtoDAsync(device, host, bytes, stream_), "cuMemcpyHtoDAsync");
  check(api().cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

} // namespace keval::worker::detail
