#!/usr/bin/env python3
"""keval's device metrics against ncu's, side by side in one run (issue 18).

For three cuda-type kernels (a memory-bound vector add, a compute-bound register-tiled FMA loop,
a shared-memory tiled SGEMM) this runs, through the keval CLI:

  plain    the job without device metrics;
  metrics  the same job with "device_metrics": true (CUPTI in the runner, after timing);
  ncu      the seed's way: the whole job re-run under `ncu --nvtx --nvtx-include
           "{job_id}_custom/"` with the same metrics (unsandboxed, as the seed ran, so that ncu's
           injection reaches the process that runs the kernel).

It prints, per kernel, keval's value and ncu's (the median over the launches ncu profiled) for
duration, DRAM bytes read and written and the throughput percentages, with the relative
difference, then the end-to-end seconds of each way and the ratio metrics/(plain + ncu re-run).

ncu runs with --clock-control none: keval never locks clocks, and the GPU machine's rules forbid
changing them. Needs a GPU, ncu on PATH (or --ncu) and a built keval (--keval).
"""

import argparse
import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

VECTOR_ADD = r"""
extern "C" __global__ void vector_add(const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + y[i];
}"""

FMA_LOOP = r"""
extern "C" __global__ void fma_loop(const float* seed, float* out, int iterations) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  float a[8];
  for (int k = 0; k < 8; ++k) a[k] = seed[i] + k;
  for (int it = 0; it < iterations; ++it)
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] = a[k] * 1.0001f + 0.9999f;
  float sum = 0;
  for (int k = 0; k < 8; ++k) sum += a[k];
  out[i] = sum;
}"""

SGEMM = r"""
#define TILE 32
extern "C" __global__ void sgemm(const float* a, const float* b, float* c, int n) {
  __shared__ float as[TILE][TILE], bs[TILE][TILE];
  const int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
  float sum = 0;
  for (int t = 0; t < n; t += TILE) {
    as[threadIdx.y][threadIdx.x] = a[row * n + t + threadIdx.x];
    bs[threadIdx.y][threadIdx.x] = b[(t + threadIdx.y) * n + col];
    __syncthreads();
    for (int k = 0; k < TILE; ++k) sum += as[threadIdx.y][k] * bs[k][threadIdx.x];
    __syncthreads();
  }
  c[row * n + col] = sum;
}"""


def tensor(name, shape, init=None, role=None):
    spec = {"shape": shape, "dtype": "float32"}
    if init:
        spec["init"] = {"kind": init}
    arg = {"name": name, "type": "tensor", "tensor_spec": spec}
    if role:
        arg["role"] = role
    return arg


def kernels():
    n = 1 << 24
    yield "vector_add", VECTOR_ADD, {
        "args": [tensor("x", [n], "randn"), tensor("y", [n], "randn"),
                 tensor("out", [n], role="output"), {"name": "n", "type": "int", "value": n}],
        "launch": {"grid": {"x": (n + 255) // 256}, "block": {"x": 256}}}
    threads = 528 * 256
    yield "fma_loop", FMA_LOOP, {
        "args": [tensor("seed", [threads], "uniform"), tensor("out", [threads], role="output"),
                 {"name": "iterations", "type": "int", "value": 4096}],
        "launch": {"grid": {"x": 528}, "block": {"x": 256}}}
    m = 1024
    yield "sgemm", SGEMM, {
        "args": [tensor("a", [m * m], "randn"), tensor("b", [m * m], "randn"),
                 tensor("c", [m * m], role="output"), {"name": "n", "type": "int", "value": m}],
        "launch": {"grid": {"x": m // 32, "y": m // 32}, "block": {"x": 32, "y": 32}}}


# keval's report key -> (section, key, ncu metric, scale from ncu's unit to keval's)
COMPARED = [
    ("duration (us)", "speed_of_light", "duration", "gpu__time_duration.sum", 1e-3),
    ("dram read (bytes)", "memory", "dram_bytes_read", "dram__bytes_read.sum", 1),
    ("dram written (bytes)", "memory", "dram_bytes_written", "dram__bytes_write.sum", 1),
    ("sm throughput (%)", "speed_of_light", "sm_throughput",
     "sm__throughput.avg.pct_of_peak_sustained_elapsed", 1),
    ("memory throughput (%)", "speed_of_light", "memory_throughput",
     "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", 1),
    ("dram throughput (%)", "speed_of_light", "dram_throughput",
     "dram__throughput.avg.pct_of_peak_sustained_elapsed", 1),
]


def run(cmd, env=None):
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return time.monotonic() - start, done


def ncu_rows(text):
    lines = [line for line in text.splitlines() if line.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if len(rows) < 2:
        return []
    header = rows[0]
    out = []
    for row in rows[1:]:
        if len(row) != len(header) or row[0] == "":  # the units row has an empty ID
            continue
        out.append(dict(zip(header, row)))
    return out


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keval", default="build-gpu/bin/keval")
    parser.add_argument("--ncu", default=shutil.which("ncu") or "ncu")
    parser.add_argument("--trials", type=int, default=100)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="keval-bench-metrics-")
    env = dict(os.environ, KEVAL_STATE_DIR=os.path.join(work, "state"))
    metrics = ",".join(m for *_, m, _ in COMPARED)
    rows, times, worst = [], [], 0.0
    for name, source, io_contract in kernels():
        base = {"kernel": {"source_code": source, "kernel_type": "cuda", "io": io_contract},
                "num_trials": args.trials, "timeout": 300}
        paths = {}
        for way, extra in (("plain", {}), ("metrics", {"device_metrics": True})):
            request = dict(base, job_id=f"bench-{name}-{way}", **extra)
            paths[way] = os.path.join(work, f"{name}-{way}.json")
            with open(paths[way], "w") as f:
                json.dump(request, f)
        plain_s, plain = run([args.keval, "evaluate", paths["plain"], "--json"], env)
        metrics_s, with_metrics = run([args.keval, "evaluate", paths["metrics"], "--json"], env)
        ncu_s, ncu = run([args.ncu, "--target-processes", "all", "--nvtx", "--nvtx-include",
                          f"bench-{name}-plain_custom/", "--clock-control", "none",
                          "--metrics", metrics, "--csv", "--page", "raw",
                          args.keval, "evaluate", paths["plain"], "--json", "--sandbox", "off"],
                         env)
        try:
            response = json.loads(with_metrics.stdout)
            report = response["kernel_exec_result"]["metadata"]["device_metrics"]
            kernel = report["kernels"][0]
        except (ValueError, KeyError, IndexError) as e:
            print(f"{name}: no device metrics from keval ({e}): {with_metrics.stdout[-2000:]}"
                  f"{with_metrics.stderr[-2000:]}", file=sys.stderr)
            return 1
        profiled = [r for r in ncu_rows(ncu.stdout) if name in r.get("Kernel Name", "")]
        times.append((name, plain_s, metrics_s, ncu_s, len(profiled), report.get("passes")))
        if not profiled:
            print(f"{name}: ncu profiled none of the job's launches:\n{ncu.stdout[-1500:]}"
                  f"{ncu.stderr[-1500:]}", file=sys.stderr)
            continue
        for label, section, key, metric, scale in COMPARED:
            ours = kernel.get(section, {}).get(key, {}).get("value")
            theirs = [number(r[metric]) for r in profiled if metric in r]
            theirs = [t * scale for t in theirs if t is not None]
            if ours is None or not theirs:
                rows.append((name, label, ours, None, None))
                continue
            median = statistics.median(theirs)
            diff = (ours - median) / median if median else (0.0 if ours == 0 else float("inf"))
            rows.append((name, label, ours, median, diff))
            if abs(median) > 1e-9 and not (label.startswith("dram") and median < 1e6):
                worst = max(worst, abs(diff))
        roofline = kernel.get("roofline", {})
        print(f"{name}: roofline bound {roofline.get('bound')}, intensity "
              f"{(roofline.get('arithmetic_intensity') or {}).get('value')} FLOP/byte")

    print(f"\n{'kernel':12} {'metric':22} {'keval':>14} {'ncu':>14} {'diff':>8}")
    for name, label, ours, theirs, diff in rows:
        fmt = lambda v: "-" if v is None else f"{v:14.6g}"
        print(f"{name:12} {label:22} {fmt(ours)} {fmt(theirs)} "
              f"{'-' if diff is None else f'{diff * 100:+7.1f}%'}")
    print(f"\nlargest relative difference (values above noise: DRAM bytes >= 1 MB): "
          f"{worst * 100:.1f}%")
    print(f"\n{'kernel':12} {'plain s':>8} {'metrics s':>10} {'ncu re-run s':>13} "
          f"{'seed way s':>11} {'ratio':>7} {'ncu kernels':>12} {'passes':>7}")
    for name, plain_s, metrics_s, ncu_s, count, passes in times:
        seed_way = plain_s + ncu_s
        print(f"{name:12} {plain_s:8.2f} {metrics_s:10.2f} {ncu_s:13.2f} {seed_way:11.2f} "
              f"{metrics_s / seed_way:7.3f} {count:12d} {passes!s:>7}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
