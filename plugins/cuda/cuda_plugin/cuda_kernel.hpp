// The cuda kernel type: CUDA C++ source compiled by NVRTC for the target GPU (a CUBIN, so no JIT
// on the device), one __global__ function chosen from it, launched with the IOContract's grid,
// block and dynamic shared memory on the stream keval measures.
#pragma once

#include "cuda_plugin/detail/contract.hpp"
#include "cuda_plugin/detail/kernel_params.hpp"

#include <keval/plugin.hpp>

#include <cuda.h>

#include <memory>
#include <string>
#include <vector>

namespace keval::cuda_plugin {

keval_manifest cuda_manifest();

// Everything compile() decides, before any device exists.
struct CompiledKernel {
  std::vector<char> cubin;
  std::string lowered_name; // the symbol cuModuleGetFunction looks up
  std::string name;         // for people: "vector_add", "scale<float>"
  std::string target;       // "sm_90"
  detail::LaunchConfig launch;
  std::vector<detail::KernelParam> params; // scalar widths are refined at bind
  std::string info_json;                   // for the result metadata
};

// Compiles the source and chooses its kernel:
//   - metadata.kernel_name (else io.launch.kernel_name), matched against the compiled kernels by
//     extern "C" or mangled symbol, demangled signature, or name ("my_kernel", "ns::k",
//     "tk<float>"); a template-id that matches nothing, such as "scale<float>" for a template
//     the source never instantiates, is instantiated with an NVRTC name expression;
//   - without a name, the source's only kernel.
// Throws keval::sdk::Error: KEVAL_ERROR_COMPILE for the source ("NVRTC compilation failed" with
// the full log in details; no kernel, an unknown or ambiguous name, several kernels and no name),
// KEVAL_ERROR_INVALID_REQUEST for the contract or metadata, KEVAL_ERROR_UNSUPPORTED for an
// architecture this NVRTC cannot target.
CompiledKernel compile_cuda_source(const sdk::CompileInput& input);

// A compiled kernel, bound to a device once and launched many times.
class CudaKernel final : public sdk::Kernel {
public:
  explicit CudaKernel(CompiledKernel compiled);
  ~CudaKernel() override;

  // Loads the CUBIN into the current context, finds the function, fits the scalar parameters to
  // its declared sizes and allows the requested dynamic shared memory.
  void bind_device(const keval_device_args& device) override;
  // Enqueues one launch on the given stream; launch errors are KEVAL_ERROR_RUNTIME.
  void launch(sdk::LaunchContext& ctx) override;
  std::string info_json() const override { return compiled_.info_json; }

  const CompiledKernel& compiled() const { return compiled_; }

private:
  CompiledKernel compiled_;
  CUcontext context_ = nullptr; // the context the module was loaded into
  CUmodule module_ = nullptr;
  CUfunction function_ = nullptr;
  detail::PackedParams packed_;
};

std::unique_ptr<sdk::Kernel> compile_cuda_kernel(const sdk::CompileInput& input);

} // namespace keval::cuda_plugin
