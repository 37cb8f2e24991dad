#!/usr/bin/env python3
"""keval's torch_cuda type vs. KernelBench's method on its elementwise-add example.

The same compare (reference Model: a + b; candidate: KernelBench's ModelNew with load_inline,
kernel and host wrapper in cuda_sources) is evaluated:
  keval cold        `keval compare` with an empty cache (KEVAL_CACHE_DIR fresh);
  keval new kernel  a kernel never seen before (a unique comment changes the cache key), the
                    cache holding what earlier builds left (no precompiled header: only
                    `keval serve` prepares one);
  keval warm        the first request again: the cached build is loaded;
  load_inline cold  a fresh Python process doing what KernelBench's eval does (import torch,
                    exec the sources so load_inline builds with torch's ninja build, Model and
                    ModelNew seeded alike, 5 correctness trials, 100 timed trials with CUDA
                    events) with a fresh TORCH_EXTENSIONS_DIR;
  load_inline warm  the same with the build directory left from the cold run.
  daemon new kernel / daemon warm
                    the same compares sent to `keval serve` (HTTP over its Unix socket), whose
                    prestarted workers have already started Python, imported torch and
                    prepared the precompiled torch header (each job still gets a fresh
                    process); each request waits until /stats shows a prestarted worker ready,
                    as a daemon with --warm-workers sized to its load has one.
                    The daemon keeps prestarted workers per set of prewarming plugins, learned
                    from traffic: one unmeasured compare first teaches it torch + torch_cuda
                    (its time is printed as "daemon first job").
Each CLI and load_inline run is a fresh process; the script prints median wall times and ratios.

usage: bench/torch_cuda_compile.py [--keval build/bin/keval] [--python python3] [--rounds 3]
"""
import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

REFERENCE = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a + b

def get_inputs():
    return [torch.randn(4096, 1024).cuda(), torch.randn(4096, 1024).cuda()]

def get_init_inputs():
    return []
"""

# KernelBench's example ModelNew (src/prompts/model_new_ex_add.py), with a tag comment.
CANDIDATE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

elementwise_add_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>
// TAG
__global__ void elementwise_add_kernel(const float* a, const float* b, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = a[idx] + b[idx];
    }
}

torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b) {
    auto size = a.numel();
    auto out = torch::zeros_like(a);

    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;

    elementwise_add_kernel<<<num_blocks, block_size>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), size);

    return out;
}
"""

elementwise_add_cpp_source = (
    "torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b);"
)

elementwise_add = load_inline(
    name="elementwise_add",
    cpp_sources=elementwise_add_cpp_source,
    cuda_sources=elementwise_add_source,
    functions=["elementwise_add_cuda"],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.elementwise_add = elementwise_add

    def forward(self, a, b):
        return self.elementwise_add.elementwise_add_cuda(a, b)
'''

# What KernelBench's eval_kernel_against_ref does, in one fresh process.
KERNELBENCH_PATH = r"""
import sys, torch
ref_src, custom_src = open(sys.argv[1]).read(), open(sys.argv[2]).read()
ref, custom = {}, {}
exec(ref_src, ref)
exec(custom_src, custom)  # load_inline builds here
def seeded(seed):
    torch.manual_seed(seed); torch.cuda.manual_seed(seed)
seeded(42); init = ref["get_init_inputs"]()
seeded(42); model = ref["Model"](*init).cuda()
seeded(42); model_new = custom["ModelNew"](*init).cuda()
torch.cuda.synchronize()
with torch.no_grad():
    for trial in range(5):
        seeded(trial); inputs = [x.cuda() for x in ref["get_inputs"]()]
        assert torch.allclose(model(*inputs), model_new(*inputs), atol=1e-2, rtol=1e-2)
    inputs = [x.cuda() for x in ref["get_inputs"]()]
    times = []
    for _ in range(100):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); model_new(*inputs); e.record(); torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
times.sort(); print(times[50])
"""


LOG_DIR = None  # --log-dir: every run's stderr is kept there


def timed(cmd, env, label="run"):
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - start
    if LOG_DIR:
        with open(os.path.join(LOG_DIR, f"{label}-{uuid.uuid4().hex[:6]}.stderr"), "w") as f:
            f.write(f"$ {' '.join(cmd)}\n{elapsed:.3f} s\n{done.stderr}")
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd[:3])}...\n{done.stdout[-4000:]}\n"
                 f"{done.stderr[-4000:]}")
    return elapsed, done.stdout


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=900):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def http_call(socket_path, method, target, body=None):
    connection = UnixHTTPConnection(socket_path)
    connection.request(method, target, body=body,
                       headers={"Content-Type": "application/json"} if body else {})
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, data


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keval", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                    "bin", "keval"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rounds", type=int, default=3, help="runs of each warm measurement")
    ap.add_argument("--ready-timeout", type=float, default=300.0,
                    help="seconds a daemon request waits for a prestarted worker to be ready")
    ap.add_argument("--log-dir", help="keep each run's stderr here (with KEVAL_LOG_LEVEL=debug, "
                                      "where a keval evaluation spent its time)")
    args = ap.parse_args()
    global LOG_DIR
    LOG_DIR = args.log_dir
    if LOG_DIR:
        os.makedirs(LOG_DIR, exist_ok=True)

    work = tempfile.mkdtemp(prefix="keval-torch-cuda-bench-")
    cache = os.path.join(work, "keval-cache")
    extensions = os.path.join(work, "torch-extensions")

    def request(tag):
        path = os.path.join(work, f"request-{tag}.json")
        with open(path, "w") as f:
            json.dump({"ref_kernel": {"source_code": REFERENCE, "kernel_type": "torch"},
                       "custom_kernel": {"source_code": CANDIDATE.replace("TAG", tag),
                                         "kernel_type": "torch_cuda"},
                       "num_trials": 100, "timeout": 300}, f)
        return path

    def keval(path):
        env = {**os.environ, "KEVAL_CACHE_DIR": cache}
        wall, out = timed([args.keval, "compare", path], env, "keval")
        result = json.loads(out)["kernel_exec_result"]
        assert result["compiled"] and result["correctness"], result
        build = result["metadata"]["compile"]["custom"]["info"]["extensions"][0]
        return wall, build

    def kernelbench(tag, fresh):
        if fresh:
            shutil.rmtree(extensions, ignore_errors=True)
        ref, custom = os.path.join(work, "ref.py"), os.path.join(work, "custom.py")
        with open(ref, "w") as f:
            f.write(REFERENCE)
        with open(custom, "w") as f:
            f.write(CANDIDATE.replace("TAG", tag))
        env = {**os.environ, "TORCH_EXTENSIONS_DIR": extensions}
        return timed([args.python, "-c", KERNELBENCH_PATH, ref, custom], env, "load_inline")[0]

    rows = {}
    first = request("first")
    wall, build = keval(first)
    rows["keval cold"] = [wall]
    print(f"keval cold: {wall:.2f} s (build {build['seconds']} s, {build['cache']}, steps "
          f"{build.get('steps')})", flush=True)
    rows["keval new kernel"] = []
    for r in range(args.rounds):
        wall, build = keval(request(uuid.uuid4().hex))
        rows["keval new kernel"].append(wall)
        print(f"keval new kernel: {wall:.2f} s (build {build['seconds']} s, {build['cache']})",
              flush=True)
    rows["keval warm"] = []
    for r in range(args.rounds):
        wall, build = keval(first)
        rows["keval warm"].append(wall)
        print(f"keval warm: {wall:.2f} s (load {build['seconds']} s, {build['cache']})",
              flush=True)
    wall = kernelbench("first", fresh=True)
    rows["load_inline cold"] = [wall]
    print(f"load_inline cold: {wall:.2f} s", flush=True)
    rows["load_inline warm"] = []
    for r in range(args.rounds):
        rows["load_inline warm"].append(kernelbench("first", fresh=False))
        print(f"load_inline warm: {rows['load_inline warm'][-1]:.2f} s", flush=True)

    # The daemon: prestarted workers, same cache.
    socket_path = os.path.join(work, "keval.sock")
    daemon_log = open(os.path.join(LOG_DIR or work, "daemon.log"), "w")
    daemon = subprocess.Popen([args.keval, "serve", "--socket", socket_path, "--state-dir",
                               os.path.join(work, "daemon"), "--warm-workers", "2"],
                              env={**os.environ, "KEVAL_CACHE_DIR": cache},
                              stdout=daemon_log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                if http_call(socket_path, "GET", "/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)

        def wait_for_a_ready_worker():
            start = time.perf_counter()
            while time.perf_counter() - start < args.ready_timeout:
                stats = json.loads(http_call(socket_path, "GET", "/stats")[1])
                if stats["warm_workers"]["ready"] > 0:
                    return time.perf_counter() - start
                time.sleep(0.2)
            raise SystemExit(f"no prestarted worker ready after {args.ready_timeout} s")

        def daemon_compare(path, wait=True):
            with open(path, "rb") as f:
                body = f.read()
            if wait:
                waited = wait_for_a_ready_worker()
                if waited > 1:
                    print(f"  (waited {waited:.1f} s for a prestarted worker)", flush=True)
            start = time.perf_counter()
            status, data = http_call(socket_path, "POST", "/compare", body)
            wall = time.perf_counter() - start
            result = json.loads(data)["kernel_exec_result"]
            assert status == 200 and result["compiled"] and result["correctness"], data[:2000]
            return wall, result["metadata"]["compile"]["custom"]["info"]["extensions"][0]

        wall, build = daemon_compare(first, wait=False)  # teaches the daemon this prewarm set
        print(f"daemon first job (not a row): {wall:.2f} s ({build['cache']})", flush=True)
        rows["daemon new kernel"] = []
        for r in range(args.rounds):
            wall, build = daemon_compare(request(uuid.uuid4().hex))
            rows["daemon new kernel"].append(wall)
            print(f"daemon new kernel: {wall:.2f} s (build {build['seconds']} s, "
                  f"{build['cache']})", flush=True)
        rows["daemon warm"] = []
        for r in range(max(args.rounds, 3)):
            wall, build = daemon_compare(first)
            rows["daemon warm"].append(wall)
            print(f"daemon warm: {wall:.3f} s (load {build['seconds']} s, {build['cache']})",
                  flush=True)
    finally:
        daemon.terminate()
        daemon.wait(60)
        daemon_log.close()

    medians = {name: statistics.median(walls) for name, walls in rows.items()}
    print(f"\n{'path':<18} {'runs':>4} {'median wall s':>14}")
    for name, median in medians.items():
        print(f"{name:<18} {len(rows[name]):>4} {median:>14.3f}")
    cold = medians["load_inline cold"]
    print(f"load_inline cold / keval cold:       {cold / medians['keval cold']:.1f}x")
    print(f"load_inline cold / keval new kernel: {cold / medians['keval new kernel']:.1f}x")
    print(f"load_inline warm / keval warm:       "
          f"{medians['load_inline warm'] / medians['keval warm']:.1f}x")
    print(f"load_inline cold / daemon new kernel: "
          f"{cold / medians['daemon new kernel']:.1f}x")
    print(f"load_inline warm / daemon warm:       "
          f"{medians['load_inline warm'] / medians['daemon warm']:.1f}x "
          f"(daemon warm median {medians['daemon warm']:.3f} s)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
