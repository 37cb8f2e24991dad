"""A torch module or function as a kernel: what the torch-based kernel types share.


Targeting (metadata):
  - ``function_name``: a module-level function; it wins when class_name is given too;
  - else ``class_name`` (default ``Model``) and ``method_name`` (default ``forward``); on the
    custom side of a comparison without class_name, KernelBench's ``ModelNew`` is taken when the
    source defines it.
The class is instantiated once, at bind, on the granted device, with ``get_init_inputs()``
(the other side's when this source has none) and torch's generators seeded with 42 before both
calls, so the two sides of a compare build identical weights. Inputs come from an IOContract
when any side has one, else from ``get_inputs()``, seeded by the core's trial seed and created
directly on the device.
"""
import inspect

from . import (bridge, common, contract, errors, invoke, launching, loader, session)
from .device import Device

# KernelBench seeds model construction with 42 (its set_seed default) on both sides.
WEIGHT_SEED = 42


class TorchKernel:
    def __init__(self, source, metadata_json, io_json, work_dir, side):
        metadata = contract.parse_metadata(metadata_json)
        function_name = contract.metadata_string(metadata, "function_name")
        class_name = contract.metadata_string(metadata, "class_name")
        method_name = contract.metadata_string(metadata, "method_name")
        self.side = side
        self.own_contract = io_json is not None
        self.torch = common.import_torch("torch")
        self.module = loader.load_source(source, "torch", side, work_dir)
        session.register_module(side, self.module)
        self.info = {"torch_version": self.torch.__version__, **common.python_info(),
                     "source_file": self.module.__file__}

        if function_name is not None:
            self._target_function(function_name)
            ignored = [k for k in ("class_name", "method_name") if metadata.get(k) is not None]
            if ignored:
                self.info["ignored_metadata"] = ignored
                self.info["note"] = "function_name takes precedence over class_name/method_name"
        else:
            self._target_method(class_name, method_name or "forward")
        self.info["defines"] = [name for name in ("get_inputs", "get_init_inputs")
                                if callable(getattr(self.module, name, None))]
        self.device = None
        self.plan = None

    def _target_function(self, name):
        function = getattr(self.module, name, None)
        if function is None:
            raise errors.CompileError(f"Function '{name}' not found")
        if inspect.isclass(function) or not callable(function):
            raise errors.CompileError(f"'{name}' is not a function")
        self.cls = None
        self.function = function
        self.label = name
        self.info.update(target="function", function_name=name)

    def _target_method(self, class_name, method_name):
        if class_name is None:
            class_name = "Model"
            if self.side == "custom" and inspect.isclass(getattr(self.module, "ModelNew", None)):
                class_name = "ModelNew"  # KernelBench's name for the candidate
        cls = getattr(self.module, class_name, None)
        if cls is None:
            raise errors.CompileError(f"Class '{class_name}' not found")
        if not inspect.isclass(cls):
            raise errors.CompileError(f"'{class_name}' is not a class")
        if not callable(getattr(cls, method_name, None)):
            raise errors.CompileError(f"Method '{method_name}' not found in class '{class_name}'")
        self.cls = cls
        self.method_name = method_name
        self.label = f"{class_name}.{method_name}"
        self.info.update(target="method", class_name=class_name, method_name=method_name)

    def info_json(self):
        return common.to_json(self.info)

    # -- after the device grant ----------------------------------------------------------------

    def bind(self, device_type, device_id, stream):
        self.device = Device(device_type, device_id, stream)
        if self.cls is None:
            target = self.function
        else:
            target = self._instantiate()
        self.plan = invoke.CallPlan(target, self.label, self.own_contract)

    def _instantiate(self):
        torch = self.torch
        device = self.device
        init_inputs_fn, _ = session.find(self.side, "get_init_inputs")
        with device.on_stream(), device.creating_tensors():
            common.seed_everything(WEIGHT_SEED)
            init_inputs = []
            if init_inputs_fn is not None:
                try:
                    init_inputs = list(init_inputs_fn())
                except Exception as exc:
                    raise errors.from_user_code(errors.LaunchError, "get_init_inputs() raised",
                                                exc) from None
            init_inputs = [device.to_device(v) for v in init_inputs]
            common.seed_everything(WEIGHT_SEED)
            try:
                instance = self.cls(*init_inputs)
                if isinstance(instance, torch.nn.Module):
                    instance = instance.to(device.torch_device)
            except Exception as exc:
                raise errors.from_user_code(errors.LaunchError,
                                            f"{self.cls.__name__}(*get_init_inputs()) raised",
                                            exc) from None
        device.synchronize()
        if self.method_name == "forward" and isinstance(instance, torch.nn.Module):
            return instance  # called as model(*inputs), as KernelBench does: hooks run
        return getattr(instance, self.method_name)

    def default_inputs(self, seed):
        get_inputs, where = session.find(self.side, "get_inputs")
        if get_inputs is None:
            raise errors.RequestError("the request has no IOContract and the source defines no "
                                      "get_inputs() to create inputs with")
        device = self.device
        with device.on_stream(), device.creating_tensors(), self.torch.no_grad():
            common.seed_everything(seed)
            try:
                values = get_inputs()
            except Exception as exc:
                raise errors.from_user_code(errors.LaunchError, "get_inputs() raised",
                                            exc) from None
            if not isinstance(values, (list, tuple)):
                raise errors.LaunchError(f"get_inputs() must return a list of inputs, got a "
                                         f"{type(values).__name__}")
            layout, tensors = [], []
            for value in values:
                if isinstance(value, self.torch.Tensor):
                    tensors.append(device.to_device(value))
                    layout.append(("tensor", None))
                else:
                    layout.append(("value", value))
            session.set_default_input_layout(layout)
            return bridge.export_tensors(tensors, device, "get_inputs() tensor")

    def launch(self, native_args):
        args = bridge.import_args(native_args)

        def run_once():
            outputs = invoke.call(self.plan, args, no_grad=True)
            return bridge.export_tensors(outputs, self.device, "output")

        return launching.run(self.device, run_once)
