"""Helpers of the client tests: small CPU requests (kernel type torch, function-style, with an
IOContract) and the keval binary to check requests with.

Each request is as cheap as a torch job gets (tiny tensors, a few trials): the tests run real
jobs on a shared CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any, Dict, Optional, Tuple

import compute_eval_support  # noqa: F401  (puts python/ on sys.path when pytest runs by hand)
from keval.iocontract import IOContractBuilder, create_arange_spec, create_randn_spec

KEVAL_BIN = os.environ.get("KEVAL_BIN")

AXPY = "import torch\n\ndef axpy(x, y, alpha):\n    return alpha * x + y\n"
AXPY_REWRITTEN = "import torch\n\ndef axpy2(x, y, alpha):\n    return torch.add(y, x, alpha=alpha)\n"
AXPY_WRONG = "import torch\n\ndef axpy_wrong(x, y, alpha):\n    return alpha * x - y\n"
# Sleeps where validation calls it: a job that stays running until it is cancelled or times out.
SLEEPER = ("import time\n\ndef sleeper(x, y, alpha):\n    time.sleep(600)\n"
           "    return x\n")


def axpy_io(n: int = 16) -> Dict[str, Any]:
    """The contract of axpy(x, y, alpha), built with the seed's helpers."""
    return (IOContractBuilder()
            .add_input_tensor("x", create_randn_spec([n], seed=1))
            .add_input_tensor("y", create_arange_spec([n], start=0.0, step=0.5))
            .add_scalar("alpha", "float", 2.0)
            .build()
            .to_dict())


def torch_kernel(source: str, function_name: str, io: bool = True) -> Dict[str, Any]:
    kernel: Dict[str, Any] = {"source_code": source, "kernel_type": "torch",
                              "metadata": {"function_name": function_name}}
    if io:
        kernel["io"] = axpy_io()
    return kernel


def evaluate_request(source: str = AXPY, function_name: str = "axpy",
                     **top: Any) -> Dict[str, Any]:
    request = {"kernel": torch_kernel(source, function_name), "num_trials": 3,
               "num_correctness_trials": 1, "timeout": 120}
    request.update(top)
    return request


def compare_request(custom: str = AXPY_REWRITTEN, custom_name: str = "axpy2",
                    **top: Any) -> Dict[str, Any]:
    # The custom side borrows the reference's contract, as a KernelBench candidate does.
    request = {"ref_kernel": torch_kernel(AXPY, "axpy"),
               "custom_kernel": torch_kernel(custom, custom_name, io=False),
               "num_trials": 3, "num_correctness_trials": 1, "timeout": 120}
    request.update(top)
    return request


def keval_check(mode: str, request: Any, keval_bin: Optional[str] = None
                ) -> Tuple[int, Dict[str, Any]]:
    """``keval check MODE -``: parse and check a request exactly as the daemon does, running
    nothing. (exit code, printed JSON): 0 and {"valid": true, ...}, or 2 and the 400 body."""
    text = request if isinstance(request, str) else json.dumps(request)
    proc = subprocess.run([keval_bin or KEVAL_BIN, "check", mode, "-"], input=text,
                          capture_output=True, text=True, timeout=60)
    try:
        body = json.loads(proc.stdout)
    except ValueError:
        body = {"stdout": proc.stdout, "stderr": proc.stderr}
    return proc.returncode, body
