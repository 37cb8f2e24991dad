// kernel_type "torch_cuda" without a GPU: runs torch_cuda_build_test.py (the load_inline shim's
// argument handling, cache-key stability, refusing a corrupt cache entry, concurrent publishers)
// with the interpreter keval embeds. Those tests need neither torch's headers nor a compiler.
#include "support/test_env.hpp"

#include <gtest/gtest.h>

namespace keval::test {
namespace {

TEST(TorchCudaWithoutGpu, BuilderAndShimUnitTests) {
  const auto r =
      supervisor::run_command(KEVAL_TEST_PYTHON_EXECUTABLE,
                              {KEVAL_TEST_TORCH_CUDA_UNIT_TESTS, KEVAL_TEST_RUNTIME_PYTHON_DIR,
                               KEVAL_TEST_TORCH_CUDA_DRIVER_DIR, "-v"},
                              std::chrono::seconds(240));
  ASSERT_TRUE(r.exit_code.has_value()) << r.err;
  EXPECT_EQ(*r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("OK"), std::string::npos) << r.out << r.err;
}

} // namespace
} // namespace keval::test
