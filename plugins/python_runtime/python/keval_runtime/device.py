"""The granted device as torch sees it, and the stream the core measures.

On CUDA every launch runs with ``torch.cuda.ExternalStream(<the core's CUstream>)`` current, so
torch's and Triton's kernels are enqueued exactly where the core's events (or its CUDA graph
capture) measure; when the source uses CuPy, its current stream is the same one. The core's
stream is a blocking stream: kernels launched with a bare ``<<<grid, block>>>`` (KernelBench's
load_inline style) go to the legacy default stream, which is ordered with it, so events still
measure them; a graph capture cannot hold them (see launching.py).
On the CPU the core times launch() itself with a wall clock.
"""
import contextlib
import ctypes
import sys

DEVICE_CPU = 1
DEVICE_CUDA = 2


class Device:
    def __init__(self, device_type, device_id, stream_ptr):
        import torch

        self.torch = torch
        if device_type == DEVICE_CUDA:
            if not torch.cuda.is_available():
                raise RuntimeError("keval granted CUDA device %d but this torch (%s) sees no CUDA "
                                   "device" % (device_id, torch.__version__))
            self.torch_device = torch.device("cuda", device_id)
            torch.cuda.set_device(self.torch_device)
            self.stream = torch.cuda.ExternalStream(stream_ptr, device=self.torch_device)
            self.stream_ptr = stream_ptr
            self.device_id = device_id
            self._cupy_stream = None
        elif device_type == DEVICE_CPU:
            self.torch_device = torch.device("cpu")
            self.stream = None
        else:
            raise RuntimeError(f"unknown device type {device_type}")

    def on_stream(self):
        """Makes the core's stream current (CUDA), for torch (and Triton, which launches on
        torch's current stream) and, once the source has imported it, CuPy; nothing to do on
        the CPU."""
        if self.stream is None:
            return contextlib.nullcontext()
        cupy = sys.modules.get("cupy")
        if cupy is None:
            return self.torch.cuda.stream(self.stream)
        if self._cupy_stream is None:
            self._cupy_stream = cupy.cuda.ExternalStream(self.stream_ptr, self.device_id)
        both = contextlib.ExitStack()
        both.enter_context(self.torch.cuda.stream(self.stream))
        both.enter_context(cupy.cuda.Device(self.device_id))
        both.enter_context(self._cupy_stream)
        return both

    def creating_tensors(self):
        """Makes tensor factories (torch.randn in get_inputs, parameters in a model's __init__)
        allocate on the granted device directly, instead of on the CPU and copied: on large
        KernelBench problems the copy alone costs about a minute per evaluation. torch < 2.0 has
        no default-device context; there, tensors made elsewhere are moved (see to_device)."""
        if self.stream is None or not hasattr(self.torch.device, "__enter__"):
            return contextlib.nullcontext()
        return self.torch_device

    def to_device(self, value):
        """A tensor on the granted device (moved only when made elsewhere); other values as
        they are."""
        if isinstance(value, self.torch.Tensor) and value.device != self.torch_device:
            return value.to(self.torch_device)
        return value

    def synchronize(self):
        if self.stream is not None:
            self.stream.synchronize()

    def capturing(self):
        """Whether the core is capturing the current launch into a CUDA graph."""
        return self.stream is not None and self.torch.cuda.is_current_stream_capturing()

    def take_pending_cuda_error(self):
        """The CUDA runtime's pending error for this thread (cudaGetLastError), which it clears;
        None when there is none. A ``<<<...>>>`` launch that fails and whose caller does not
        check leaves its error there, for whatever torch call comes next to raise: during a
        capture that is a launch the graph does not hold."""
        failed = None
        for cudart in _loaded_cuda_runtimes():
            code = cudart.cudaGetLastError()
            if code != 0 and failed is None:
                failed = "%s (cudaError %d)" % (
                    cudart.cudaGetErrorString(code).decode(errors="replace"), code)
        return failed

    def abandon_capture(self):
        """Makes the core's ongoing graph capture fail, so that the core times this kernel with
        events instead. Used when the launch raised while being captured: torch allocating
        fresh device memory, synchronising (.item(), nonzero) or drawing random numbers cannot
        be captured by a capture torch did not start, and a capture the launch left half-done
        must not be replayed. Synchronising a capturing stream is illegal, so it invalidates
        the capture; the error it raises is expected and dropped."""
        try:
            self.stream.synchronize()
        except Exception:  # RuntimeError (torch.AcceleratorError in newer torch)
            pass


_cuda_runtimes = None


def _loaded_cuda_runtimes():
    """The CUDA runtime libraries this process has loaded (torch's, and any other an extension
    brought), opened again: dlopen of a loaded path returns that same library and its state."""
    global _cuda_runtimes
    if _cuda_runtimes is None:
        paths = set()
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if "/libcudart.so" in path:
                    paths.add(path)
        _cuda_runtimes = [ctypes.CDLL(path) for path in sorted(paths)]
        for cudart in _cuda_runtimes:
            cudart.cudaGetLastError.restype = ctypes.c_int
            cudart.cudaGetErrorString.restype = ctypes.c_char_p
    return _cuda_runtimes


def warm_torch(device_type, device_id, stream=None):
    """torch set up on the device a worker started ahead of its job opened ahead (SDK 1.4
    warm_device: the torch-based drivers' own warm_device, hence the stream, which it waits for
    with the whole device), before any user code: what every job's first launches would
    otherwise pay while it holds the GPU. torch's own CUDA state on the context (its lazy
    initialisation), the cuBLAS handle and workspace, and the kernels a KernelBench model most
    often launches first (its inputs' and weights' random generation, linear layers and matrix
    products, ReLU and GELU, element-wise arithmetic, a reduction, a copy), each launched once
    on a small tensor: CUDA loads a kernel's module at its first launch (lazy loading), 2 to 90
    ms apiece on the H200, where the same launch afterwards takes microseconds. The list is
    short on purpose: a job that wants to time waits for the runner warming up then. The core
    calls this only while no job is timed on that GPU. Nothing is left that a job could see: the
    work is waited for, the cached memory given back, and every job seeds the random generators
    itself before its weights and inputs are made."""
    if device_type != DEVICE_CUDA:
        return
    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        return
    device = torch.device("cuda", device_id)
    torch.cuda.set_device(device)
    with torch.no_grad():
        x = torch.randn(64, 64, device=device)
        w = torch.empty(64, 64, device=device).uniform_(-1.0, 1.0)  # weights' initialisation
        y = F.linear(x, w, x[0])  # cuBLAS(Lt): handle, workspace, addmm
        y = torch.relu(torch.matmul(y, w))
        y = F.gelu(y + x) * w
        y = y.t().contiguous().sum(dim=0)
    torch.cuda.synchronize(device)
    del x, w, y
    torch.cuda.empty_cache()
