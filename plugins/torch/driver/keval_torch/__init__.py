"""kernel_type "torch": PyTorch source, a function or a class method as the target (the V2
contract). The loading, targeting, weights and inputs are keval_runtime.torch_module's, shared
with torch_cuda; this driver is the type's entry: compile() and prewarm().
"""
from keval_runtime.device import warm_torch
from keval_runtime.torch_module import TorchKernel


def compile(source, metadata_json, io_json, work_dir, side, cuda_arch):
    return TorchKernel(source, metadata_json, io_json, work_dir, side)


def prewarm():
    """A worker started ahead of its job imports torch now (SDK 1.1 prewarm): about 3 s that
    every torch job would otherwise spend before compiling."""
    import torch  # noqa: F401


# SDK 1.4 warm_device: torch set up on the device opened ahead, before the job.
warm_device = warm_torch
