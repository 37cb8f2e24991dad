// The kernels a candidate's source defines: what library_only matches its traced kernels against.
#include "checks/kernel_names.hpp"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace keval::checks {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(DefinedKernelNames, FindsCudaKernelsWhateverDecoratesThem) {
  EXPECT_THAT(defined_kernel_names(R"(
extern "C" __global__ void vector_add(const float* x, float* y, int n) {}
__global__ void __launch_bounds__(256, 2) bounded(float* x) {}
template <int N> __global__ void tiled(float* x) {}
static __global__ __attribute__((noinline)) void attributed(int* p) {}
__global__ void vector_add(int) {}
)"),
              ElementsAre("vector_add", "bounded", "tiled", "attributed"));
}

TEST(DefinedKernelNames, FindsThemInsideAPythonSourcesStrings) {
  EXPECT_THAT(defined_kernel_names(R"(
from torch.utils.cpp_extension import load_inline
cuda_source = r"""
__global__ void fused_gelu_kernel(const float* x, float* out, int64_t n) {}
"""
)"),
              ElementsAre("fused_gelu_kernel"));
}

TEST(DefinedKernelNames, FindsTritonJitFunctions) {
  EXPECT_THAT(defined_kernel_names(R"(
import triton
import triton.language as tl

@triton.autotune(configs=[], key=["n"])
@triton.jit
def relu_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass

@jit
def   other_kernel(x):
    pass

def not_a_kernel():
    pass
)"),
              ElementsAre("relu_kernel", "other_kernel"));
}

TEST(DefinedKernelNames, FindsNoneInPlainTorchAndSurvivesAnyInput) {
  EXPECT_THAT(defined_kernel_names("import torch\nclass ModelNew: pass\n"), IsEmpty());
  EXPECT_THAT(defined_kernel_names("__global__"), IsEmpty());
  EXPECT_THAT(defined_kernel_names("__global__ void (;"), IsEmpty());
  EXPECT_THAT(defined_kernel_names("@jit\n"), IsEmpty());
  EXPECT_THAT(defined_kernel_names(std::string("__global__ void k\0(", 19)), ElementsAre("k"));
  EXPECT_THAT(defined_kernel_names(std::string(100000, '@')), IsEmpty());
  std::string many;
  for (int i = 0; i < 1000; ++i)
    many += "__global__ void k" + std::to_string(i) + "() {}\n";
  EXPECT_EQ(defined_kernel_names(many).size(), kMaxKernelNames);
}

} // namespace
} // namespace keval::checks
