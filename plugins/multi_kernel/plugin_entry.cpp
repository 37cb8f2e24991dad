// The multi_kernel plugin module: its manifest and the Python driver that implements it.
#include <keval/python_runtime/plugin.hpp>

namespace {

constexpr keval::python_runtime::KernelTypeSpec kMultiKernel{
    "multi_kernel", "1.0.0",
    "Python script mixing Triton, CuPy and PyTorch: metadata.entry_point called with the "
    "IOContract's inputs, its returned tensors compared",
    KEVAL_CAP_REQUIRES_IO_CONTRACT | KEVAL_CAP_RETURNS_OUTPUTS | KEVAL_CAP_DEVICE_CUDA |
        KEVAL_CAP_DEVICE_CPU | KEVAL_CAP_NEEDS_PYTHON,
    "keval_multi_kernel"};

} // namespace

KEVAL_PYTHON_PLUGIN(kMultiKernel)
