// The torch plugin module: its manifest and the Python driver that implements it.
#include <keval/python_runtime/plugin.hpp>

namespace {

constexpr keval::python_runtime::KernelTypeSpec kTorch{
    "torch", "1.0.0",
    "PyTorch source: a function or Model.forward (KernelBench's get_inputs/get_init_inputs), on "
    "CUDA or the CPU",
    KEVAL_CAP_DEFAULT_INPUTS | KEVAL_CAP_RETURNS_OUTPUTS | KEVAL_CAP_DEVICE_CUDA |
        KEVAL_CAP_DEVICE_CPU | KEVAL_CAP_NEEDS_PYTHON,
    "keval_torch"};

} // namespace

KEVAL_PYTHON_PLUGIN(kTorch)
