// Why a GPU test cannot run here: "" when a CUDA device is usable, else the driver's reason.
// GPU tests skip with it (and only then), once per test process. Header-only: the suites that
// include it link keval_cuda_driver; the CPU-side test support does not.
#pragma once

#include "cuda/driver.hpp"

#include <string>

namespace keval::test {

inline const std::string& no_cuda_device_reason() {
  static const std::string reason = [] {
    std::string why;
    return cuda::usable_device_count(&why) > 0 ? std::string() : why;
  }();
  return reason;
}

} // namespace keval::test
