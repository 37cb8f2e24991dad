"""kernel_type "triton": one @triton.jit kernel launched with the IOContract (the V2 contract).

  - the IOContract is required; its non-meta arguments are passed positionally in contract
    order (tensors as torch tensors over the core's memory, output tensors included: the kernel
    writes them), its ``is_meta`` arguments as constexpr keywords;
  - ``io.launch.grid`` is the launch grid; ``num_warps`` / ``num_stages`` are passed when given;
  - the kernel is ``metadata.kernel_name``, else the first @triton.jit kernel the source defines.

Triton compiles on a kernel's first call, which would make compile errors look like failures
while validating. So compile() already compiles the kernel for the target GPU, with Triton's own
JIT path (``warmup``) and a stand-in driver that names the target and touches no device (compile
runs before any GPU is granted). Errors raised by Triton's compiler are compile errors
(compiled=false, with the message). The kernel it produced stays in the JIT's cache, so the
first launch does not compile again. When this Triton's internals do not allow that, the info
says why ("precompile": {"status": "skipped", ...}) and Triton compiles at the first launch.

Triton's first launch in a process also builds two C modules with the host compiler: its CUDA
utilities (``cuda_utils``, once per process) and the kernel's launcher (one per argument
signature), about 0.5 s and 0.4 s on the H100 machine, with the GPU held. Neither needs a
device, so both are built before the grant too: the utilities by prewarm() in a worker started
ahead of its job (else by compile()), each precompiled kernel's launcher by compile()
("precompile": {"launchers": {...}}). They go to this runner's own Triton cache, where the
first launch finds them; nothing is shared with another job.
"""
import importlib
import os
import time

from keval_runtime import bridge, common, contract, errors, launching, loader, session
from keval_runtime.device import Device, warm_torch


def compile(source, metadata_json, io_json, work_dir, side, cuda_arch):
    return TritonKernel(source, metadata_json, io_json, work_dir, side, cuda_arch)


def _import_triton():
    try:
        import triton
    except Exception as exc:
        import sys

        raise errors.UnsupportedError(
            f"kernel type 'triton' needs Triton, which this Python cannot import "
            f"({sys.executable}): {errors.describe(exc)}") from None
    return triton


def _is_triton_kernel(value, triton):
    """@triton.jit functions and their autotune / heuristics wrappers."""
    kind = getattr(triton.runtime, "KernelInterface", None)
    if kind is None:
        kind = importlib.import_module("triton.runtime.jit").KernelInterface
    return isinstance(value, kind)


def _defined_in(value, module):
    """Whether a (possibly autotuned or heuristics-wrapped) kernel was written in `module`."""
    seen = 0
    while hasattr(value, "fn") and seen < 8:
        value = value.fn
        seen += 1
    return getattr(value, "__module__", None) == module.__name__


def _discover(module, triton):
    """The @triton.jit kernels the source defines, in definition order."""
    return [(name, value) for name, value in vars(module).items()
            if _is_triton_kernel(value, triton) and _defined_in(value, module)]


class TritonKernel:
    def __init__(self, source, metadata_json, io_json, work_dir, side, cuda_arch):
        if io_json is None:
            raise errors.RequestError("IOContract is required for Triton")
        self.contract = contract.parse(io_json)
        if self.contract.grid is None:
            raise errors.RequestError("io.launch.grid is required for Triton")
        metadata = contract.parse_metadata(metadata_json)
        kernel_name = contract.metadata_string(metadata, "kernel_name")
        self.torch = common.import_torch("triton")
        triton = _import_triton()
        self.module = loader.load_source(source, "triton", side, work_dir)
        session.register_module(side, self.module)

        kernels = _discover(self.module, triton)
        if kernel_name is not None:
            kernel = getattr(self.module, kernel_name, None)
            if kernel is None:
                raise errors.CompileError(f"Kernel '{kernel_name}' not found")
            if not _is_triton_kernel(kernel, triton):
                raise errors.CompileError(f"'{kernel_name}' is not a @triton.jit kernel")
        else:
            if not kernels:
                raise errors.CompileError("No @triton.jit kernels found")
            kernel_name, kernel = kernels[0]
        self.kernel = kernel
        self.kernel_name = kernel_name
        self.launch_options = {}
        if self.contract.num_warps is not None:
            self.launch_options["num_warps"] = int(self.contract.num_warps)
        if self.contract.num_stages is not None:
            self.launch_options["num_stages"] = int(self.contract.num_stages)
        self.device = None
        self.info = {"kernel_name": kernel_name, "kernels": [name for name, _ in kernels],
                     "grid": list(self.contract.grid), **self.launch_options,
                     "triton_version": getattr(triton, "__version__", "unknown"),
                     "torch_version": self.torch.__version__, **common.python_info(),
                     "source_file": self.module.__file__}
        self.info["precompile"] = self._precompile(triton, cuda_arch)

    def info_json(self):
        return common.to_json(self.info)

    # -- compiling before the grant ------------------------------------------------------------

    def _precompile(self, triton, cuda_arch):
        if not cuda_arch:
            return _skipped("the target GPU is not known at compile time (no CUDA device seen)")
        try:
            from triton.backends.compiler import GPUTarget

            # The module: triton.runtime's attribute `driver` is the DriverConfig object itself.
            config = importlib.import_module("triton.runtime.driver").driver
            if "_active" not in vars(config):
                return _skipped("this Triton's driver configuration has no '_active' driver")
            target = GPUTarget("cuda", int(cuda_arch), 32)
            positional, meta = self._compile_time_arguments()
        except Exception as exc:
            return _skipped(errors.describe(exc))

        saved = config._active
        config._active = _CompileOnlyDriver(target)
        start = time.perf_counter()
        try:
            compiled = self.kernel.warmup(*positional, grid=self.contract.grid, **meta,
                                          **self.launch_options)
        except Exception as exc:
            if _chain_contains(exc, _NeedsDevice):
                return _skipped(f"compiling needs the device here: {errors.describe(exc)}")
            if _raised_by_triton_compiler(exc):
                raise errors.CompileError(
                    f"Triton compilation of '{self.kernel_name}' failed: {_compile_summary(exc)}",
                    errors.user_traceback(exc)) from None
            # Raised before Triton's compiler ran: the arguments do not fit the kernel
            # (a missing or unknown parameter), a heuristic failed on stand-in tensors, ...
            # The first launch reports it with real arguments if it is the kernel's fault.
            return _skipped(errors.describe(exc))
        finally:
            config._active = saved
        done = {"status": "compiled", "target": f"cuda:{cuda_arch}",
                "time_ms": round((time.perf_counter() - start) * 1000.0, 3)}
        done["launchers"] = _build_launchers(compiled)
        return done

    def _compile_time_arguments(self):
        """Stand-ins for the launch arguments: tensors by dtype (Triton specialises on dtype and
        16-byte alignment, which every tensor keval allocates has), scalars by value."""
        positional, meta = [], {}
        for spec in self.contract.args:
            if spec.type == "tensor":
                value = _SpecTensor(getattr(self.torch, spec.dtype))
            elif spec.type == "int":
                value = int(spec.value)
            elif spec.type == "float":
                value = float(spec.value)
            elif spec.type == "bool":
                value = bool(spec.value)
            else:
                value = spec.value
            if spec.is_meta:
                meta[spec.name] = value
            else:
                positional.append(value)
        return positional, meta

    # -- after the grant -----------------------------------------------------------------------

    def bind(self, device_type, device_id, stream):
        self.device = Device(device_type, device_id, stream)

    def default_inputs(self, seed):
        raise errors.UnsupportedError("Triton kernels take their inputs from the IOContract")

    def launch(self, native_args):
        args = bridge.import_args(native_args)
        positional = [a.value for a in args if not a.is_meta]
        meta = {a.name: a.value for a in args if a.is_meta}
        launcher = self.kernel[self.contract.grid]

        def run_once():
            try:
                launcher(*positional, **meta, **self.launch_options)
            except Exception as exc:
                summary = (_compile_summary(exc) if _raised_by_triton_compiler(exc)
                           else errors.describe(exc))
                raise errors.LaunchError(
                    f"Triton kernel '{self.kernel_name}' failed to launch: {summary}",
                    errors.user_traceback(exc)) from None
            return []  # the kernel wrote its output arguments

        return launching.run(self.device, run_once)


def _skipped(reason):
    return {"status": "skipped", "reason": reason}


def _nvidia_driver_module():
    return importlib.import_module("triton.backends.nvidia.driver")


def _build_runtime_utilities():
    """Triton's CUDA utilities module, built (host compiler only, no device) into this
    process's Triton cache, as its driver would at the first launch."""
    _nvidia_driver_module().CudaUtils()


def _compiled_kernels(compiled):
    """The CompiledKernels a warmup returned: one, or one per configuration of an autotuned
    kernel. Anything else (a pending asynchronous compile) is left to the first launch."""
    pending = list(compiled) if isinstance(compiled, (list, tuple)) else [compiled]
    return [k for k in pending if hasattr(k, "src") and hasattr(k, "metadata")]


def _build_launchers(compiled):
    """Each precompiled kernel's launcher module, built before the grant. Triton builds it
    again at the first launch only if this did not: the launch then costs what it did before,
    so a failure here is recorded, never raised (a kernel's own fault shows at its launch)."""
    kernels = _compiled_kernels(compiled)
    if not kernels:
        return _skipped("the warmup returned no compiled kernel")
    start = time.perf_counter()
    try:
        _build_runtime_utilities()
        launcher = _nvidia_driver_module().CudaLauncher
        for kernel in kernels:
            launcher(kernel.src, kernel.metadata)
    except Exception as exc:
        return _skipped(errors.describe(exc))
    return {"status": "built", "count": len(kernels),
            "time_ms": round((time.perf_counter() - start) * 1000.0, 3)}


class _NeedsDevice(Exception):
    pass


class _CompileOnlyDriver:
    """Stands in for Triton's active driver while compiling before the grant: it names the
    target GPU and device 0, and fails loudly (_NeedsDevice) on anything that would need a
    device, so nothing creates a CUDA context."""

    def __init__(self, target):
        self._target = target

    def get_current_target(self):
        return self._target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def __getattr__(self, name):
        raise _NeedsDevice(f"Triton asked its driver for '{name}' while compiling")


class _SpecTensor:
    __slots__ = ("dtype",)

    def __init__(self, dtype):
        self.dtype = dtype

    def data_ptr(self):
        return 0  # aligned, as every tensor keval allocates is


_COMPILER_FILES = (os.path.join("triton", "compiler", "compiler.py"),
                   os.path.join("triton", "compiler", "code_generator.py"))


def _chain(exc):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _chain_contains(exc, kind):
    return any(isinstance(e, kind) for e in _chain(exc))


def _raised_by_triton_compiler(exc):
    """Whether the exception (or one it chains) passed through Triton's compiler."""
    for e in _chain(exc):
        if type(e).__name__ == "CompilationError" and type(e).__module__.startswith("triton"):
            return True
        tb = e.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename.endswith(_COMPILER_FILES):
                return True
            tb = tb.tb_next
    return False


def _compile_summary(exc):
    """One line for a Triton compile error: its own message (CompilationError's text starts
    with the location and the source excerpt, the error comes last), else the last line."""
    chain = list(_chain(exc))
    for e in chain:
        message = getattr(e, "error_message", None)
        if message:
            return str(message).strip().splitlines()[0]
    if len(chain) > 1:  # a CompilationError without a message of its own wraps the real error
        return errors.describe(chain[-1])
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__


def prewarm():
    """torch and Triton, imported ahead of the job (SDK 1.1 prewarm), and Triton's CUDA
    utilities module built: the host compiler's work of every first launch, with no device."""
    import torch  # noqa: F401
    import triton  # noqa: F401

    _build_runtime_utilities()


# SDK 1.4 warm_device: torch set up on the device opened ahead, before the job.
warm_device = warm_torch
