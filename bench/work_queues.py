#!/usr/bin/env python3
"""What one hardware work queue per context saves (worker/engine/work_queues.hpp), side by side.

keval opens its trusted worker's context, and those of runners whose kernel type declares
KEVAL_CAP_ONE_STREAM (the cuda type), with one hardware work queue (CUDA_DEVICE_MAX_CONNECTIONS=1):
the driver makes and ends such a context in about half the time, and serialises both across the
machine's processes. KEVAL_ONE_WORK_QUEUE=0 in keval's environment leaves every process at the
driver's default: keval as it was. (Not CUDA_DEVICE_MAX_CONNECTIONS=8, which keval would keep as an
operator's number: an explicit 8 is not what the driver does by default.) Each row runs both
settings, alternating, in one run:

  cuda evaluate (CLI)      `keval evaluate examples/cuda_vector_add.json`, end to end, fresh
                           processes each time
  torch compare (CLI)      `keval compare examples/torch_kernelbench_compare.json` (only the trusted
                           worker's queues change: torch runners keep the default)
  cuda evaluate (daemon)   --jobs sequential jobs through a warm `keval serve` of each setting:
  cuda compare (daemon)    median and p95 latency, and the mean of /stats' stages

It also checks that the result's verdict and speedup do not move. Needs a CUDA device.
usage: bench/work_queues.py [--keval build/bin/keval] [--rounds 5] [--jobs 20]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
import keval  # noqa: E402

SETTINGS = [("one queue", None), ("driver default", "0")]


def with_setting(value):
    """keval's environment for a setting (KEVAL_ONE_WORK_QUEUE's value, None: unset)."""
    env = dict(os.environ)
    env.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    env.pop("KEVAL_ONE_WORK_QUEUE", None)
    if value is not None:
        env["KEVAL_ONE_WORK_QUEUE"] = value
    return env


def cli_row(args, mode, example):
    times = {label: [] for label, _ in SETTINGS}
    speedups = {label: [] for label, _ in SETTINGS}
    for _ in range(args.rounds):
        for label, value in SETTINGS:
            t = time.perf_counter()
            r = subprocess.run([args.keval, mode, str(ROOT / "examples" / example)],
                               capture_output=True, text=True, env=with_setting(value), timeout=600)
            times[label].append(time.perf_counter() - t)
            result = json.loads(r.stdout)
            if not result.get("kernel_exec_result", {}).get("correctness"):
                sys.exit(f"work_queues: {example} was not correct with {label}:\n{r.stdout[:2000]}")
            if result.get("speedup") is not None:
                speedups[label].append(result["speedup"])
    return times, speedups


def daemon_row(args, mode, example):
    request = json.loads((ROOT / "examples" / example).read_text())
    latencies, stages = {}, {}
    for label, value in SETTINGS:
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(with_setting(value))
        try:  # the daemon inherits this environment
            client = keval.Client.local(keval_bin=args.keval, timeout=120,
                                        state_dir=tempfile.mkdtemp(prefix="kv-wq-", dir="/tmp"))
        finally:
            os.environ.clear()
            os.environ.update(saved)
        try:
            call = client.compare if mode == "compare" else client.evaluate
            call(request)  # warms the daemon's pool for this kernel type
            before = client.stats()
            times = []
            for _ in range(args.jobs):
                t = time.perf_counter()
                r = call(request)
                times.append(time.perf_counter() - t)
                if not r.raw.get("kernel_exec_result", {}).get("correctness"):
                    sys.exit(f"work_queues: {example} was not correct with {label}")
            after = client.stats()
        finally:
            client.close()
        latencies[label] = times
        stages[label] = stage_means(before, after)
    return latencies, stages


def stage_means(before, after):
    """The mean ms of each stage (/stats time_breakdown) over the jobs between two readings."""
    def stages(stats):
        return {s["stage"]: s for s in stats.get("time_breakdown", {}).get("stages", [])}
    b, a = stages(before), stages(after)
    means = {}
    for name, stage in a.items():
        jobs = stage["jobs"] - b.get(name, {}).get("jobs", 0)
        if jobs > 0:
            means[name] = (stage["total_s"] - b.get(name, {}).get("total_s", 0)) * 1000 / jobs
    return means


def p95(values):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keval", default=str(ROOT / "build/bin/keval"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20)
    args = parser.parse_args()
    (one, _), (default, _) = SETTINGS
    print(f"{'row':24s} {'one queue':>12s} {'default':>12s} {'ratio':>7s}   speedups (one / default)")
    for name, mode, example in [("cuda evaluate (CLI)", "evaluate", "cuda_vector_add.json"),
                                ("torch compare (CLI)", "compare", "torch_kernelbench_compare.json")]:
        times, speedups = cli_row(args, mode, example)
        a, b = statistics.median(times[one]), statistics.median(times[default])
        s = (f"{statistics.median(speedups[one]):.3f} / {statistics.median(speedups[default]):.3f}"
             if speedups[one] else "-")
        print(f"{name:24s} {a:10.3f} s {b:10.3f} s {a / b:7.3f}   {s}")
    for name, mode, example in [("cuda evaluate (daemon)", "evaluate", "cuda_vector_add.json"),
                                ("cuda compare (daemon)", "compare", "cuda_vector_add_compare.json")]:
        latencies, stages = daemon_row(args, mode, example)
        a, b = statistics.median(latencies[one]), statistics.median(latencies[default])
        print(f"{name:24s} {a:10.3f} s {b:10.3f} s {a / b:7.3f}   p95 {p95(latencies[one]):.3f} / "
              f"{p95(latencies[default]):.3f} s")
        for label, means in stages.items():
            print(f"    {label:22s} " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(means.items())))


if __name__ == "__main__":
    main()
