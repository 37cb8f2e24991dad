#!/usr/bin/env python3
"""Throughput on one host: a mixed batch through `keval serve` against the same batch run the way
KernelBench's scripts run it, a fresh process per problem, one after another (issue 17).

The batch (--repeat times over, shuffled with a fixed seed):
  KernelBench-style baselines of three sizes, each problem against itself (`ModelNew = Model`):
    small    y = relu(x) on 2^20 elements
    medium   a 2048^3 matmul
    large    GELU on 2^26 elements
  examples/torch_kernelbench_compare.json   (a Linear + GELU model against a rewritten one)
  examples/torch_cuda_kernelbench_add.json  (KernelBench's load_inline add)
  examples/cuda_vector_add_compare.json     (cuda type)
  examples/triton_compare_torch.json        (triton type)
Only with --only (not in the mixed batch): examples/cuda_vector_add.json, a cuda kernel evaluated
alone (one side: validation and timing, no reference), the kind of job issue 17's 0.1 s is about.

keval:    one daemon (prestarted workers as configured), --clients requests in flight through
          keval.Client; jobs/min over the batch, each job's latency, the GPU's busy fraction,
          /stats time_breakdown, each problem's validation and profiling time and where the
          profiling phase's time went (sampling.time_ms). With --max-noise P, the batch again
          with "max_noise": P in every request (sampling stops once the mean is that stable:
          the client's choice, so a separate row).
versus:   with --versus ARGS, the keval batch again through a daemon started with ARGS as well
          (--versus "--warm-workers-max 6"), side by side, with the ratio of the two rates; with
          --versus-keval PATH, through another build's keval (two build directories: a change
          that no daemon option switches, measured in one run on one machine).
sequence: with --warm-sequence N, N back-to-back compares of --sequence-request (default
          examples/torch_cuda_kernelbench_add.json) from one client through a daemon of its own,
          after one unmeasured cold compare (a pool that does not refill ahead of demand shows as
          a maximum far above the median; issue 17 asks for the maximum within 2x the median at
          N = 20). The default's candidate is a load_inline extension, built once by the
          trusted worker and reused by every later job; examples/torch_kernelbench_compare.json
          has no build.
fresh:    each job in a process of its own, sequentially: a KernelBench-style problem in a fresh
          Python doing what KernelBench's eval_kernel_against_ref does (import torch, build both
          models seeded alike, 5 correctness trials, 100 timed trials with CUDA events; the
          load_inline build directory kept between runs, as KernelBench's cache does); a cuda or
          triton job, which KernelBench's harness cannot run, as `keval compare` (a fresh keval
          process per job).

usage: bench/throughput.py [--keval build/bin/keval] [--python python3] [--repeat 2] [--only P]...
                           [--clients 8] [--max-noise P]... [--versus ARGS]...
                           [--versus-keval PATH]...
                           [--warm-sequence N [--sequence-only] [--sequence-max-noise P]]
                           [--json FILE]
                           [--skip-fresh] [--responses DIR]
"""
import argparse
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
import keval  # noqa: E402  (the repository's package)

SIZED = {
    "small_relu": ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
                   "    def forward(self, x):\n        return torch.relu(x)\n\n"
                   "def get_inputs():\n    return [torch.randn(1 << 20)]\n\n"
                   "def get_init_inputs():\n    return []\n"),
    "medium_matmul": ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
                      "    def forward(self, a, b):\n        return a @ b\n\n"
                      "def get_inputs():\n    return [torch.randn(2048, 2048), torch.randn(2048, 2048)]\n\n"
                      "def get_init_inputs():\n    return []\n"),
    "large_gelu": ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
                   "    def forward(self, x):\n        return torch.nn.functional.gelu(x)\n\n"
                   "def get_inputs():\n    return [torch.randn(1 << 26)]\n\n"
                   "def get_init_inputs():\n    return []\n"),
}
EXAMPLES = ["torch_kernelbench_compare.json", "torch_cuda_kernelbench_add.json",
            "cuda_vector_add_compare.json", "triton_compare_torch.json"]
# Problems run only when --only names them.
ONLY_EXAMPLES = ["cuda_vector_add.json"]

# What KernelBench's eval_kernel_against_ref does, in one fresh process: the harness of
# bench/torch_cuda_compile.py, shared so that both benches measure the same procedure.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from torch_cuda_compile import KERNELBENCH_PATH as KERNELBENCH_WAY  # noqa: E402


def batch(repeat, only=()):
    """The mixed batch, `repeat` copies shuffled; `only`: just these problems (names as listed
    in the rows, example files without .json)."""
    jobs = []
    examples = EXAMPLES + [e for e in ONLY_EXAMPLES if e.removesuffix(".json") in only]
    for name, src in SIZED.items():
        jobs.append((name, {"ref_kernel": {"kernel_type": "torch", "source_code": src},
                            "custom_kernel": {"kernel_type": "torch",
                                              "source_code": src + "\nModelNew = Model\n"}}))
    for example in examples:
        jobs.append((example.removesuffix(".json"),
                     json.loads((ROOT / "examples" / example).read_text())))
    if only:
        unknown = sorted(set(only) - {name for name, _ in jobs})
        if unknown:
            sys.exit(f"--only: no problem named {', '.join(unknown)} (there are "
                     f"{', '.join(name for name, _ in jobs)})")
        jobs = [(name, request) for name, request in jobs if name in only]
    out = [(name, dict(request, num_trials=100)) for _ in range(repeat) for name, request in jobs]
    random.Random(17).shuffle(out)
    return out


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def row(label, wall, latencies, failures, extra=""):
    n = len(latencies)
    print(f"{label:<14} jobs {n:3d}  wall {wall:7.1f} s  {60 * n / wall:6.1f} jobs/min  "
          f"latency p50 {percentile(latencies, 50):6.2f} s  p95 {percentile(latencies, 95):6.2f} s  "
          f"max {max(latencies):6.2f} s  failed {failures}{extra}")


def local_daemon(args, prefix):
    """A client of a daemon of its own (fresh state, args.serve_arg), stopped by close()."""
    return keval.Client.local(keval_bin=args.keval, serve_args=args.serve_arg, timeout=60,
                              state_dir=tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def kernels_of(request):
    """The request's kernels: a compare's two sides, or an evaluate's one."""
    if "kernel" in request:
        return [request["kernel"]]
    return [request["ref_kernel"], request["custom_kernel"]]


def send(client, request):
    """The request as its form says: an evaluate (one `kernel`) or a compare."""
    return client.evaluate(request) if "kernel" in request else client.compare(request)


def metadata_of(response):
    return response.raw.get("kernel_exec_result", {}).get("metadata", {})


def flat_time_ms(metadata):
    """Profiling's sampling.time_ms, its nested parts named "part.sub"."""
    spent = metadata.get("profiling", {}).get("sampling", {}).get("time_ms", {})
    flat = {}

    def add(name, value):
        if isinstance(value, dict):
            for sub, v in value.items():
                add(f"{name}.{sub}", v)
        else:
            flat[name] = value

    for part, ms in spent.items():
        add(part, ms)
    return flat


def machine_state():
    """One line on how busy this machine is before a daemon starts: its load average and the
    keval processes already running (left from an earlier run, or another user's). The same bench
    ran 30 to 45 % slower in every phase right after a test suite than first thing in a call, so
    rows from separate runs are read against this line."""
    keval_processes = 0
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            name = comm.read_text().strip()
        except OSError:  # gone meanwhile
            continue
        keval_processes += name in ("keval", "keval-worker")
    one, five, fifteen = os.getloadavg()
    return (f"load average {one:.1f} / {five:.1f} / {fifteen:.1f} (1, 5, 15 min) on "
            f"{os.cpu_count()} CPUs, {keval_processes} keval processes already running")


def run_keval(args, jobs, label="keval"):
    print(f"   machine before the daemon: {machine_state()}")
    client = local_daemon(args, "kv-tp-")
    try:
        # One unmeasured job per prewarm set teaches the daemon its sets (as traffic would).
        learning = time.perf_counter()
        seen = set()
        for name, request in jobs:
            types = tuple(sorted(k["kernel_type"] for k in kernels_of(request)))
            if types not in seen:
                seen.add(types)
                send(client, request)
        print(f"   ({len(seen)} unmeasured jobs, one per prewarm set, took "
              f"{time.perf_counter() - learning:.0f} s)")
        print(f"   CUDA driver held by the daemon: {json.dumps(client.health().driver)}")
        before = client.stats()
        latencies, failures = [], []
        profiling_ms = {}  # sampling.time_ms summed: where profiling's wall time went
        held_ms = {}  # per problem: [validation ms, profiling ms] of each job (its timeline)
        workers = []  # (job, metadata.worker) of each measured job
        verifier = {}  # the GPU's device verifier (keval serve --device-verifier): used or why not
        first_trials = {}  # job: its first validation trial's ms (gpu_cycle)
        lock = threading.Lock()

        def one(numbered):
            number, (name, request) = numbered
            t = time.perf_counter()
            r = send(client, request)
            if args.responses:
                path = Path(args.responses) / f"{label}-{number:03d}-{name}.json"
                path.write_text(json.dumps(r.raw, indent=1))
            metadata = metadata_of(r)
            spent = flat_time_ms(metadata)
            timeline = metadata.get("worker", {}).get("timeline_ms", {})
            with lock:
                workers.append((f"{number:03d}-{name}", metadata.get("worker", {})))
                note = metadata.get("device", {}).get("device_verifier")
                if note is not None:
                    key = "used" if note.get("used") else note.get("reason", "not used")[:80]
                    verifier[key] = verifier.get(key, 0) + 1
                trials = metadata.get("validation", {}).get("trials") or [{}]
                first_trials[f"{number:03d}-{name}"] = sum(trials[0].get("time_ms", {}).values())
                if all(k in timeline for k in ("bound", "validated", "profiled")):
                    held_ms.setdefault(name, []).append(
                        (timeline["validated"] - timeline["bound"],
                         timeline["profiled"] - timeline["validated"],
                         spent))
                latencies.append(time.perf_counter() - t)
                for part, ms in spent.items():
                    profiling_ms[part] = profiling_ms.get(part, 0.0) + ms
                if not r.ok:
                    failures.append(f"{name}: {r.status} {r.error or r.validation_error}")

        start = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(one, enumerate(jobs)))
        wall = time.perf_counter() - start
        after = client.stats()
        busy = sum(g.get("busy_ms", 0) for g in after.get("gpus", [])) - \
            sum(g.get("busy_ms", 0) for g in before.get("gpus", []))
        gpus = max(1, len(after.get("gpus", [])))
        row(label, wall, latencies, len(failures),
            f"  GPU busy {busy / 1000 / wall / gpus:.2f}")
        for f in failures[:5]:
            print("   ", f[:300])
        if len(after.get("gpus", [])) > 1:  # one daemon driving several GPUs: each one's share
            busy_before = {g.get("index"): g.get("busy_ms", 0) for g in before.get("gpus", [])}
            print("   per GPU: " + "  ".join(
                f"#{g.get('index')} {g.get('type', '?')} busy "
                f"{(g.get('busy_ms', 0) - busy_before.get(g.get('index'), 0)) / 1000:.1f} s"
                for g in after["gpus"]))
        if verifier:
            print("   device verifier: " + "  ".join(f"{k}: {n}" for k, n in verifier.items()))
        stages = after.get("time_breakdown", {}).get("stages", [])
        print("   stages (mean ms over the daemon's jobs): " + "  ".join(
            f"{s['stage']} {s['mean_ms']:.0f}" for s in stages if s.get("mean_ms") is not None))
        for name, spans in sorted(held_ms.items()):
            parts = {k: statistics.mean(sp.get(k, 0) for _, _, sp in spans)
                     for k in ("setup", "warm_up", "inputs", "runs", "runs_pausing",
                               "runs_calls", "outputs", "checks", "after")}
            print(f"   {name:28s} validation {statistics.mean(v for v, _, _ in spans):6.0f} ms"
                  f"  profiling {statistics.mean(p for _, p, _ in spans):6.0f} ms  (" +
                  " ".join(f"{k} {v:.0f}" for k, v in parts.items()) + f"; n={len(spans)})")
        print("   profiling (mean ms per job): " + "  ".join(
            f"{part} {ms / len(jobs):.0f}" for part, ms in profiling_ms.items()))
        for line in slowest_validation_overlaps(workers):
            print("   " + line)
        warmed = [warmed_runners(worker) for _, worker in workers]
        if any(w is not None for w in warmed):
            print("   jobs whose prestarted worker warmed the GPU up before they came: " + "  ".join(
                f"{kind} {sum(1 for w in warmed if w == n)}"
                for kind, n in (("both runners", 2), ("one runner", 1), ("none", 0))))
            print("   GPU held a job (grant to handover, mean ms), by the runners warmed before it "
                  "came: " + held_by_warmth(workers))
        cycle = gpu_cycle(workers, first_trials)
        if cycle:
            print("   " + cycle)
        prewarms = [w.get("prewarm") for _, w in workers if w.get("prewarm")]
        if prewarms:
            # A job's wait for its worker (ready_wait_ms), and where its worker's prewarm went:
            # of the wait for the device-open turn, the part after the job had taken it.
            def mean_of(key):
                return statistics.mean(p.get(key, 0) for p in prewarms)
            print(f"   jobs' wait for their worker (mean over {len(workers)}) "
                  f"{statistics.mean(w.get('ready_wait_ms', 0) for _, w in workers) / 1000:.2f} s;"
                  f"  prestarted workers (mean over {len(prewarms)}): "
                  f"prewarm {mean_of('total_s'):.2f} s, of it open turn "
                  f"{mean_of('device_turn_wait_s'):.2f} s (taken meanwhile "
                  f"{mean_of('device_turn_wait_taken_s'):.2f} s), opens "
                  f"{mean_of('device_open_s'):.2f} s")
        print_pool("the batch", after, before)
        return {"wall_s": wall, "latencies_s": latencies, "failures": failures,
                "gpu_busy_fraction": busy / 1000 / wall / gpus, "time_breakdown": stages,
                "profiling_ms_per_job": {k: v / len(jobs) for k, v in profiling_ms.items()}}
    finally:
        client.close()


# A job's steps in a worker's timeline (metadata.worker.timeline_ms), each named by the mark
# that ends it; the steps from `validation` on hold the GPU.
STEPS = [("compile", "runners_started", "compiled"), ("device_wait", "compiled", "granted"),
         ("device_open", "granted", "engine_open"), ("bind", "engine_open", "bound"),
         ("validation", "bound", "validated"), ("profiling", "validated", "profiled"),
         ("teardown", "profiled", "ended")]


def slowest_validation_overlaps(jobs):
    """For the job whose validation took longest: what every other job was doing meanwhile, from
    each response's metadata.worker (timeline_origin_unix_ms + timeline_ms; a keval before that
    field: job_sent_unix_ms, early by the worker's read). `jobs`: (label, worker)."""
    def spans(worker):
        origin = worker.get("timeline_origin_unix_ms") or worker.get("job_sent_unix_ms")
        timeline = worker.get("timeline_ms", {})
        if not origin:
            return []
        return [(name, origin + timeline[b], origin + timeline[e]) for name, b, e in STEPS
                if b in timeline and e in timeline and timeline[e] > timeline[b]]
    timed = [(label, spans(worker)) for label, worker in jobs]
    candidates = [(e - b, label, b, e) for label, sp in timed for name, b, e in sp
                  if name == "validation"]
    if not candidates:
        return []
    took, slowest, begin, end = max(candidates)
    lines = [f"slowest validation: {slowest} {took:.0f} ms; meanwhile:"]
    for label, sp in timed:
        if label == slowest:
            continue
        during = [f"{name} {min(e, end) - max(b, begin):.0f}" for name, b, e in sp
                  if b < end and e > begin]
        if during:
            lines.append(f"  {label}: " + ", ".join(during) + " ms")
    return lines


def step_means(timelines):
    """Mean ms of each step over the jobs whose timeline has both of its marks."""
    means = {}
    for name, begin, end in STEPS:
        spans = [t[end] - t[begin] for t in timelines if begin in t and end in t]
        if spans:
            means[name] = statistics.mean(spans)
    return means


def print_pool(over, after, before):
    """The pool of prestarted workers over a run (/stats warm_workers before and after), and the
    GPU memory it was sized by (supervisor/gpu_memory.hpp)."""
    warm, warm_before = after.get("warm_workers", {}), before.get("warm_workers", {})
    if not warm:
        return
    print(f"   prestarted workers over {over}: " + "  ".join(
        f"{k} {warm.get(k + '_total', 0) - warm_before.get(k + '_total', 0)}"
        for k in ("taken", "taken_out_of_order", "missed", "died_idle", "held_back_by_memory",
                  "held_back_by_gpu_memory", "held_back_by_gpu_queue")) +
        f"  ready at the end {warm.get('ready', 0)}")
    for gpu in warm.get("gpu_memory", []):
        print(f"   GPU {gpu['gpu']} at its latest reading: "
              f"{gpu['free_bytes'] / 2**30:.1f} of {gpu['total_bytes'] / 2**30:.1f} GiB free "
              f"({gpu['free_fraction']:.2f}), prestarted workers open there: "
              f"{gpu['prestarted_workers_open']}")


def run_sequence(args, n):
    request = json.loads(Path(args.sequence_request).read_text())
    if args.sequence_max_noise is not None:
        request["max_noise"] = args.sequence_max_noise
    responses = None
    if args.responses:  # a folder per daemon: --versus runs the sequence again
        daemon = "_".join(args.serve_arg).strip("-").replace("--", "") or "defaults"
        responses = Path(args.responses) / f"sequence-{daemon}"
        responses.mkdir(parents=True, exist_ok=True)
    client = local_daemon(args, "kv-seq-")
    try:
        t = time.perf_counter()
        send(client, request)  # cold: teaches the daemon the set, as the first request would
        print(f"   the cold compare took {time.perf_counter() - t:.1f} s")
        bursts = []
        for k in range(args.bursts):
            if k > 0:  # the next training step: past the pool's 10 s demand window
                print(f"   ... {args.burst_gap:g} s without requests")
                time.sleep(args.burst_gap)
            label = "sequence" if args.bursts == 1 else f"burst {k + 1}"
            before = client.stats()
            bursts.append(run_burst(client, request, n, label, responses, args.sequence_gap))
            print_pool(f"the {label}", client.stats(), before)
        if args.bursts == 1:
            return bursts[0]
        return {"bursts": bursts}
    finally:
        client.close()


def warmed_runners(worker):
    """How many of the job's runners its prestarted worker warmed the GPU up with before the job
    came (metadata.worker.prewarm.device_warm_up; SDK 1.4 warm_device), or None for a worker
    started for its job."""
    warm_up = worker.get("prewarm", {}).get("device_warm_up")
    if warm_up is None:
        return None
    return sum(1 for side in warm_up.get("sides", {}).values() if side.get("warmed"))


def gpu_cycle(workers, first_trials):
    """What a GPU went through per job, from the responses (metadata.worker's
    timeline_origin_unix_ms + timeline_ms, metadata.validation): the job's grant to its handover,
    its first validation trial, and the teardown of the job before it on the same GPU (its
    handover to its end), which gates the job's first timed sample; the first trial and the
    teardown are the parts that wait most on the driver's device-wide lock. "" without
    timelines. `workers`: (job, metadata.worker); `first_trials`: job -> ms."""
    by_gpu = {}
    for label, worker in workers:
        origin, timeline = worker.get("timeline_origin_unix_ms"), worker.get("timeline_ms", {})
        handover = timeline.get("handed_over", timeline.get("ended"))
        if not origin or handover is None or not all(
                k in timeline for k in ("granted", "timing_turn", "ended")):
            continue
        gpu = worker.get("device_memory", {}).get("gpu", "")
        by_gpu.setdefault(gpu, []).append(
            {k: origin + timeline[k] for k in ("granted", "timing_turn", "ended")} |
            {"handed_over": origin + handover, "trial0": first_trials.get(label, 0)})
    cycles, trials, teardowns, gated, followers = [], [], [], 0, 0
    for jobs in by_gpu.values():
        jobs.sort(key=lambda j: j["granted"])
        for before, job in zip([None] + jobs, jobs):
            cycles.append(job["handed_over"] - job["granted"])
            trials.append(job["trial0"])
            if before is not None:
                followers += 1
                teardowns.append(before["ended"] - before["handed_over"])
                # Timed within 40 ms of the job before being gone (the host's device_quiet, then
                # the timing turn): it waited for that teardown.
                gated += job["timing_turn"] - before["ended"] < 40
    if not cycles:
        return ""
    line = (f"GPU cycle a job (grant to handover, mean) {statistics.mean(cycles):.0f} ms, its "
            f"first validation trial {statistics.mean(trials):.0f} ms")
    if teardowns:
        line += (f"; the job before's teardown {statistics.mean(teardowns):.0f} ms, which the "
                 f"first timed sample waited for in {gated} of {followers} jobs")
    return line


def held_by_warmth(workers):
    """How long the jobs held their GPU (timeline: grant to handover, or to their end without
    one), by how many of their runners were warmed up before they came (None: a worker started
    for its job): what the warm-up saved the GPU, where it ran."""
    groups = {}
    for _, worker in workers:
        timeline = worker.get("timeline_ms", {})
        end = timeline.get("handed_over", timeline.get("ended"))
        if "granted" in timeline and end is not None:
            groups.setdefault(warmed_runners(worker), []).append(end - timeline["granted"])
    names = {2: "both", 1: "one", 0: "none", None: "fresh worker"}
    return "  ".join(f"{name} {statistics.mean(groups[k]):.0f} (n={len(groups[k])})"
                     for k, name in names.items() if k in groups)


def run_burst(client, request, n, label, responses=None, gap=0):
    """N back-to-back compares from one client (`gap` seconds apart): its row, and where the
    jobs' time went (each response written to the folder `responses` when given)."""
    latencies, failures, starts, timelines, sampling, waits, warmed = [], 0, [], [], [], [], []
    start = time.perf_counter()
    for number in range(n):
        if number and gap:  # a client that waits between its jobs (--sequence-gap)
            time.sleep(gap)
        t = time.perf_counter()
        r = send(client, request)
        latencies.append(time.perf_counter() - t)
        if responses:
            path = Path(responses) / f"{label.replace(' ', '_')}-{number:03d}.json"
            path.write_text(json.dumps(r.raw, indent=1))
        failures += 0 if r.ok else 1
        timeline = metadata_of(r).get("worker", {}).get("timeline_ms", {})
        timelines.append(timeline)
        sampling.append(flat_time_ms(metadata_of(r)))
        starts.append((timeline.get("runners_started"), timeline.get("bound"),
                       timeline.get("ended")))
        worker = metadata_of(r).get("worker", {})
        waits.append((worker.get("ready_wait_ms"), worker.get("prewarm", {})))
        warmed.append(warmed_runners(worker))
    wall = time.perf_counter() - start
    median = statistics.median(latencies)
    row(label, wall, latencies, failures,
        f"  max/median {max(latencies) / median:.2f}")
    print("   latencies (s): " + " ".join(f"{x:.2f}" for x in latencies))
    if all(None not in s for s in starts):
        print("   per job, ms after the job reached its worker: runners up / bound / ended: " +
              " ".join(f"{a:.0f}/{b:.0f}/{c:.0f}" for a, b, c in starts))
    if all(w is not None for w, _ in waits):
        # A stall that no worker timeline shows: the job waited for its prestarted worker.
        print("   per job, ms waiting for its worker (its prewarm, s: total/turn wait/device "
              "open): " + " ".join(
                  f"{w:.0f}" + (f"({p.get('total_s', 0):.1f}/"
                                f"{p.get('device_turn_wait_s', 0):.1f}/"
                                f"{p.get('device_open_s', 0):.1f})" if p else "")
                  for w, p in waits))
    if any(w is not None for w in warmed):
        print("   per job, runners its worker warmed the GPU up with before it came: " +
              " ".join("-" if w is None else str(w) for w in warmed))
    steps = step_means(timelines)
    if steps:
        print("   mean ms per step: " + "  ".join(f"{k} {v:.0f}" for k, v in steps.items()))
    parts = sorted({k for spent in sampling for k in spent})
    if parts:
        print("   profiling, mean ms per job: " + "  ".join(
            f"{k} {statistics.mean(spent.get(k, 0) for spent in sampling):.0f}"
            for k in parts))
    return {"wall_s": wall, "latencies_s": latencies, "failures": failures,
            "max_over_median": max(latencies) / median, "warmed_runners": warmed}


def run_fresh(args, jobs):
    work = Path(tempfile.mkdtemp(prefix="kv-tp-fresh-", dir="/tmp"))
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(work / "torch_extensions"))
    latencies, failures = [], []
    start = time.perf_counter()
    for k, (name, request) in enumerate(jobs):
        kernelbench_style = "kernel" not in request and \
            request["ref_kernel"]["kernel_type"] == "torch" and \
            "class Model" in request["ref_kernel"]["source_code"] and \
            request["custom_kernel"]["kernel_type"] in ("torch", "torch_cuda")
        t = time.perf_counter()
        if kernelbench_style:
            (work / "ref.py").write_text(request["ref_kernel"]["source_code"])
            (work / "custom.py").write_text(request["custom_kernel"]["source_code"])
            done = subprocess.run([args.python, "-c", KERNELBENCH_WAY, str(work / "ref.py"),
                                   str(work / "custom.py")], capture_output=True, text=True,
                                  env=env, timeout=900)
        else:
            path = work / f"request{k}.json"
            path.write_text(json.dumps(request))
            done = subprocess.run([args.keval, "evaluate" if "kernel" in request else "compare",
                                   str(path), "--json"],
                                  capture_output=True, text=True, timeout=900)
        latencies.append(time.perf_counter() - t)
        if done.returncode != 0:
            failures.append(f"{name}: exit {done.returncode}: {done.stderr[-300:]}")
    wall = time.perf_counter() - start
    row("fresh", wall, latencies, len(failures))
    for f in failures[:5]:
        print("   ", f)
    return {"wall_s": wall, "latencies_s": latencies, "failures": failures}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keval", default=str(ROOT / "build/bin/keval"))
    parser.add_argument("--python", default="python3", help="for the fresh-process runs")
    parser.add_argument("--repeat", type=int, default=2, help="copies of the batch")
    parser.add_argument("--clients", type=int, default=8, help="keval requests in flight")
    parser.add_argument("--only", action="append", default=[], metavar="PROBLEM",
                        help="the batch of these problems alone (repeat; e.g. --only "
                             "cuda_vector_add_compare --repeat 40: cuda jobs/min with --clients "
                             "in flight); also cuda_vector_add, an evaluate of one cuda kernel")
    parser.add_argument("--serve-arg", action="append", default=[],
                        help="an argument for keval serve (repeat: --serve-arg=--warm-workers-max "
                             "--serve-arg=6)")
    parser.add_argument("--max-noise", type=float, action="append", default=[],
                        help="also run the keval batch with this request 'max_noise' (percent: a "
                             "side's sampling stops once its mean is that stable, after "
                             "'min_samples'); repeat for several rows")
    parser.add_argument("--batch-max-noise", type=float, metavar="P",
                        help="send every request of the batch with this 'max_noise', in its "
                             "--versus and --versus-keval rows too (side by side where the GPU "
                             "waits for the jobs rather than the jobs for the GPU)")
    parser.add_argument("--versus", action="append", default=[], metavar="ARGS",
                        help="also run the batch through a daemon given these extra arguments "
                             "(--versus '--warm-workers-max 6'), side by side, with the ratio")
    parser.add_argument("--versus-keval", action="append", default=[], metavar="PATH",
                        help="also run the batch through this keval binary (another build), side "
                             "by side, with the ratio")
    parser.add_argument("--warm-sequence", type=int, default=0, metavar="N",
                        help="also time N back-to-back torch_cuda compares from one client")
    parser.add_argument("--sequence-request", metavar="FILE",
                        default=str(ROOT / "examples/torch_cuda_kernelbench_add.json"),
                        help="the compare --warm-sequence sends (default: KernelBench's "
                             "load_inline add, whose candidate keval builds once and reuses)")
    parser.add_argument("--sequence-max-noise", type=float, metavar="P",
                        help="send the --warm-sequence compares with this request 'max_noise' "
                             "(the client's choice: sampling stops once the mean is stable)")
    parser.add_argument("--sequence-gap", type=float, default=0, metavar="SECONDS",
                        help="wait this long between the --warm-sequence compares (a client "
                             "that pauses between jobs; latencies count from each send)")
    parser.add_argument("--bursts", type=int, default=1, metavar="K",
                        help="send the --warm-sequence K times through the same daemon, "
                             "--burst-gap seconds apart (an RL loop's training steps: does the "
                             "next burst find the workers the last one grew?)")
    parser.add_argument("--burst-gap", type=float, default=30, metavar="SECONDS",
                        help="quiet time between --bursts (default 30: past the pool's 10 s "
                             "demand window)")
    parser.add_argument("--sequence-only", action="store_true",
                        help="run only the --warm-sequence rows (for each --versus as well)")
    parser.add_argument("--skip-fresh", action="store_true")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--responses", metavar="DIR",
                        help="write each measured job's response to DIR/<row>-<n>-<problem>.json")
    args = parser.parse_args()
    if args.responses:
        Path(args.responses).mkdir(parents=True, exist_ok=True)
    if args.sequence_only and not args.warm_sequence:
        parser.error("--sequence-only needs --warm-sequence N")
    began = time.perf_counter()
    out = {}
    variants = [(extra, argparse.Namespace(**dict(
        vars(args), serve_arg=args.serve_arg + shlex.split(extra)))) for extra in args.versus]
    builds = [(path, argparse.Namespace(**dict(vars(args), keval=path)))
              for path in args.versus_keval]
    if not args.sequence_only:
        jobs = batch(args.repeat, args.only)
        if args.batch_max_noise is not None:
            jobs = [(name, dict(request, max_noise=args.batch_max_noise)) for name, request in jobs]
        print(f"batch: {len(jobs)} compares ({', '.join(sorted({n for n, _ in jobs}))})" +
              ("" if args.batch_max_noise is None else
               f", each with \"max_noise\": {args.batch_max_noise:g}"))
        out["keval"] = run_keval(args, jobs)
        for number, (extra, variant) in enumerate(variants, 1):
            print(f"-- the same batch through a daemon started with {extra}")
            # Numbered: two variants whose arguments begin alike would share a label, and the
            # second's --responses files would replace the first's.
            out[f"keval {extra}"] = run_keval(variant, jobs,
                                              label=f"v{number} {extra.lstrip('-')}"[:14])
            ratio = out["keval"]["wall_s"] / out[f"keval {extra}"]["wall_s"]
            print(f"ratio (jobs/min with {extra} over without): {ratio:.2f}x")
        for path, build in builds:
            print(f"-- the same batch through {path}")
            out[f"keval at {path}"] = run_keval(build, jobs, label="other build")
            ratio = out["keval"]["wall_s"] / out[f"keval at {path}"]["wall_s"]
            print(f"ratio (jobs/min through {path} over {args.keval}): {ratio:.2f}x")
        for noise in args.max_noise:
            print(f"-- the same batch, each request with \"max_noise\": {noise}")
            allowed = [(name, dict(request, max_noise=noise)) for name, request in jobs]
            out[f"keval_max_noise_{noise:g}"] = run_keval(args, allowed, label=f"noise {noise:g}%")
    # --sequence-only: a sequence for each --versus as well; else one, with the defaults.
    for label, variant in ([("", args)] + variants if args.sequence_only else
                           [("", args)] if args.warm_sequence else []):
        noise = ("" if args.sequence_max_noise is None else
                 f" (\"max_noise\": {args.sequence_max_noise:g})")
        spacing = (f"{args.sequence_gap:g} s apart" if args.sequence_gap else "back-to-back")
        print(f"-- {args.warm_sequence} {spacing} {Path(args.sequence_request).name} "
              f"compares{noise}, one client, through a daemon started with "
              f"{' '.join(variant.serve_arg) or 'the defaults'}")
        out[f"sequence {label}".strip()] = run_sequence(variant, args.warm_sequence)
    if not args.skip_fresh and not args.sequence_only:
        out["fresh"] = run_fresh(args, jobs)
        ratio = (len(jobs) / out["keval"]["wall_s"]) / (len(jobs) / out["fresh"]["wall_s"])
        print(f"ratio (keval jobs/min over fresh-process jobs/min): {ratio:.2f}x")
        out["ratio"] = ratio
    print(f"(the bench took {time.perf_counter() - began:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
