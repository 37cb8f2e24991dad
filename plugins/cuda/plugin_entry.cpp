// The cuda plugin module: the SDK entry point over keval_cuda_plugin_core.
#include "cuda_plugin/cuda_kernel.hpp"

namespace {

struct CudaPlugin {
  static keval_manifest manifest() { return keval::cuda_plugin::cuda_manifest(); }
  static std::unique_ptr<keval::sdk::Kernel> compile(const keval::sdk::CompileInput& input) {
    return keval::cuda_plugin::compile_cuda_kernel(input);
  }
};

} // namespace

KEVAL_PLUGIN(CudaPlugin)
