"""Loading submitted source as a fresh module.

The source is written to a real file in the job's private work directory and imported under a
name no other module has (seed 001: a reused module name serves a stale module). A real file
gives tracebacks with file names, line numbers and source lines, and lets Triton's
``inspect.getsourcelines`` read the kernels it compiles.
"""
import importlib.util
import os
import sys
import uuid

from . import errors

_TYPE_LABELS = {"torch": "PyTorch", "triton": "Triton", "multi_kernel": "multi_kernel"}


def load_source(source, kernel_type, side, work_dir):
    """Executes ``source`` as a new module and returns it. Raises CompileError with the
    traceback when executing it fails (syntax error, failed import, exception at top level)."""
    name = f"keval_{kernel_type}_{side}_{uuid.uuid4().hex[:12]}"
    if not work_dir:
        raise RuntimeError("compile was given no work directory for the kernel source")
    os.makedirs(work_dir, exist_ok=True)
    path = os.path.join(work_dir, f"{name}.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(source)

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    # Registered before executing, as a normal import is: dataclasses, pickling and Triton's
    # JIT look modules up by name.
    sys.modules[name] = module
    writes_bytecode = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # nothing to cache: the file is used once
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # SystemExit from user code is the user's error too
        sys.modules.pop(name, None)
        label = _TYPE_LABELS.get(kernel_type, kernel_type)
        raise errors.from_user_code(errors.CompileError, f"Loading the {label} source failed",
                                    exc) from None
    finally:
        sys.dont_write_bytecode = writes_bytecode
    return module
