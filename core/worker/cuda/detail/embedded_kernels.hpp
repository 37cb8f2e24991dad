// The fatbin of device_kernels.cu, embedded at build time (device_kernels.cmake).
#pragma once

#include <cstddef>

namespace keval::worker::detail {

extern const unsigned char kDeviceKernelsFatbin[];
extern const std::size_t kDeviceKernelsFatbinSize;

} // namespace keval::worker::detail
