"""kernel_type "torch_cuda": KernelBench's ModelNew with C++/CUDA built by load_inline or load.

The source is run as it is (keval_runtime.torch_module's loading and targeting: ``ModelNew`` on
the custom side when the source defines it, else ``Model`` — seed 003's baseline, ModelNew =
Model), with ``torch.utils.cpp_extension.load_inline`` and ``load`` served by keval's builder
(shim.py, build.py): built for the granted GPU's architecture only, in the job's directory,
before the device grant when the source builds at module level (KernelBench's form), and cached
by content. Everything after the build — weights seeded identically on both sides,
inputs from get_inputs()/get_init_inputs() created on the device, validation and timing by the
core — is the torch type's.
"""
from keval_runtime import common, errors
from keval_runtime.device import DEVICE_CUDA, warm_torch
from keval_runtime.torch_module import TorchKernel

from . import build, served_build, shim

_builder = None  # one per job (one worker process per job)
BUILD_SIDE = "build"  # core/worker/runner/runner_protocol.hpp


def compile(source, metadata_json, io_json, work_dir, side, cuda_arch):
    global _builder
    if side == BUILD_SIDE:  # the trusted worker's builder: no user code, one extension
        return served_build.build(source, work_dir, cuda_arch)
    if not cuda_arch:
        raise errors.UnsupportedError("kernel type 'torch_cuda' needs a CUDA device: no GPU "
                                      "architecture is known to build the extension for")
    torch = common.import_torch("torch_cuda")
    if torch.version.cuda is None:  # the machine's fault, not the source's: no CUDA headers
        raise errors.UnsupportedError(f"kernel type 'torch_cuda' needs a PyTorch built with "
                                      f"CUDA; this one ({torch.__version__}) is CPU-only")
    if _builder is None:
        _builder = build.Builder(work_dir, cuda_arch)
        shim.install(_builder)
    first_build = len(_builder.builds)
    _builder.failure = None
    try:
        kernel = TorchCudaKernel(source, metadata_json, io_json, work_dir, side)
    except errors.CompileError as exc:
        failure = _builder.failure
        if failure is None:
            raise
        # The compiler's output, in full, is the useful part; the traceback follows it.
        raise errors.CompileError(str(failure),
                                  failure.output + "\n\n" + (exc.details or "")) from None
    kernel.info["extensions"] = _builder.builds[first_build:]
    kernel.info["cache_dir"] = _builder.cache_dir
    return kernel


class TorchCudaKernel(TorchKernel):
    """The torch type's kernel; only the loading differs (the shim is in place by then)."""

    def bind(self, device_type, device_id, stream):
        if device_type != DEVICE_CUDA:
            raise errors.UnsupportedError("kernel type 'torch_cuda' runs on CUDA devices only")
        super().bind(device_type, device_id, stream)


def prewarm():
    """Ahead of the job (SDK 1.1 prewarm, keval serve's prestarted workers): torch and its
    extension machinery imported, and the precompiled torch header that main.cpp uses started
    in the background if the cache does not have it yet (Builder.prepare)."""
    import torch  # noqa: F401
    import torch.utils.cpp_extension  # noqa: F401

    build.Builder(work_dir=None, cuda_arch=None).prepare(wait=False)


# SDK 1.4 warm_device: torch set up on the device opened ahead, before the job.
warm_device = warm_torch
