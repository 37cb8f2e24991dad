"""Arguments in, tensors out: the Python side of the DLPack bridge.

The C++ layer hands each launch argument over as a tuple
``(name, kind, role, is_meta, value, is_bool)``: tensors as "dltensor" capsules that view the
core's memory (no copy), scalars as Python values. Tensors go back the same way, as capsules
from ``torch.utils.dlpack.to_dlpack`` that the C++ layer keeps alive until the core releases
them. Booleans travel as uint8 (torch < 2.0 has no DLPack bool) with ``is_bool`` set.
"""
from . import errors

KIND_TENSOR, KIND_INT, KIND_FLOAT, KIND_BOOL, KIND_STR = 0, 1, 2, 3, 4
ROLE_INPUT, ROLE_OUTPUT, ROLE_INOUT = 0, 1, 2
_KIND_NAMES = {KIND_TENSOR: "tensor", KIND_INT: "int", KIND_FLOAT: "float", KIND_BOOL: "bool",
               KIND_STR: "str"}


class Arg:
    """One launch argument, in IOContract order."""

    __slots__ = ("name", "kind", "role", "is_meta", "value")

    def __init__(self, name, kind, role, is_meta, value):
        self.name = name
        self.kind = kind
        self.role = role
        self.is_meta = is_meta
        self.value = value

    @property
    def is_tensor(self):
        return self.kind == KIND_TENSOR

    def __repr__(self):
        return f"Arg({self.name}: {_KIND_NAMES.get(self.kind, self.kind)})"


def import_args(native_args):
    """Arg objects for the launch: tensors as torch tensors over the core's memory."""
    import torch.utils.dlpack

    args = []
    for name, kind, role, is_meta, value, is_bool in native_args:
        if kind == KIND_TENSOR:
            value = torch.utils.dlpack.from_dlpack(value)
            if is_bool:
                value = value.view(torch.bool)
        args.append(Arg(name, kind, role, bool(is_meta), value))
    return args


_SUPPORTED_DTYPES = None


def _supported_dtypes():
    global _SUPPORTED_DTYPES
    if _SUPPORTED_DTYPES is None:
        import torch

        _SUPPORTED_DTYPES = {torch.float16, torch.bfloat16, torch.float32, torch.float64,
                             torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8,
                             torch.bool}
    return _SUPPORTED_DTYPES


def export_tensors(tensors, device, what):
    """(capsule, is_bool) pairs for tensors handed to the core. Each must be a tensor on the
    granted device with a dtype keval compares; ``what`` names them in errors
    ("output", "get_inputs() value")."""
    import torch
    import torch.utils.dlpack

    exported = []
    for index, tensor in enumerate(tensors):
        label = f"{what} {index}"
        if not isinstance(tensor, torch.Tensor):
            raise errors.LaunchError(f"{label} is a {type(tensor).__name__}, not a tensor")
        if tensor.device != device.torch_device:
            raise errors.LaunchError(f"{label} is on {tensor.device}, but the kernel runs on "
                                     f"{device.torch_device}; return tensors on the input's "
                                     "device")
        if tensor.dtype not in _supported_dtypes():
            raise errors.LaunchError(f"{label} has dtype {tensor.dtype}, which keval cannot "
                                     "compare (float16/32/64, bfloat16, int8/16/32/64, uint8, "
                                     "bool)")
        tensor = tensor.detach()
        is_bool = tensor.dtype == torch.bool
        if is_bool:
            tensor = tensor.view(torch.uint8)
        exported.append((torch.utils.dlpack.to_dlpack(tensor), is_bool))
    return exported
