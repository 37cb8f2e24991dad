// kernel_type "numpy": its manifest, and the driver package (keval_numpy/) that runs it.
#include <keval/python_runtime/plugin.hpp>

constexpr keval::python_runtime::KernelTypeSpec kNumpy{
    "numpy", "0.1.0", "NumPy on the CPU: a function of the IOContract's inputs returning outputs",
    KEVAL_CAP_REQUIRES_IO_CONTRACT | KEVAL_CAP_RETURNS_OUTPUTS | KEVAL_CAP_DEVICE_CPU |
        KEVAL_CAP_NEEDS_PYTHON,
    "keval_numpy"};

KEVAL_PYTHON_PLUGIN(kNumpy)
