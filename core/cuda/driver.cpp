#include "cuda/driver.hpp"

#include <mutex>

#include <dlfcn.h>

namespace keval::cuda {

namespace {

struct Loaded {
  DriverApi api;
  std::string error; // empty when loaded
};

Loaded load() {
  Loaded out;
  void* handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    out.error = std::string("no CUDA driver: cannot load libcuda.so.1 (") +
                (why ? why : "unknown reason") + ")";
    return out;
  }
  // Kept loaded for the life of the process: unloading a driver is never worth the risk.
  using GetProc =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(::dlsym(handle, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    out.error = "CUDA driver too old: libcuda.so.1 has no cuGetProcAddress_v2 (need CUDA 12+)";
    return out;
  }
  auto resolve = [&](const char* name, void** slot) {
    CUdriverProcAddressQueryResult status{};
    const CUresult r = get_proc(name, slot, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if ((r != CUDA_SUCCESS || *slot == nullptr) && out.error.empty())
      out.error = std::string("CUDA driver lacks ") + name + " for CUDA " +
                  std::to_string(CUDA_VERSION / 1000) + "." +
                  std::to_string(CUDA_VERSION % 1000 / 10) + " (update the driver)";
  };
#define KEVAL_CUDA_RESOLVE(name) resolve(#name, reinterpret_cast<void**>(&out.api.name));
  KEVAL_CUDA_DRIVER_FUNCTIONS(KEVAL_CUDA_RESOLVE)
#undef KEVAL_CUDA_RESOLVE
#define KEVAL_CUDA_RESOLVE_VERSIONED(name, versioned)                                              \
  resolve(#name, reinterpret_cast<void**>(&out.api.name));
  KEVAL_CUDA_DRIVER_VERSIONED_FUNCTIONS(KEVAL_CUDA_RESOLVE_VERSIONED)
#undef KEVAL_CUDA_RESOLVE_VERSIONED
  return out;
}

const Loaded& loaded() {
  static const Loaded instance = load();
  return instance;
}

} // namespace

const DriverApi& driver() {
  const Loaded& l = loaded();
  if (!l.error.empty())
    throw DriverUnavailable(l.error);
  return l.api;
}

bool driver_available(std::string* reason) {
  const Loaded& l = loaded();
  if (!l.error.empty() && reason != nullptr)
    *reason = l.error;
  return l.error.empty();
}

namespace {

// The count, or 0 with `why` filled in.
int count_devices(std::string& why) {
  if (!driver_available(&why))
    return 0;
  if (const CUresult r = loaded().api.cuInit(0); r != CUDA_SUCCESS) {
    why = "cuInit failed: " + error_text(r);
    return 0;
  }
  int count = 0;
  if (const CUresult r = loaded().api.cuDeviceGetCount(&count); r != CUDA_SUCCESS) {
    why = "cuDeviceGetCount failed: " + error_text(r);
    return 0;
  }
  if (count == 0)
    why = "no CUDA device present (cuDeviceGetCount returned 0)";
  return count;
}

} // namespace

int usable_device_count(std::string* reason) {
  std::string why;
  const int count = count_devices(why);
  if (reason != nullptr)
    *reason = why;
  return count;
}

std::string error_text(CUresult code) {
  std::string text = "CUDA error " + std::to_string(static_cast<int>(code));
  if (!driver_available())
    return text;
  const char* name = nullptr;
  const char* description = nullptr;
  if (loaded().api.cuGetErrorName(code, &name) == CUDA_SUCCESS && name != nullptr)
    text = name;
  if (loaded().api.cuGetErrorString(code, &description) == CUDA_SUCCESS && description != nullptr)
    text += std::string(": ") + description;
  return text;
}

} // namespace keval::cuda
