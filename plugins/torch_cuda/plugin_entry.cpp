// The torch_cuda plugin module: its manifest and the Python driver that implements it.
#include <keval/python_runtime/plugin.hpp>

namespace {

constexpr keval::python_runtime::KernelTypeSpec kTorchCuda{
    "torch_cuda", "1.0.0",
    "KernelBench ModelNew with C++/CUDA from torch.utils.cpp_extension.load_inline or load, "
    "built by keval for the granted GPU and cached by content",
    KEVAL_CAP_DEFAULT_INPUTS | KEVAL_CAP_RETURNS_OUTPUTS | KEVAL_CAP_DEVICE_CUDA |
        KEVAL_CAP_NEEDS_PYTHON,
    "keval_torch_cuda"};

} // namespace

KEVAL_PYTHON_PLUGIN(kTorchCuda)
