"""Pieces every Python kernel type shares: importing torch, seeding, JSON info."""
import json
import random
import sys

from . import errors


def import_torch(kernel_type):
    """torch, or UnsupportedError naming the interpreter that lacks it."""
    try:
        import torch
    except Exception as exc:
        raise errors.UnsupportedError(
            f"kernel type '{kernel_type}' needs PyTorch, which this Python cannot import "
            f"({sys.executable}, {sys.version.split()[0]}): {errors.describe(exc)}; set "
            "KEVAL_PYTHON to an interpreter that has it") from None
    return torch


def seed_everything(seed):
    """Seeds every generator a KernelBench-style get_inputs or __init__ draws from, so both sides
    of a compare (and every run of the same trial) see identical values."""
    import torch

    seed = int(seed) % (1 << 64)
    torch.manual_seed(seed)  # the CPU generator and every CUDA device's
    random.seed(seed)
    numpy = sys.modules.get("numpy")  # only when already imported: not worth importing here
    if numpy is not None:
        numpy.random.seed(seed % (1 << 32))


def python_info():
    return {"python": sys.version.split()[0], "python_executable": sys.executable}


def to_json(info):
    return json.dumps(info, default=str)
