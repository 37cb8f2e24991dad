// The CUDA Driver API, loaded at run time. Nothing in keval links libcuda: binaries start on
// machines without a driver (CI, the host), and only code that really needs a GPU loads it, once.
#pragma once

#include <cuda.h>

#include <stdexcept>
#include <string>

namespace keval::cuda {

// Every driver entry point keval uses. Each member has the exact type cuda.h declares (versioned
// names such as cuMemAlloc_v2 come through cuda.h's macros) and is resolved by base name with
// cuGetProcAddress, so the driver hands out the version matching the headers we built with.
#define KEVAL_CUDA_DRIVER_FUNCTIONS(X)                                                             \
  X(cuInit)                                                                                        \
  X(cuDriverGetVersion)                                                                            \
  X(cuGetErrorName)                                                                                \
  X(cuGetErrorString)                                                                              \
  X(cuDeviceGet)                                                                                   \
  X(cuDeviceGetCount)                                                                              \
  X(cuDeviceGetName)                                                                               \
  X(cuDeviceGetAttribute)                                                                          \
  X(cuDeviceTotalMem)                                                                              \
  X(cuDeviceGetPCIBusId)                                                                           \
  X(cuDevicePrimaryCtxRetain)                                                                      \
  X(cuDevicePrimaryCtxRelease)                                                                     \
  X(cuCtxSetCurrent)                                                                               \
  X(cuCtxGetCurrent)                                                                               \
  X(cuStreamCreate)                                                                                \
  X(cuStreamDestroy)                                                                               \
  X(cuStreamSynchronize)                                                                           \
  X(cuStreamBeginCapture)                                                                          \
  X(cuStreamEndCapture)                                                                            \
  X(cuGraphInstantiateWithFlags)                                                                   \
  X(cuGraphGetNodes)                                                                               \
  X(cuGraphLaunch)                                                                                 \
  X(cuGraphExecDestroy)                                                                            \
  X(cuGraphDestroy)                                                                                \
  X(cuEventCreate)                                                                                 \
  X(cuEventRecord)                                                                                 \
  X(cuEventSynchronize)                                                                            \
  X(cuEventElapsedTime)                                                                            \
  X(cuEventDestroy)                                                                                \
  X(cuMemAlloc)                                                                                    \
  X(cuMemGetAllocationGranularity)                                                                 \
  X(cuMemCreate)                                                                                   \
  X(cuMemRelease)                                                                                  \
  X(cuMemAddressReserve)                                                                           \
  X(cuMemAddressFree)                                                                              \
  X(cuMemMap)                                                                                      \
  X(cuMemUnmap)                                                                                    \
  X(cuMemSetAccess)                                                                                \
  X(cuMemExportToShareableHandle)                                                                  \
  X(cuMemImportFromShareableHandle)                                                                \
  X(cuMemFree)                                                                                     \
  X(cuMemAllocAsync)                                                                               \
  X(cuMemFreeAsync)                                                                                \
  X(cuDeviceGetDefaultMemPool)                                                                     \
  X(cuMemPoolSetAttribute)                                                                         \
  X(cuMemPoolTrimTo)                                                                               \
  X(cuMemHostAlloc)                                                                                \
  X(cuMemFreeHost)                                                                                 \
  X(cuMemHostGetDevicePointer)                                                                     \
  X(cuMemGetInfo)                                                                                  \
  X(cuMemcpyHtoD)                                                                                  \
  X(cuMemcpyHtoDAsync)                                                                             \
  X(cuMemcpyDtoH)                                                                                  \
  X(cuMemcpyDtoHAsync)                                                                             \
  X(cuMemcpyDtoD)                                                                                  \
  X(cuMemcpyDtoDAsync)                                                                             \
  X(cuMemcpy2D)                                                                                    \
  X(cuMemsetD8)                                                                                    \
  X(cuMemsetD8Async)                                                                               \
  X(cuMemsetD16)                                                                                   \
  X(cuMemsetD16Async)                                                                              \
  X(cuMemsetD32)                                                                                   \
  X(cuMemsetD32Async)                                                                              \
  X(cuModuleLoadData)                                                                              \
  X(cuModuleUnload)                                                                                \
  X(cuModuleGetFunction)                                                                           \
  X(cuFuncSetAttribute)                                                                            \
  X(cuFuncGetAttribute)                                                                            \
  X(cuFuncGetParamInfo)                                                                            \
  X(cuLaunchKernel)

// Entry points whose version for these headers takes other arguments than the unversioned
// declaration, with no macro in cuda.h mapping one onto the other: cuGetProcAddress hands out
// that version for the base name, so the member is typed as it. (Calling cuCtxSynchronize's
// CUDA 13 version, which takes the context, through the old type passed it garbage: "context
// is destroyed" on the H100.)
#define KEVAL_CUDA_DRIVER_VERSIONED_FUNCTIONS(X) X(cuCtxSynchronize, cuCtxSynchronize_v2)

struct DriverApi {
#define KEVAL_CUDA_DECLARE(name) decltype(&::name) name = nullptr;
  KEVAL_CUDA_DRIVER_FUNCTIONS(KEVAL_CUDA_DECLARE)
#undef KEVAL_CUDA_DECLARE
#define KEVAL_CUDA_DECLARE_VERSIONED(name, versioned) decltype(&::versioned) name = nullptr;
  KEVAL_CUDA_DRIVER_VERSIONED_FUNCTIONS(KEVAL_CUDA_DECLARE_VERSIONED)
#undef KEVAL_CUDA_DECLARE_VERSIONED
};

// The driver could not be loaded (no libcuda.so.1, or too old for these headers).
class DriverUnavailable : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// A driver call failed. `code` is the CUresult.
class CudaError : public std::runtime_error {
public:
  CudaError(CUresult code, const std::string& message) : std::runtime_error(message), code_(code) {}
  CUresult code() const noexcept { return code_; }

private:
  CUresult code_;
};

// Loads libcuda.so.1 and resolves every function (once, thread-safe). Does not call cuInit.
// Throws DriverUnavailable with the loader's reason.
const DriverApi& driver();
// True when driver() would succeed; `reason` receives why not.
bool driver_available(std::string* reason = nullptr);

// Loads the driver, calls cuInit and counts the visible devices (no context is created). Returns
// the count; when it is 0, `reason` says why no device is usable (no driver, cuInit failed, none
// present). Never throws. The one availability check shared by the worker, `keval-worker
// --devices` and the GPU tests.
int usable_device_count(std::string* reason);

// "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"
std::string error_text(CUresult code);

// Throws CudaError("<what>: <error_text>") unless `code` is CUDA_SUCCESS.
inline void check(CUresult code, const char* what) {
  if (code != CUDA_SUCCESS)
    throw CudaError(code, std::string(what) + ": " + error_text(code));
}

} // namespace keval::cuda
