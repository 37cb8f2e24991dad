// Why a GPU test cannot run here: "" when a CUDA device is usable, else the driver's reason.
// GPU tests skip with it (and only then), once per test process, through
// KEVAL_SKIP_WITHOUT_CUDA_DEVICE; with KEVAL_REQUIRE_GPU=1 in the environment (the GPU machine)
// that skip is a failure instead, so a device lost there never passes as skipped. Header-only:
// the suites that include it link keval_cuda_driver; the CPU-side test support does not.
#pragma once

#include "cuda/driver.hpp"

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace keval::test {

inline const std::string& no_cuda_device_reason() {
  static const std::string reason = [] {
    std::string why;
    return cuda::usable_device_count(&why) > 0 ? std::string() : why;
  }();
  return reason;
}

// KEVAL_REQUIRE_GPU=1: a GPU test without a device fails rather than skips.
inline bool gpu_required() {
  const char* required = std::getenv("KEVAL_REQUIRE_GPU");
  return required != nullptr && std::string(required) == "1";
}

} // namespace keval::test

// In a test's SetUp or body: skips, with the reason, when no CUDA device is usable; fails instead
// under KEVAL_REQUIRE_GPU=1. A fatal failure in SetUp keeps the test body from running.
#define KEVAL_SKIP_WITHOUT_CUDA_DEVICE()                                                           \
  do {                                                                                             \
    const std::string& keval_no_device_ = ::keval::test::no_cuda_device_reason();                  \
    if (!keval_no_device_.empty()) {                                                               \
      if (::keval::test::gpu_required())                                                           \
        GTEST_FAIL() << "KEVAL_REQUIRE_GPU=1 but no CUDA device: " << keval_no_device_;            \
      GTEST_SKIP() << "no CUDA device: " << keval_no_device_;                                      \
    }                                                                                              \
  } while (0)
