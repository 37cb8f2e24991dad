"""kernel_type "numpy": metadata.function_name (default "run") on NumPy arrays, on the CPU."""
import json
import types

import numpy as np
from keval_runtime import errors, loader


class _Capsule:  # np.from_dlpack wants an object that hands out the capsule keval passes
    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, stream=None):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU, device 0


def compile(source, metadata_json, io_json, work_dir, side, cuda_arch):
    name = json.loads(metadata_json).get("function_name", "run")
    function = getattr(loader.load_source(source, "numpy", side, work_dir), name, None)
    if not callable(function):
        raise errors.CompileError(f"function '{name}' not found")
    return types.SimpleNamespace(info_json=lambda: json.dumps({"function_name": name}),
                                 bind=lambda *device: None, launch=lambda a: _launch(function, a))


def _launch(function, args):  # args: (name, kind, role, is_meta, value, is_bool); kind 0: tensor
    inputs = [np.from_dlpack(_Capsule(value)).view(bool) if kind == 0 and is_bool else
              np.from_dlpack(_Capsule(value)) if kind == 0 else value
              for _, kind, role, _, value, is_bool in args if role != 1]  # role 1: output
    try:
        outputs = function(*inputs)
    except Exception as exc:
        raise errors.from_user_code(errors.LaunchError, "the function raised", exc) from None
    return [_export(o) for o in (outputs if isinstance(outputs, tuple) else (outputs,))]


def _export(output):  # (capsule, is_bool): NumPy 1.x has no DLPack bool, so bool goes as uint8
    array = np.ascontiguousarray(output)
    is_bool = array.dtype == bool
    return (array.view(np.uint8) if is_bool else array).__dlpack__(), is_bool
