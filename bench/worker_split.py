#!/usr/bin/env python3
"""What running user code in runner processes costs: two keval builds side by side.

`--before` is a build of the tree before the split (the kernel ran inside keval-worker), `--after`
one with it (keval-worker spawns a runner per side and never runs user code). Each row alternates
the two builds, in fresh processes, so drift hits both alike:

  cuda vector add (CLI)       `keval evaluate examples/cuda_vector_add.json`, end to end
  level-1 baseline (CLI)      `keval compare` of a KernelBench-style level-1 problem (a 2048^2
                              matmul) against itself (ModelNew = Model): wall, and the speedup
                              each build reports (a fair harness says 1.00)
  torch_cuda warm (daemon)    examples/torch_cuda_kernelbench_add.json through `keval serve`
                              with prestarted workers, its extension already in the cache

usage: bench/worker_split.py --before BUILD --after BUILD [--rounds 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_cuda_compile import http_call  # noqa: E402  (HTTP over the daemon's Unix socket)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LEVEL1 = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)

N = 2048

def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]

def get_init_inputs():
    return []
'''


def level1_request(path):
    request = {
        "ref_kernel": {"source_code": LEVEL1, "kernel_type": "torch"},
        "custom_kernel": {"source_code": LEVEL1 + "\nModelNew = Model\n", "kernel_type": "torch"},
        "num_trials": 100,
    }
    with open(path, "w") as f:
        json.dump(request, f)


def cli(build, verb, request, state):
    start = time.perf_counter()
    done = subprocess.run([os.path.join(build, "bin", "keval"), verb, request, "--state-dir", state],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{build}: keval {verb} {request} exited {done.returncode}\n{done.stdout[-3000:]}"
                 f"\n{done.stderr[-3000:]}")
    return wall, json.loads(done.stdout)


class Daemon:
    def __init__(self, build, work, name):
        self.socket = os.path.join(work, f"{name}.sock")
        self.log = open(os.path.join(work, f"{name}.log"), "w")
        self.process = subprocess.Popen(
            [os.path.join(build, "bin", "keval"), "serve", "--socket", self.socket, "--state-dir",
             os.path.join(work, f"{name}-state"), "--warm-workers", "2"],
            env={**os.environ, "KEVAL_CACHE_DIR": os.path.join(work, "cache")},
            stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(600):
            try:
                if http_call(self.socket, "GET", "/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        sys.exit(f"{name}: keval serve did not come up")

    def wait_for_a_ready_worker(self, limit=120):
        start = time.perf_counter()
        while time.perf_counter() - start < limit:
            stats = json.loads(http_call(self.socket, "GET", "/stats")[1])
            if stats["warm_workers"]["ready"] > 0:
                return
            time.sleep(0.2)
        sys.exit("no prestarted worker became ready")

    def compare(self, body, wait=True):
        if wait:
            self.wait_for_a_ready_worker()
        start = time.perf_counter()
        status, data = http_call(self.socket, "POST", "/compare", body)
        wall = time.perf_counter() - start
        result = json.loads(data)
        ok = status == 200 and result["kernel_exec_result"]["correctness"]
        if not ok:
            sys.exit(f"daemon compare failed ({status}): {data[:3000]}")
        return wall, result

    def stop(self):
        self.process.terminate()
        self.process.wait(60)
        self.log.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="build directory of the tree before")
    parser.add_argument("--after", required=True, help="build directory with the split")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    builds = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    work = tempfile.mkdtemp(prefix="keval-bench-split-")
    # mkdtemp makes it 0700: as root, the job uid (the sandbox's user layer) must walk through it.
    os.chmod(work, 0o755)
    level1 = os.path.join(work, "level1.json")
    level1_request(level1)
    vector_add = os.path.join(ROOT, "examples", "cuda_vector_add.json")
    torch_cuda = os.path.join(ROOT, "examples", "torch_cuda_kernelbench_add.json")

    walls = {}  # (row, build) -> [s]
    speedups = {"before": [], "after": []}

    def add(row, name, wall):
        walls.setdefault((row, name), []).append(wall)
        print(f"{row:<26} {name:<6} {wall:8.3f} s", flush=True)

    for r in range(args.rounds):
        order = list(builds.items()) if r % 2 == 0 else list(reversed(builds.items()))
        for name, build in order:
            wall, _ = cli(build, "evaluate", vector_add, os.path.join(work, name + "-cli"))
            add("cuda vector add (CLI)", name, wall)
        for name, build in order:
            wall, result = cli(build, "compare", level1, os.path.join(work, name + "-cli"))
            add("level-1 baseline (CLI)", name, wall)
            speedups[name].append(result["speedup"])

    with open(torch_cuda, "rb") as f:
        body = f.read()
    for name, build in builds.items():
        daemon = Daemon(build, work, name)
        try:
            daemon.compare(body, wait=False)  # builds the extension, teaches the prewarm set
            for _ in range(max(args.rounds, 3)):
                wall, _ = daemon.compare(body)
                add("torch_cuda warm (daemon)", name, wall)
        finally:
            daemon.stop()

    print(f"\n{'row':<26} {'before s':>9} {'after s':>9} {'after-before':>13} {'ratio':>6}")
    for row in ("cuda vector add (CLI)", "level-1 baseline (CLI)", "torch_cuda warm (daemon)"):
        before = statistics.median(walls[(row, "before")])
        after = statistics.median(walls[(row, "after")])
        print(f"{row:<26} {before:9.3f} {after:9.3f} {after - before:+13.3f} {after / before:6.2f}")
    for name in builds:
        s = speedups[name]
        print(f"level-1 baseline speedup ({name}): median {statistics.median(s):.3f} "
              f"(min {min(s):.3f}, max {max(s):.3f}, {len(s)} runs)")


if __name__ == "__main__":
    main()
