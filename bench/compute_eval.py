#!/usr/bin/env python3
"""ComputeEval's local procedure vs keval on the same problems and solutions, side by side.

ComputeEval's procedure (evaluators/base.py + local_evaluator.py, reproduced here with the
standard library so that nothing of ComputeEval is needed): for every solution, a fresh
workspace of context + test + solution files, `build_command`, then `test_command` holding one
GPU of a pool, N worker threads (ComputeEval's default: 4), no sandbox. keval:
`keval compute-eval evaluate` through a daemon started for the row (a daemon is long-lived by
design; its start-up is printed apart, and a fresh one per row keeps builds one row cached from
the next), sandboxed: with --jobs N and the plain build command; with --jobs N, the harness
reused and whole builds kept by content; and at keval's defaults (no --jobs: as many jobs at once
as the daemon runs, harness and build reuse).

Problems are keval's own (tests/compute_eval/problems): k solutions per problem, drawn in turn
from each problem's variants (pass, wrong, build_error, ...; never a timeout variant, whose
waiting would only measure the timeout), so samples repeat as pass@k samples do; the count of
distinct solutions is printed. --distinct makes every sample unique (a comment of its own), so
that no build can be reused. Every verdict of keval is compared with the procedure's and
disagreements are printed. Two of our variants are meant to disagree: `exit_early` (the solution
ends the harness's process with status 0) and `refs_comment_only` (the names the problem requires
appear only in a comment) pass the procedure and fail keval's checks (docs/cuda_program.md).
Prints one row per run and the ratios against ComputeEval at each N; under each keval row, the
GPU's busy time and the daemon's stage means (/stats), which say whether the cores (builds) or the
GPU (tests) bound it. --defaults-only runs, of keval, only the row at its defaults.

  python3 bench/compute_eval.py --keval-bin build/bin/keval --workers 4 16 --k 8 [--distinct]
                                [--defaults-only]

On a ComputeEval release you have locally (its dataset is never part of keval):
  python3 bench/compute_eval.py --problems-datapack 2026-1-problems.tar.gz \
      [--solutions-datapack S.tar.gz]   # default: each problem's baseline solution, k times
"""
from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

from keval import Client  # noqa: E402
from keval._daemon import LocalDaemon  # noqa: E402
from keval.compute_eval.datapack import (read_problems, read_solutions,  # noqa: E402
                                        write_problems, write_solutions)
from keval.compute_eval.pack import load_problem_dir, load_solution_dir  # noqa: E402

PROBLEMS_DIR = os.path.join(ROOT, "tests", "compute_eval", "problems")
SKIPPED_VARIANTS = {"timeout"}


def gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        return len([line for line in out.splitlines() if line.strip()])
    except (OSError, subprocess.SubprocessError):
        return 0


def select(problem_names, k, with_gpu):
    problems, solutions = [], []
    for name in problem_names:
        directory = os.path.join(PROBLEMS_DIR, name)
        problem = load_problem_dir(directory)
        if problem.get("compute_capability") is not None and not with_gpu:
            continue
        variants = sorted(v for v in os.listdir(os.path.join(directory, "variants"))
                          if v not in SKIPPED_VARIANTS)
        problems.append(problem)
        for i in range(k):
            solutions.append(load_solution_dir(directory, variants[i % len(variants)]))
    return problems, solutions


# ---- ComputeEval's local procedure -------------------------------------------------------------

class GpuPool:
    def __init__(self, n):
        self.free = queue.Queue()
        for i in range(max(n, 1)):
            self.free.put(i)

    @contextlib.contextmanager
    def acquire(self):
        gpu = self.free.get()
        try:
            yield gpu
        finally:
            self.free.put(gpu)


def run_step(command, workdir, timeout, env):
    proc = subprocess.Popen(command, shell=True, start_new_session=True, cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return False
    return proc.returncode == 0


def computeeval_one(problem, solution, pool, needs_gpu_pool):
    timeout = problem.get("timeout_seconds") or 60.0
    with tempfile.TemporaryDirectory() as work:
        for f in problem["context_files"] + problem["test_files"] + solution["files"]:
            path = os.path.join(work, f["path"])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as out:
                out.write(f["content"])
        env = os.environ.copy()
        if problem.get("build_command") and not run_step(problem["build_command"], work, timeout,
                                                        env):
            return False
        ctx = pool.acquire() if needs_gpu_pool else contextlib.nullcontext(None)
        with ctx as gpu:
            if gpu is not None:
                env["CUDA_VISIBLE_DEVICES"] = str(gpu)
            return run_step(problem["test_command"], work, timeout, env)


def computeeval(problems, solutions, workers, gpus):
    by_task = {p["task_id"]: p for p in problems}
    pool = GpuPool(gpus)
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as executor:
        futures = [executor.submit(computeeval_one, by_task[s["task_id"]], s, pool, gpus > 0)
                   for s in solutions]
        verdicts = [f.result() for f in futures]
    return time.monotonic() - start, verdicts


# ---- keval -----------------------------------------------------------------------------------

def keval_run(problems_pack, solutions_pack, socket, workers, reuse, work):
    """One run of `keval compute-eval evaluate`; `workers` None: its default --jobs."""
    out = os.path.join(work, f"graded-{workers}-{int(reuse)}-{time.monotonic_ns()}.jsonl")
    cmd = [sys.executable, "-m", "keval.compute_eval", "evaluate", "--problems", problems_pack,
           "--solutions", solutions_pack, "--daemon", socket, "--output", out,
           "--progress", "lines"]
    if workers is not None:
        cmd += ["--jobs", str(workers)]
    if not reuse:
        cmd.append("--no-harness-reuse")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    start = time.monotonic()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if done.returncode not in (0,):
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"keval compute-eval exited with {done.returncode}")
    at_once = re.search(r"(\d+) at a time", done.stderr)
    entries = [json.loads(line) for line in open(out)]
    entries.sort(key=lambda e: e["keval"]["solution_index"])
    return (seconds, [bool(e["passed"]) for e in entries], entries,
            int(at_once.group(1)) if at_once else workers)


def make_unique(solution, i):
    """`solution` with a comment of its own at the end of its first file."""
    files = [dict(f) for f in solution["files"]]
    files[0]["content"] = files[0]["content"] + f"\n// sample {i}\n"
    return dict(solution, files=files)


def kept_builds_reused(entries):
    """How many of a run's programs were taken from the build cache."""
    return sum(1 for e in entries if e["keval"].get("build_reused"))


def print_where_time_went(daemon, wall_s):
    """The row's GPU busy fraction and the daemon's stage means: which of builds (cores) and
    tests (the GPU lease) bound the row."""
    with Client(daemon.socket_path) as client:
        stats = client.stats()
    gpus = stats.get("gpus", [])
    busy_s = sum(g.get("busy_ms", 0) for g in gpus) / 1000
    stages = stats.get("time_breakdown", {}).get("stages", [])
    print(f"    GPU busy {busy_s:.1f} s of {wall_s:.1f} s"
          + (f" ({busy_s / wall_s / len(gpus):.2f} per GPU)" if gpus else "")
          + "; stage means (ms): " + "  ".join(f"{st['stage']} {st['mean_ms']:.0f}" for st in stages
                                              if st.get("mean_ms") is not None))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keval-bin", default=os.path.join(ROOT, "build", "bin", "keval"))
    parser.add_argument("--workers", type=int, nargs="+", default=[4])
    parser.add_argument("--k", type=int, default=4, help="solutions per problem")
    parser.add_argument("--problems", nargs="+", default=sorted(os.listdir(PROBLEMS_DIR)))
    parser.add_argument("--daemon-arg", action="append", default=[])
    parser.add_argument("--problems-datapack", metavar="P.tar.gz",
                        help="a ComputeEval problems datapack instead of keval's own problems")
    parser.add_argument("--solutions-datapack", metavar="S.tar.gz",
                        help="its solutions (default: each problem's baseline, --k times)")
    parser.add_argument("--distinct", action="store_true",
                        help="make every sample unique (a comment of its own): no build is reused")
    parser.add_argument("--defaults-only", action="store_true",
                        help="of keval, only the row at its defaults (no row per N)")
    args = parser.parse_args()

    gpus = gpu_count()
    if args.problems_datapack:
        problems = read_problems(args.problems_datapack).problems
        if args.solutions_datapack:
            solutions = read_solutions(args.solutions_datapack).solutions
        else:
            solutions = [p["baseline_solution"] for p in problems if p.get("baseline_solution")
                         for _ in range(args.k)]
        wanted = {s["task_id"] for s in solutions}
        problems = [p for p in problems if p["task_id"] in wanted]
    else:
        problems, solutions = select(args.problems, args.k, gpus > 0)
    if args.distinct:
        solutions = [make_unique(s, i) for i, s in enumerate(solutions)]
    distinct = len({json.dumps(s["files"], sort_keys=True) for s in solutions})
    print(f"{len(problems)} problems, {len(solutions)} solutions ({args.k} per problem, "
          f"{distinct} distinct), {gpus} GPU(s), {os.cpu_count()} cores")
    work = tempfile.mkdtemp(prefix="keval-bench-ce-")
    problems_pack = os.path.join(work, "bench-problems.tar.gz")
    solutions_pack = os.path.join(work, "bench-solutions.tar.gz")
    write_problems(problems_pack, problems, release="internal")
    write_solutions(solutions_pack, solutions, release="internal")

    ce_verdicts = None
    ce_rows = {}  # N -> seconds
    rows = []  # (label, N, seconds, programs reused)

    def keval_row(label, workers, reuse):
        # A daemon of the row's own: no build one row kept is reused by the next.
        started = time.monotonic()
        with LocalDaemon(keval_bin=args.keval_bin, extra_args=args.daemon_arg) as daemon:
            print(f"  ({label}: daemon started in {time.monotonic() - started:.2f} s, not "
                  f"counted)")
            s, verdicts, entries, at_once = keval_run(problems_pack, solutions_pack,
                                                      daemon.socket_path, workers, reuse, work)
            print_where_time_went(daemon, s)
        rows.append((label, at_once, s, kept_builds_reused(entries)))
        for i, (a, b) in enumerate(zip(ce_verdicts, verdicts)):
            if a != b:
                why = (entries[i].get("build_output") or entries[i].get("test_output") or "")
                print(f"  verdict differs: solution {i} ({solutions[i]['task_id']}, {label}): "
                      f"ComputeEval {a}, keval {b}: {why[:160]!r}")

    try:
        for workers in args.workers:
            ce_s, ce_verdicts = computeeval(problems, solutions, workers, gpus)
            ce_rows[workers] = ce_s
            rows.append(("ComputeEval local procedure", workers, ce_s, None))
            if not args.defaults_only:
                keval_row("keval, plain build command", workers, False)
                keval_row("keval, harness and builds reused", workers, True)
        keval_row("keval defaults (--jobs: daemon's)", None, True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    n = len(solutions)
    versus = "".join(f" {f'vs CE N={w}':>11}" for w in ce_rows)
    print(f"\n{'procedure (keval: daemon, sandboxed)':38} {'N':>3} {'wall s':>8} "
          f"{'solutions/min':>14} {'reused':>7}{versus}")
    for label, workers, seconds, reused in rows:
        ratios = "".join(f" {'' if reused is None else f'{ce / seconds:.2f}x':>11}"
                         for ce in ce_rows.values())
        print(f"{label:38} {workers if workers is not None else '?':>3} {seconds:8.2f} "
              f"{60 * n / seconds:14.1f} {'' if reused is None else reused:>7}{ratios}")
    print("reused: programs a job took from the build cache instead of building them")

if __name__ == "__main__":
    main()
