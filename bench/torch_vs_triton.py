#!/usr/bin/env python3
"""keval vs. KernelBench's method, side by side, on one torch-vs-Triton comparison.

The pair is KernelBench-shaped: a torch reference `Model` (add then ReLU of two large tensors,
with get_inputs / get_init_inputs) and a candidate `ModelNew` whose forward launches a Triton
kernel. Each round runs, in fresh processes and alternating so drift hits both equally:
  keval:       `keval compare` of the pair (5 correctness trials, 100 profiled trials of each
               side, full report);
  KernelBench: a fresh Python process doing what KernelBench's evaluation does: exec the
               reference source, import the candidate from a temporary file (Triton needs one),
               build both models under seed 42, 5 correctness trials (get_inputs on the CPU,
               copied to the GPU, allclose with atol=rtol=1e-2), then 100 trials of each side
               timed with CUDA events.
It prints each side's median wall time (what a user waits for), the candidate's median kernel
time as each side measured it, and the ratio of wall times.

usage: bench/torch_vs_triton.py [--keval build/bin/keval] [--rounds 5] [--batch 4096] [--dim 16384]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REFERENCE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(a + b)


batch_size = {batch}
dim = {dim}


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""

CANDIDATE = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_relu_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(a + b, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        out = torch.empty_like(a)
        n = a.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
        add_relu_kernel[grid](a, b, out, n, BLOCK=1024)
        return out
"""

# KernelBench's evaluation, condensed (src/eval.py: load_original_model_and_inputs, set_seed,
# run_and_check_correctness, time_execution_with_cuda_event).
KERNELBENCH = r"""
import importlib.util, os, random, sys, tempfile
import torch
ref_src, new_src = sys.argv[1], sys.argv[2]

def set_seed(seed):
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(seed)

device = torch.device("cuda:0")
context = {}
exec(ref_src, context)
Model, get_inputs, get_init_inputs = context["Model"], context["get_inputs"], context["get_init_inputs"]
with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
    f.write(new_src)
spec = importlib.util.spec_from_file_location("kernelbench_candidate", f.name)
candidate = importlib.util.module_from_spec(spec)
sys.modules["kernelbench_candidate"] = candidate
spec.loader.exec_module(candidate)

init_inputs = [x.cuda(device) if isinstance(x, torch.Tensor) else x for x in get_init_inputs()]
with torch.no_grad():
    set_seed(42)
    model = Model(*init_inputs).cuda(device)
    set_seed(42)
    model_new = candidate.ModelNew(*init_inputs).cuda(device)
    torch.cuda.synchronize(device)

    trial_seeds = random.Random(42).sample(range(0, 10**7), 5)
    for seed in trial_seeds:
        set_seed(seed)
        inputs = [x.cuda(device) if isinstance(x, torch.Tensor) else x for x in get_inputs()]
        expected = model(*inputs)
        actual = model_new(*inputs)
        torch.cuda.synchronize(device)
        assert expected.shape == actual.shape
        assert torch.allclose(expected, actual, atol=1e-2, rtol=1e-2), "mismatch"

    def time_cuda_events(m, inputs, trials=100):
        for _ in range(3):
            m(*inputs)
        torch.cuda.synchronize(device)
        times = []
        for _ in range(trials):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            m(*inputs)
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end))
        return sorted(times)[len(times) // 2]

    set_seed(42)
    inputs = [x.cuda(device) if isinstance(x, torch.Tensor) else x for x in get_inputs()]
    ref_ms = time_cuda_events(model, inputs)
    new_ms = time_cuda_events(model_new, inputs)
os.unlink(f.name)
print(ref_ms, new_ms)
"""


def request(batch, dim):
    return {"ref_kernel": {"source_code": REFERENCE.format(batch=batch, dim=dim),
                           "kernel_type": "torch"},
            "custom_kernel": {"source_code": CANDIDATE, "kernel_type": "torch"},
            "num_correctness_trials": 5, "num_trials": 100, "timeout": 600}


def timed(cmd):
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd[:3])}...\n"
                 f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return elapsed, done.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keval", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                    "bin", "keval"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--dim", type=int, default=16384)
    args = ap.parse_args()

    req = request(args.batch, args.dim)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(req, f)
        request_path = f.name
    ref_src = req["ref_kernel"]["source_code"]
    walls = {"keval": [], "kernelbench": []}
    kernel_ms = {"keval": [], "kernelbench": []}
    methods = set()
    for r in range(args.rounds):
        wall, out = timed([args.keval, "compare", request_path])
        response = json.loads(out)
        result = response["kernel_exec_result"]
        assert result["compiled"] and result["correctness"], response.get("validation_error")
        walls["keval"].append(wall)
        kernel_ms["keval"].append(result["runtime_stats"]["median"])
        methods.add(result["runtime_stats"]["method"])
        wall, out = timed([args.python, "-c", KERNELBENCH, ref_src, CANDIDATE])
        walls["kernelbench"].append(wall)
        kernel_ms["kernelbench"].append(float(out.split()[-1]))
        print(f"round {r + 1}: keval {walls['keval'][-1]:.3f} s, "
              f"KernelBench method {walls['kernelbench'][-1]:.3f} s", flush=True)
    os.unlink(request_path)

    print(f"pair: torch Model vs Triton ModelNew, relu(a + b) on 2 x [{args.batch}, {args.dim}] "
          f"float32; keval timing method: {', '.join(sorted(methods))}")
    print(f"{'side':<12} {'median wall s':>14} {'ModelNew median ms':>19}")
    for side in ("keval", "kernelbench"):
        print(f"{side:<12} {statistics.median(walls[side]):>14.3f} "
              f"{statistics.median(kernel_ms[side]):>19.4f}")
    ratio = statistics.median(walls["kernelbench"]) / statistics.median(walls["keval"])
    print(f"ratio (KernelBench method / keval wall): {ratio:.2f}x")


if __name__ == "__main__":
    main()
