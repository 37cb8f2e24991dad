// The triton plugin module: its manifest and the Python driver that implements it.
#include <keval/python_runtime/plugin.hpp>

namespace {

constexpr keval::python_runtime::KernelTypeSpec kTriton{
    "triton", "1.0.0",
    "Triton: one @triton.jit kernel, compiled for the target GPU before the grant and launched "
    "with the IOContract's grid, num_warps and num_stages",
    KEVAL_CAP_REQUIRES_IO_CONTRACT | KEVAL_CAP_DEVICE_CUDA | KEVAL_CAP_NEEDS_PYTHON,
    "keval_triton"};

} // namespace

KEVAL_PYTHON_PLUGIN(kTriton)
