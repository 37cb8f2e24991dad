#!/usr/bin/env python3
"""keval vs. the seed server's path, side by side, on one vector-add evaluation.

Each round runs, in fresh processes and alternating so drift hits both equally:
  keval:  `keval evaluate` of a cuda request (NVRTC compile, 5 correctness trials, 100 profiled
          trials, full report);
  seed:   a fresh Python process doing what the seed server's worker does for the same job
          (import torch + cupy, cupy.RawKernel compile, torch tensors, 5 correctness trials
          against torch, 100 trials timed with CUDA events).
It prints each side's median wall time and the ratio. Wall time is what a user waits for; GPU
time of the kernel itself is the same on both sides.

usage: bench/cuda_vector_add.py [--keval build/bin/keval] [--rounds 5] [--n 1048576]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

KERNEL = r"""
extern "C" __global__ void vector_add(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}
"""

SEED_PATH = r"""
import sys, torch, cupy as cp
n = int(sys.argv[1]); src = sys.argv[2]
dev = torch.device("cuda:0")
kernel = cp.RawKernel(src, "vector_add")
block = 256; grid = (n + block - 1) // block
def run(x, y, out):
    kernel((grid,), (block,), (cp.asarray(x), cp.asarray(y), cp.asarray(out), cp.int32(n)))
for trial in range(5):
    g = torch.Generator(device=dev).manual_seed(42 + trial)
    x = torch.randn(n, device=dev, generator=g); y = torch.randn(n, device=dev, generator=g)
    out = torch.empty_like(x); run(x, y, out); torch.cuda.synchronize()
    assert torch.allclose(out, x + y, atol=1e-2, rtol=1e-2)
x = torch.randn(n, device=dev); y = torch.randn(n, device=dev); out = torch.empty_like(x)
for _ in range(3): run(x, y, out)
times = []
for _ in range(100):
    s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
    s.record(); run(x, y, out); e.record(); torch.cuda.synchronize(); times.append(s.elapsed_time(e))
times.sort(); print(times[len(times) // 2])
"""


def request(n):
    def tensor(name, role, seed=None):
        spec = {"shape": [n], "dtype": "float32"}
        if seed is not None:
            spec["init"] = {"kind": "randn", "seed": seed}
        return {"name": name, "type": "tensor", "role": role, "tensor_spec": spec}
    io = {"args": [tensor("x", "input", 42), tensor("y", "input", 43), tensor("out", "output"),
                   {"name": "n", "type": "int", "value": n}],
          "launch": {"grid": {"x": (n + 255) // 256}, "block": {"x": 256}}}
    return {"kernel": {"source_code": KERNEL, "kernel_type": "cuda", "io": io},
            "num_trials": 100, "num_correctness_trials": 5}


def timed(cmd):
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd[:3])}...\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return elapsed, done.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keval", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin", "keval"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=1 << 20)
    args = ap.parse_args()

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(request(args.n), f)
        request_path = f.name
    keval_walls, seed_walls, keval_kernel, seed_kernel = [], [], [], []
    for r in range(args.rounds):
        wall, out = timed([args.keval, "evaluate", request_path])
        result = json.loads(out)["kernel_exec_result"]
        assert result["compiled"] and result["correctness"], result
        keval_walls.append(wall)
        keval_kernel.append(result["runtime_stats"]["median"])
        wall, out = timed([args.python, "-c", SEED_PATH, str(args.n), KERNEL])
        seed_walls.append(wall)
        seed_kernel.append(float(out.strip().splitlines()[-1]))
        print(f"round {r + 1}: keval {keval_walls[-1]:.3f} s, seed path {seed_walls[-1]:.3f} s", flush=True)
    k, s = statistics.median(keval_walls), statistics.median(seed_walls)
    print(f"{'side':<10} {'median wall s':>14} {'kernel median ms':>17}")
    print(f"{'keval':<10} {k:>14.3f} {statistics.median(keval_kernel):>17.4f}")
    print(f"{'seed path':<10} {s:>14.3f} {statistics.median(seed_kernel):>17.4f}")
    print(f"ratio (seed path / keval wall): {s / k:.1f}x")
    os.unlink(request_path)


if __name__ == "__main__":
    main()
