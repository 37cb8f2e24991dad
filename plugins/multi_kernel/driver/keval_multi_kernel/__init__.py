"""kernel_type "multi_kernel": a Python script mixing Triton, CUDA (CuPy) and PyTorch, run through
one entry-point function (the V2 contract). ``metadata.entry_point`` names it; it is called with the
IOContract's inputs in contract order and returns the output tensor(s) that are compared and
timed."""
import inspect

from keval_runtime import bridge, common, contract, errors, invoke, launching, loader, session
from keval_runtime.device import Device, warm_torch


def compile(source, metadata_json, io_json, work_dir, side, cuda_arch):
    return MultiKernel(source, metadata_json, io_json, work_dir, side)


class MultiKernel:
    def __init__(self, source, metadata_json, io_json, work_dir, side):
        # The seed's checks, in its order and with its wording.
        if io_json is None:
            raise errors.RequestError("IOContract is required for multi_kernel type")
        metadata = contract.parse_metadata(metadata_json)
        entry_point = metadata.get("entry_point")
        if entry_point is None or entry_point == "":
            raise errors.RequestError("entry_point must be specified in metadata")
        if not isinstance(entry_point, str):
            raise errors.RequestError("metadata.entry_point must be a string")
        torch = common.import_torch("multi_kernel")
        self.module = loader.load_source(source, "multi_kernel", side, work_dir)
        session.register_module(side, self.module)
        function = getattr(self.module, entry_point, None)
        if function is None:
            raise errors.CompileError(f"Entry point function '{entry_point}' not found in module")
        if inspect.isclass(function) or not callable(function):
            raise errors.CompileError(f"Entry point '{entry_point}' is not a function")
        self.plan = invoke.CallPlan(function, f"Entry point '{entry_point}'", own_contract=True)
        self.device = None
        self.info = {"entry_point": entry_point, "torch_version": torch.__version__,
                     **common.python_info(), "source_file": self.module.__file__}
        description = metadata.get("description")
        if isinstance(description, str):
            self.info["description"] = description

    def info_json(self):
        return common.to_json(self.info)

    def bind(self, device_type, device_id, stream):
        self.device = Device(device_type, device_id, stream)

    def default_inputs(self, seed):
        raise errors.UnsupportedError("multi_kernel takes its inputs from the IOContract")

    def launch(self, native_args):
        args = bridge.import_args(native_args)

        def run_once():
            outputs = invoke.call(self.plan, args, no_grad=False)
            return bridge.export_tensors(outputs, self.device, "output")

        return launching.run(self.device, run_once)


def prewarm():
    """torch, and Triton where installed, imported ahead of the job (SDK 1.1 prewarm)."""
    import torch  # noqa: F401
    try:
        import triton  # noqa: F401
    except ImportError:
        pass  # scripts that use Triton fail on their own import, with their own traceback


# SDK 1.4 warm_device: torch set up on the device opened ahead, before the job.
warm_device = warm_torch
