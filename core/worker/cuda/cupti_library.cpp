#include "worker/cuda/detail/cupti_library.hpp"

#include <string_view>

#include <cuda.h>
#include <dlfcn.h>

namespace keval::worker::detail {

std::string cupti_soname() {
  return "libcupti.so." + std::to_string(CUDA_VERSION / 1000);
}

void* open_cupti_library(std::string& why) {
#if KEVAL_HAVE_CUPTI
  const std::string name = cupti_soname();
  if (void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_NOLOAD))
    return handle;
  if (void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL))
    return handle;
  std::string tried = name;
  std::string_view dirs = KEVAL_CUPTI_DIRS;
  while (!dirs.empty()) {
    const size_t colon = dirs.find(':');
    const std::string path = std::string(dirs.substr(0, colon)) + "/" + name;
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    if (void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL))
      return handle;
    tried += ", " + path;
  }
  why = "CUPTI is not installed: cannot load " + tried;
#else
  why = "keval was built without CUPTI's headers (cupti.h)";
#endif
  return nullptr;
}

} // namespace keval::worker::detail
