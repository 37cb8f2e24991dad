#!/usr/bin/env python3
"""keval's kernel times against the hardware's, side by side (issue 13, item 6).

For three cuda kernels of different sizes it prints, per kernel:
  e2e       the median of `keval evaluate`'s timed samples (runtime_stats: median, method): the
            end-to-end time between the events around a sample;
  kernel    the median of keval's kernel time (metadata.profiling.device_work.custom.kernel_time:
            the time the process's device work ran in each sample, from CUPTI's trace);
  gpu       the median of keval's `hardware_time` ("hardware_time": true; device_work.custom.
            hardware_time): gpu__time_duration.sum read by CUPTI's range profiler in the runner,
            in runs of their own after the samples, each after an L2 flush, unreplayed: ncu's
            metric, taken as ncu takes it;
  hw        keval's device metric `duration` ("device_metrics": ["speed_of_light"]): the median
            of 5 such runs of their own after the device metrics' replays
            (docs/device_metrics.md), as the device metrics report it;
  ncu       the median of Nsight Compute's gpu__time_duration.sum over --launches launches of the
            same source (cupy.RawKernel, the same grid, block and sizes) in a plain process, the
            clocks left as they are (--clock-control none);
  ratios    e2e / ncu, kernel / ncu, gpu / ncu and hw / ncu: 1.00 is the hardware's own time.
All of keval's columns come from one `keval evaluate` per kernel. Then KernelBench's add example
(examples/torch_cuda_kernelbench_add.json) through `keval compare`: both sides' methods, medians
and hardware times.

Needs a CUDA device, `ncu` on PATH (or --ncu) and cupy. Never changes clocks.
usage: bench/timing_fidelity.py [--keval build/bin/keval] [--launches 20] [--json FILE]
"""
import argparse
import csv
import io
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

VECTOR_ADD = r"""
extern "C" __global__ void k(const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + y[i];
}"""
POLYNOMIAL = r"""
extern "C" __global__ void k(const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    float acc = y[i];
    for (int j = 0; j < 16; ++j) acc = acc * v + 0.5f;
    out[i] = acc;
  }
}"""
# name, source, elements: about 6 us, 60 us and 500 us on an H100
KERNELS = [
    ("vector_add_1M", VECTOR_ADD, 1 << 20),
    ("vector_add_16M", VECTOR_ADD, 1 << 24),
    ("polynomial_64M", POLYNOMIAL, 1 << 26),
]
BLOCK = 256

NCU_SIDE = r"""
import sys, cupy as cp
n = int(sys.argv[1]); launches = int(sys.argv[3])
kernel = cp.RawKernel(open(sys.argv[2]).read(), "k")
x = cp.random.standard_normal(n, dtype=cp.float32); y = cp.random.standard_normal(n, dtype=cp.float32)
out = cp.empty_like(x)
for _ in range(launches):
    kernel(((n + 255) // 256,), (256,), (x, y, out, cp.int32(n)))
cp.cuda.Device().synchronize()
"""


def keval_request(source, n):
    tensor = lambda name, role: {"name": name, "type": "tensor", "role": role, "tensor_spec": {
        "shape": [n], "dtype": "float32", **({"init": {"kind": "randn"}} if role == "input" else {})}}
    return {"kernel": {"source_code": source, "kernel_type": "cuda", "metadata": {"kernel_name": "k"},
                       "io": {"args": [tensor("x", "input"), tensor("y", "input"),
                                       tensor("out", "output"), {"name": "n", "type": "int", "value": n}],
                              "launch": {"grid": {"x": (n + BLOCK - 1) // BLOCK}, "block": {"x": BLOCK}}}},
            "num_trials": 100, "timeout": 300}


def run_keval(keval, mode, request, tmp):
    path = Path(tmp) / f"{mode}.json"
    path.write_text(json.dumps(request))
    r = subprocess.run([keval, mode, str(path)], capture_output=True, text=True, timeout=600)
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        sys.exit(f"timing_fidelity: keval {mode} printed no result (exit {r.returncode}):\n{r.stderr[-3000:]}")


def metric_duration_us(result):
    """From a result with device metrics: the speed_of_light duration, in us."""
    metrics = result.get("kernel_exec_result", {}).get("metadata", {}).get("device_metrics", {})
    try:
        duration = metrics["kernels"][0]["speed_of_light"]["duration"]
    except (KeyError, IndexError):
        sys.exit(f"timing_fidelity: keval reported no device metrics: {json.dumps(metrics)[:2000]}")
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3}
    if duration.get("unit") not in scale:
        sys.exit(f"timing_fidelity: unexpected duration unit {duration!r}")
    return duration["value"] * scale[duration["unit"]]


def hardware_us(work):
    """The median of a side's hardware_time, in us (exits with the reason when there is none)."""
    hardware = work.get("hardware_time", {})
    if not hardware.get("available"):
        sys.exit(f"timing_fidelity: keval measured no hardware time: {json.dumps(hardware)[:2000]}")
    return hardware["median"] * 1e3


def ncu_median_us(ncu, source, n, launches, tmp):
    src = Path(tmp) / "k.cu"
    src.write_text(source)
    side = Path(tmp) / "side.py"
    side.write_text(NCU_SIDE)
    # --clock-control none: ncu would otherwise lock the GPU to its base clock while it measures
    # (on an H100 about 20 % below the boost clock keval's samples run at), and clocks are never
    # to be changed on a shared machine.
    r = subprocess.run([ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum",
                        "--csv", "--print-units", "base",
                        sys.executable, str(side), str(n), str(src), str(launches)],
                       capture_output=True, text=True, timeout=600)
    rows = [row for row in csv.DictReader(io.StringIO(r.stdout[r.stdout.find('"ID"'):]))
            if row.get("Metric Name") == "gpu__time_duration.sum" and row.get("Kernel Name", "").startswith("k")]
    if not rows:
        sys.exit(f"timing_fidelity: ncu measured no kernel (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3}
    values = [float(row["Metric Value"].replace(",", "")) * scale.get(row.get("Metric Unit", "nsecond"), 1e-3)
              for row in rows]
    return statistics.median(values), len(values)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keval", default=str(ROOT / "build/bin/keval"))
    parser.add_argument("--ncu", default=shutil.which("ncu") or "/usr/local/cuda/bin/ncu")
    parser.add_argument("--launches", type=int, default=20)
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    if not Path(args.ncu).exists():
        sys.exit(f"timing_fidelity: no ncu at {args.ncu} (--ncu PATH)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="keval-fidelity-") as tmp:
        print(f"{'kernel':16s} {'elements':>10s} {'e2e us':>9s} {'method':>11s} {'kernel us':>10s} "
              f"{'gpu us':>8s} {'hw us':>8s} {'ncu us':>9s} {'e2e/ncu':>8s} "
              f"{'kern/ncu':>9s} {'gpu/ncu':>8s} {'hw/ncu':>7s}")
        for name, source, n in KERNELS:
            request = dict(keval_request(source, n), hardware_time=True,
                           device_metrics=["speed_of_light"])
            result = run_keval(args.keval, "evaluate", request, tmp)
            stats = result.get("kernel_exec_result", {}).get("runtime_stats", {})
            if "median" not in stats:
                sys.exit(f"timing_fidelity: {name}: keval reported no time: {json.dumps(result)[:2000]}")
            keval_us = stats["median"] * 1e3
            work = (result["kernel_exec_result"].get("metadata", {}).get("profiling", {})
                    .get("device_work", {}).get("custom", {}))
            kernel_us = work["kernel_time"]["median"] * 1e3 if "kernel_time" in work else float("nan")
            gpu_us = hardware_us(work)
            hw_us = metric_duration_us(result)
            ncu_us, measured = ncu_median_us(args.ncu, source, n, args.launches, tmp)
            row = {"kernel": name, "elements": n, "keval_us": keval_us, "keval_method": stats.get("method"),
                   "keval_kernel_us": kernel_us, "untraced": work.get("reason"),
                   "ncu_us": ncu_us, "ncu_launches": measured, "ratio": keval_us / ncu_us,
                   "kernel_ratio": kernel_us / ncu_us, "keval_gpu_us": gpu_us,
                   "gpu_ratio": gpu_us / ncu_us, "hardware_time": work.get("hardware_time"),
                   "keval_hw_us": hw_us, "hw_ratio": hw_us / ncu_us}
            rows.append(row)
            print(f"{name:16s} {n:10d} {keval_us:9.2f} {row['keval_method']:>11s} {kernel_us:10.2f} "
                  f"{gpu_us:8.2f} {hw_us:8.2f} {ncu_us:9.2f} {row['ratio']:8.3f} "
                  f"{row['kernel_ratio']:9.3f} {row['gpu_ratio']:8.3f} {row['hw_ratio']:7.3f}"
                  + (f"  (not traced: {work['reason']})" if "reason" in work else ""))
        # What tracing costs the end-to-end time: the smallest kernel again, untraced.
        name, source, n = KERNELS[0]
        traced_us = rows[0]["keval_us"]
        request = dict(keval_request(source, n), device_trace=False)
        untraced = run_keval(args.keval, "evaluate", request, tmp)["kernel_exec_result"]["runtime_stats"]
        untraced_us = untraced["median"] * 1e3
        print(f"\n{name} end to end: traced {traced_us:.2f} us, untraced (device_trace: false) "
              f"{untraced_us:.2f} us, traced / untraced {traced_us / untraced_us:.3f}")
        rows.append({"kernel": name, "e2e_traced_us": traced_us, "e2e_untraced_us": untraced_us})
        example = json.loads((ROOT / "examples/torch_cuda_kernelbench_add.json").read_text())
        result = run_keval(args.keval, "compare", dict(example, hardware_time=True), tmp)
        ref = result.get("ref_runtime") or {}
        cand = result.get("kernel_exec_result", {}).get("runtime_stats", {})
        work = (result.get("kernel_exec_result", {}).get("metadata", {}).get("profiling", {})
                .get("device_work", {}))
        kernel_median = lambda side: work.get(side, {}).get("kernel_time", {}).get("median", float("nan")) * 1e3
        print(f"\nKernelBench add (torch_cuda): reference {ref.get('method')} median "
              f"{ref.get('median', float('nan')) * 1e3:.2f} us (kernel {kernel_median('ref'):.2f} us); "
              f"candidate {cand.get('method')} median {cand.get('median', float('nan')) * 1e3:.2f} us "
              f"(kernel {kernel_median('custom'):.2f} us); speedup {result.get('speedup')}, "
              f"kernel speedup {work.get('kernel_speedup')}")
        hardware = lambda side: work.get(side, {}).get("hardware_time", {})
        print(f"KernelBench add hardware time (gpu__time_duration): reference "
              f"{hardware('ref').get('median', float('nan')) * 1e3:.2f} us, candidate "
              f"{hardware('custom').get('median', float('nan')) * 1e3:.2f} us "
              f"({hardware('custom').get('kernels')} kernel(s) a run); hardware speedup "
              f"{work.get('hardware_speedup')}"
              + "".join(f"; {side}: {hardware(side)['reason']}" for side in ("ref", "custom")
                        if "reason" in hardware(side)))
        rows.append({"kernel": "kernelbench_add", "reference": ref, "candidate": cand,
                     "speedup": result.get("speedup"), "device_work": work})
        untraced = run_keval(args.keval, "compare", dict(example, device_trace=False), tmp)
        u_ref = untraced.get("ref_runtime") or {}
        u_cand = untraced.get("kernel_exec_result", {}).get("runtime_stats", {})
        print(f"KernelBench add untraced: reference {u_ref.get('method')} median "
              f"{u_ref.get('median', float('nan')) * 1e3:.2f} us; candidate {u_cand.get('method')} median "
              f"{u_cand.get('median', float('nan')) * 1e3:.2f} us; speedup {untraced.get('speedup')}")
        rows.append({"kernel": "kernelbench_add_untraced", "reference": u_ref, "candidate": u_cand,
                     "speedup": untraced.get("speedup")})
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
