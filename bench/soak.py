#!/usr/bin/env python3
"""Soak: thousands of mixed jobs through one real `keval serve`, checking that none is lost or
duplicated and that the daemon's descriptors and memory stay flat.

Every job is one of these (a fixed, shuffled cycle of 100, so any run mixes them alike):

  correct      fault plugin, healthy: evaluate (sync), compare (sync), evaluate (async + polling)
  wrong        unwritten outputs, a compare whose candidate scales differently, a modified input
  failing      compile error, an exception, SIGSEGV, abort(), the worker exiting between phases,
               garbage written on the protocol channel
  noisy        32 KiB... 1 MiB flooded on stdout; a child forked and left hanging
  hanging      hangs in launch / after compile with a 0.3 s timeout (500, timed out)
  cancelled    async hang, then DELETE /jobs/{id}
  hostile      4xx without a worker: invalid JSON, wrong types, NUL in source, unknown kernel
               type, absurd shape, deep nesting, unknown route or job, wrong method, an Origin
               header, a body over --max-body-bytes
  real         the repository's examples/*.json whose kernel types this daemon has (on a CPU
               machine: torch), every --real-every jobs, with num_trials 5

Jobs run in batches of 1000 over --clients keep-alive connections. After each batch the
daemon's open descriptors (/proc/PID/fd) and VmRSS are read once its finished jobs' descriptors
have closed. Checked at the end, each a failure when it does not hold:

  - every job got the answer its kind expects (status code and verdict class);
  - every accepted job has one id, no id was given twice, and each reached one terminal state:
    /stats counts submitted == finished == accepted, by verdict, cancelled and timed out as the
    client counted them, and nothing active or queued;
  - descriptors after the last batch <= after the first; RSS after the last batch <= after the
    first + --rss-slack-mib (allocator caches; finished jobs are forgotten after --job-ttl, so
    nothing per job may accumulate).

Figures (jobs/s, descriptors and RSS per batch) are printed, and written as JSON with --json.

  bench/soak.py --keval build/bin/keval --plugin-path build/lib/keval/test-plugins --jobs 10000
  bench/soak.py --keval build/bin/keval --plugin-path build/lib/keval/test-plugins \\
                --jobs 100000 --clients 32 --real-every 50          # the GPU machine: README

CTest runs the first line (test daemon_soak, label soak). Only the standard library is used.
"""
import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BATCH = 1000


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


class Client:
    """One keep-alive connection; reconnects when the daemon closed it (after a 413, say)."""

    def __init__(self, path, timeout=300):
        self.path, self.timeout, self.conn = path, timeout, None

    def request(self, method, target, body=None, headers=None):
        headers = dict(headers or {})
        if body is not None and "Content-Type" not in headers:
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = UnixConnection(self.path, self.timeout)
            try:
                self.conn.request(method, target, body=body, headers=headers)
                response = self.conn.getresponse()
                data = response.read()
                if response.getheader("Connection", "").lower() == "close":
                    self.close()
                return response.status, data
            except (ConnectionError, http.client.RemoteDisconnected, BrokenPipeError):
                self.close()
                if attempt == 1:
                    raise

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


# --- requests ------------------------------------------------------------------------------------

def scale_io(n=64):
    return {"args": [
        {"name": "x", "type": "tensor", "role": "input",
         "tensor_spec": {"shape": [n], "dtype": "float32", "init": {"kind": "randn", "seed": 7}}},
        {"name": "y", "type": "tensor", "role": "output",
         "tensor_spec": {"shape": [n], "dtype": "float32"}}]}


def fault_kernel(metadata=None):
    return {"source_code": "// fault injection", "kernel_type": "fault",
            "metadata": metadata or {}, "io": scale_io()}


def evaluate(metadata=None, timeout=60, **extra):
    return {"kernel": fault_kernel(metadata), "num_trials": 5, "timeout": timeout, **extra}


def compare(ref=None, custom=None):
    return {"ref_kernel": fault_kernel(ref), "custom_kernel": fault_kernel(custom),
            "num_trials": 5, "timeout": 60}


def dumps(obj):
    return json.dumps(obj).encode()


class Mismatch(Exception):
    """An answer other than the one the job's kind expects; `job_id` when it had one."""

    def __init__(self, message, job_id=None):
        super().__init__(message)
        self.job_id = job_id


def body_of(data):
    try:
        return json.loads(data)
    except ValueError:
        raise Mismatch(f"response is not JSON: {data[:200]!r}")


def verdict_of(status, body):
    """The verdict (as /stats names them) of a finished job's V2 response."""
    if status == 500:
        return "infrastructure_failure"
    if status != 200:
        raise Mismatch(f"HTTP {status}: {json.dumps(body)[:300]}")
    result = body.get("kernel_exec_result", {})
    return "success" if result.get("correctness") is True else "kernel_failed"


class Outcome:
    """What one job ended as: its id (if the daemon accepted it) and its class."""

    def __init__(self, cls, job_id=None, verdict=None):
        self.cls, self.job_id, self.verdict = cls, job_id, verdict


def run_sync(client, path, request, expected):
    status, data = client.request("POST", path, dumps(request))
    body = body_of(data)
    verdict = verdict_of(status, body)
    if verdict != expected:
        raise Mismatch(f"expected {expected}, got {verdict}: {json.dumps(body)[:400]}",
                       body.get("job_id"))
    if not body.get("job_id"):
        raise Mismatch(f"no job_id: {json.dumps(body)[:300]}")
    return Outcome(expected, body["job_id"], verdict)


def submit_async(client, request):
    status, data = client.request("POST", "/evaluate", dumps({**request, "async": True}))
    body = body_of(data)
    if status != 202 or not body.get("job_id"):
        raise Mismatch(f"async submission: HTTP {status} {json.dumps(body)[:300]}")
    return body["job_id"]


def run_async(client, request, expected):
    job_id = submit_async(client, request)
    pause = 0.002
    while True:  # the client polls, as an async client does; the daemon's timeout bounds it
        status, data = client.request("GET", f"/jobs/{job_id}")
        view = body_of(data)
        if status != 200:
            raise Mismatch(f"GET /jobs/{job_id}: HTTP {status} {json.dumps(view)[:300]}")
        if view.get("status") in ("completed", "failed"):
            verdict = verdict_of(view.get("http_status"), view.get("result", {}))
            if verdict != expected:
                raise Mismatch(f"async: expected {expected}, got {verdict}", job_id)
            return Outcome(expected, job_id, verdict)
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def run_cancel(client):
    job_id = submit_async(client, evaluate({"fault": "hang_in_launch"}, timeout=600))
    status, data = client.request("DELETE", f"/jobs/{job_id}")
    view = body_of(data)
    message = json.dumps(view.get("result", {}))
    if status != 200 or view.get("status") != "failed" or "cancelled" not in message:
        raise Mismatch(f"DELETE /jobs/{job_id}: HTTP {status} {json.dumps(view)[:300]}", job_id)
    return Outcome("cancelled", job_id, "infrastructure_failure")


def hostile_requests(max_body_bytes):
    """(name, method, target, body, headers, expected status): answered without a worker."""
    ok = evaluate()
    nul = dumps(ok).replace(b"// fault injection", b"// fault\\u0000injection")
    absurd = evaluate()
    absurd["kernel"]["io"]["args"][0]["tensor_spec"]["shape"] = [2 ** 40, 2 ** 40]
    unknown = evaluate()
    unknown["kernel"]["kernel_type"] = "no_such_type"
    return [
        ("invalid_json", "POST", "/evaluate", b'{"kernel": {', {}, 400),
        ("wrong_types", "POST", "/evaluate",
         dumps({"kernel": {"source_code": 7, "kernel_type": ["fault"]}, "num_trials": "x"}), {}, 400),
        ("nul_in_source", "POST", "/evaluate", nul, {}, 400),
        ("unknown_type", "POST", "/evaluate", dumps(unknown), {}, 400),
        ("absurd_shape", "POST", "/evaluate", dumps(absurd), {}, 400),
        ("deep_nesting", "POST", "/compare", b'{"ref_kernel": ' + b"[" * 500 + b"]" * 500 + b"}",
         {}, 400),
        ("unknown_route", "GET", "/no/such/route", None, {}, 404),
        ("unknown_job", "GET", "/jobs/no-such-job", None, {}, 404),
        ("delete_unknown_job", "DELETE", "/jobs/no-such-job", None, {}, 404),
        ("wrong_method", "PUT", "/evaluate", b"{}", {}, 405),
        ("origin_header", "POST", "/evaluate", dumps(ok), {"Origin": "https://example.com"}, 403),
        ("over_body_limit", "POST", "/evaluate", max_body_bytes, {}, 413),
    ]


def over_body_limit(socket_path, max_body_bytes):
    """A header announcing a body over the limit: answered 413 before any body is read."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(60)
        s.connect(socket_path)
        s.sendall(f"POST /evaluate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
                  f"\r\nContent-Length: {max_body_bytes + 1}\r\n\r\n".encode())
        response = http.client.HTTPResponse(s)
        response.begin()
        return response.status, response.read()


def run_hostile(client, item, socket_path):
    name, method, target, body, headers, expected = item
    if name == "over_body_limit":
        status, data = over_body_limit(socket_path, body)
    else:
        status, data = client.request(method, target, body, headers)
    if status != expected:
        raise Mismatch(f"{name}: expected HTTP {expected}, got {status}: {data[:300]!r}")
    body_of(data)  # every answer is JSON
    return Outcome(f"rejected_{expected}")


# --- the job mix ---------------------------------------------------------------------------------

# (kind, share of 100). Verdicts: success (200, correct), kernel_failed (200, not correct: the
# kernel's fault), infrastructure_failure (500: timed out, cancelled).
MIX = [
    ("correct", 24), ("compare_correct", 5), ("async_correct", 3),
    ("unwritten_outputs", 6), ("compare_wrong_scale", 3), ("modified_input", 2),
    ("compile_error", 5), ("throw", 4), ("segfault", 4), ("abort", 3), ("exit_between_phases", 2),
    ("garbage_protocol", 2), ("fork_and_hang", 2), ("flood_stdout", 3),
    ("hang_timeout", 2), ("hang_after_compile_timeout", 1), ("cancel", 4), ("hostile", 25),
]
assert sum(share for _, share in MIX) == 100


def plan(jobs, real_every, real_requests):
    """Job n's (kind, argument). Each real example runs once first: the daemon learns the sets of
    plugins it keeps prestarted workers for from the jobs it sees, and that is part of its idle
    state, not growth."""
    cycle = [kind for kind, share in MIX for _ in range(share)]
    random.Random(12).shuffle(cycle)
    kinds = [("real", i) for i in range(len(real_requests))]
    real = len(real_requests)
    for n in range(len(kinds), jobs):
        if real_requests and real_every and n % real_every == real_every // 2:
            kinds.append(("real", real % len(real_requests)))
            real += 1
        else:
            kinds.append((cycle[n % len(cycle)], n))
    return kinds


class Soak:
    def __init__(self, args, socket_path, max_body_bytes, real_requests):
        self.args = args
        self.socket_path = socket_path
        self.hostile = hostile_requests(max_body_bytes)
        self.real_requests = real_requests
        self.lock = threading.Lock()
        self.outcomes = []  # (n, kind, Outcome)
        self.failures = []
        self.failed_ids = []  # ids of jobs whose answer was unexpected

    def run_one(self, client, kind, arg):
        flood = 32 << 10 if arg % 2 else 1 << 20
        if kind == "correct":
            return run_sync(client, "/evaluate", evaluate(), "success")
        if kind == "compare_correct":
            return run_sync(client, "/compare", compare(), "success")
        if kind == "async_correct":
            return run_async(client, evaluate(), "success")
        # Wrong results are judged against a reference: a compare, the fault on the candidate.
        if kind == "unwritten_outputs":
            return run_sync(client, "/compare",
                            compare({}, {"fault": "skip_half_outputs", "fault_side": "custom"}),
                            "kernel_failed")
        if kind == "compare_wrong_scale":
            return run_sync(client, "/compare", compare({}, {"scale": 3}), "kernel_failed")
        if kind == "modified_input":
            return run_sync(client, "/compare",
                            compare({}, {"fault": "modify_input", "fault_side": "custom"}),
                            "kernel_failed")
        faults = {"compile_error": "compile_error", "throw": "throw_in_launch",
                  "segfault": "segfault_in_launch", "abort": "abort_in_launch",
                  "exit_between_phases": "exit_after_compile",
                  "garbage_protocol": "garbage_protocol"}
        if kind in faults:
            return run_sync(client, "/evaluate", evaluate({"fault": faults[kind]}),
                            "kernel_failed")
        if kind == "fork_and_hang":
            return run_sync(client, "/evaluate", evaluate({"fault": "fork_and_hang"}), "success")
        if kind == "flood_stdout":
            return run_sync(client, "/evaluate",
                            evaluate({"fault": "flood_stdout", "flood_bytes": flood}), "success")
        if kind in ("hang_timeout", "hang_after_compile_timeout"):
            fault = "hang_in_launch" if kind == "hang_timeout" else "hang_after_compile"
            out = run_sync(client, "/evaluate", evaluate({"fault": fault}, timeout=0.3),
                           "infrastructure_failure")
            return Outcome("timed_out", out.job_id, out.verdict)
        if kind == "cancel":
            return run_cancel(client)
        if kind == "hostile":
            return run_hostile(client, self.hostile[arg % len(self.hostile)], self.socket_path)
        if kind == "real":
            name, request, path, expected = self.real_requests[arg]
            return run_sync(client, path, request, expected)
        raise ValueError(kind)

    def run_batch(self, kinds, first, last):
        next_job = [first]

        def worker():
            client = Client(self.socket_path)
            while True:
                with self.lock:
                    n = next_job[0]
                    next_job[0] += 1
                if n >= last:
                    break
                kind, arg = kinds[n]
                try:
                    outcome = self.run_one(client, kind, arg)
                except Exception as e:  # noqa: BLE001  every failure is reported, none retried
                    client.close()
                    with self.lock:
                        self.failures.append(f"job {n} ({kind}): {type(e).__name__}: {e}")
                        if getattr(e, "job_id", None):
                            self.failed_ids.append(e.job_id)
                    continue
                with self.lock:
                    self.outcomes.append((n, kind, outcome))
            client.close()

        threads = [threading.Thread(target=worker) for _ in range(self.args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


# --- the daemon ----------------------------------------------------------------------------------

def usage(pid):
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return fds, rss


def wait_for(condition, limit):
    """Polls `condition` (5 ms growing to 100 ms) until true or `limit` seconds; its last value."""
    deadline = time.monotonic() + limit
    pause = 0.005
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def real_requests_for(types, have_gpu):
    """examples/*.json that can run here, as (name, request, path, verdict): every kernel type
    usable and, without a GPU, CPU-capable, and no source that needs CUDA or Triton."""
    out, skipped = [], []
    for path in sorted((ROOT / "examples").glob("*.json")):
        request = json.loads(path.read_text())
        kernels = [request[k] for k in ("kernel", "ref_kernel", "custom_kernel") if k in request]
        missing = sorted({k["kernel_type"] for k in kernels} - set(types))
        if missing:
            skipped.append(f"{path.name} (cannot run {', '.join(missing)} here)")
            continue
        if not have_gpu and any("import triton" in k.get("source_code", "") or
                                ".cuda(" in k.get("source_code", "") for k in kernels):
            skipped.append(f"{path.name} (its source needs a GPU: Triton or CUDA)")
            continue
        request["num_trials"] = 5
        route = "/compare" if "ref_kernel" in request else "/evaluate"
        out.append((path.stem, request, route,
                    "kernel_failed" if "wrong" in path.stem else "success"))
    return out, skipped


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keval", default=str(ROOT / "build/bin/keval"))
    parser.add_argument("--plugin-path", default=str(ROOT / "build/lib/keval/test-plugins"),
                        help="KEVAL_PLUGIN_PATH for the daemon: where the fault plugin is")
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--clients", type=int, default=8, help="concurrent connections")
    parser.add_argument("--max-workers", type=int, default=max(4, 2 * (os.cpu_count() or 2)))
    parser.add_argument("--job-ttl", type=int, default=10, help="seconds (keval serve --job-ttl)")
    parser.add_argument("--max-body-mib", type=int, default=1, help="keval serve --max-body-bytes")
    parser.add_argument("--real-every", type=int, default=500,
                        help="one real-plugin example job every N jobs (0: none)")
    parser.add_argument("--rss-slack-mib", type=float, default=8.0)
    parser.add_argument("--serve-arg", action="append", default=[],
                        help="more arguments for keval serve (repeatable)")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the state directory and log")
    args = parser.parse_args()
    if args.jobs < 2 * BATCH:
        parser.error(f"--jobs must be at least {2 * BATCH} (first and last batch of {BATCH})")

    tmp = Path(tempfile.mkdtemp(prefix="keval-soak-"))
    # Traversable (not listable), as a state directory's parent must be for the job uid when
    # keval runs as root: else the user layer is skipped and the soak runs a sandbox no
    # deployment would.
    tmp.chmod(0o711)
    socket_path = str(tmp / "keval.sock")
    log_path = tmp / "serve.log"
    max_body = args.max_body_mib << 20
    env = dict(os.environ, KEVAL_PLUGIN_PATH=args.plugin_path)
    command = [args.keval, "serve", "--state-dir", str(tmp / "state"), "--socket", socket_path,
               "--max-workers", str(args.max_workers), "--job-ttl", str(args.job_ttl),
               "--max-body-bytes", str(max_body), "--log-level", "warning", *args.serve_arg]
    print("soak: " + " ".join(command), flush=True)
    with open(log_path, "wb") as log:
        daemon = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)
    failures = []
    try:
        def healthy():
            if daemon.poll() is not None:
                return True
            try:
                return Client(socket_path, timeout=10).request("GET", "/health")[0] == 200
            except OSError:
                return False
        if not wait_for(healthy, 120) or daemon.poll() is not None:
            raise SystemExit(f"soak: keval serve did not come up:\n{log_path.read_text()[-3000:]}")
        client = Client(socket_path)
        plugins = json.loads(client.request("GET", "/plugins")[1])["plugins"]
        have_gpu = bool(json.loads(client.request("GET", "/health")[1]).get("gpus"))
        # Types that can run here: every usable one with a GPU, the CPU-capable ones without.
        types = sorted(p["kernel_type"] for p in plugins if p.get("usable") and
                       (have_gpu or "cpu" in p.get("capabilities", [])))
        if "fault" not in types:
            raise SystemExit(f"soak: no usable 'fault' kernel type in {args.plugin_path} "
                             f"(kernel types: {types}); build the tests' plugins")
        real, skipped = real_requests_for(types, have_gpu) if args.real_every else ([], [])
        print(f"soak: kernel types {types}; real jobs every {args.real_every}: "
              f"{[r[0] for r in real]}" + (f"; skipped: {skipped}" if skipped else ""),
              flush=True)

        kinds = plan(args.jobs, args.real_every, real)
        soak = Soak(args, socket_path, max_body, real)
        marks = []  # (jobs done, fds, rss KiB, seconds)
        started = time.monotonic()
        first_fds = None
        for first in range(0, args.jobs, BATCH):
            last = min(first + BATCH, args.jobs)
            soak.run_batch(kinds, first, last)
            # A finished job's descriptors close just after its answer went out.
            if first_fds is None:
                readings = []

                def steady():
                    readings.append(usage(daemon.pid)[0])
                    return len(readings) >= 10 and len(set(readings[-10:])) == 1
                wait_for(steady, 30)
                fds, rss = usage(daemon.pid)
                first_fds = fds
            else:
                wait_for(lambda: usage(daemon.pid)[0] <= first_fds, 30)
                fds, rss = usage(daemon.pid)
            marks.append((last, fds, rss, time.monotonic() - started))
            print(f"soak: {last:>7} jobs  {last / marks[-1][3]:7.1f} jobs/s  fds {fds:4}  "
                  f"rss {rss / 1024:7.1f} MiB  failures {len(soak.failures)}", flush=True)
        elapsed = time.monotonic() - started
        stats = json.loads(client.request("GET", "/stats")[1])
        client.close()

        # --- checks ---
        failures += soak.failures[:20]
        if len(soak.failures) > 20:
            failures.append(f"... and {len(soak.failures) - 20} more failed jobs")
        answered = {n for n, _, _ in soak.outcomes}
        if len(answered) + len(soak.failures) != args.jobs or len(soak.outcomes) != len(answered):
            failures.append(f"{args.jobs} jobs sent, {len(soak.outcomes)} answered "
                            f"({len(answered)} distinct), {len(soak.failures)} failed")
        ids = [o.job_id for _, _, o in soak.outcomes if o.job_id] + soak.failed_ids
        duplicates = [i for i, c in Counter(ids).items() if c > 1]
        if duplicates:
            failures.append(f"{len(duplicates)} job ids given twice, e.g. {duplicates[:3]}")
        classes = Counter(o.cls for _, _, o in soak.outcomes)
        verdicts = Counter(o.verdict for _, _, o in soak.outcomes if o.verdict)
        jobs = stats["jobs"]
        expected_counts = {
            "submitted_total": len(ids), "finished_total": len(ids),
            "cancelled_total": classes["cancelled"], "timed_out_total": classes["timed_out"],
            "active": 0, "queued": 0}
        for key, want in expected_counts.items():
            if jobs.get(key) != want:
                failures.append(f"/stats jobs.{key} is {jobs.get(key)}, the client counted {want}")
        by_verdict = {k: v for k, v in jobs.get("finished_by_verdict", {}).items() if v}
        if by_verdict != dict(verdicts):
            failures.append(f"/stats finished_by_verdict {by_verdict} != client's {dict(verdicts)}")
        first_mark, middle_mark, last_mark = marks[0], marks[len(marks) // 2 - 1], marks[-1]
        if last_mark[1] > first_mark[1]:
            failures.append(f"descriptors grew: {first_mark[1]} after the first {BATCH} jobs, "
                            f"{last_mark[1]} after the last")
        if last_mark[2] > first_mark[2] + args.rss_slack_mib * 1024:
            failures.append(f"RSS grew: {first_mark[2]} KiB after the first {BATCH} jobs, "
                            f"{last_mark[2]} KiB after the last (slack {args.rss_slack_mib} MiB)")
        if daemon.poll() is not None:
            failures.append(f"keval serve exited with {daemon.returncode}")

        figures = {
            "jobs": args.jobs, "accepted_jobs": len(ids), "seconds": round(elapsed, 1),
            "jobs_per_s": round(args.jobs / elapsed, 1), "clients": args.clients,
            "max_workers": args.max_workers, "lost": args.jobs - len(answered) - len(soak.failures),
            "duplicated_ids": len(duplicates), "failed": len(soak.failures),
            "classes": dict(sorted(classes.items())), "verdicts": dict(sorted(verdicts.items())),
            "fds": {"start": first_mark[1], "middle": middle_mark[1], "end": last_mark[1]},
            "rss_kib": {"start": first_mark[2], "middle": middle_mark[2], "end": last_mark[2]},
            "batches": [{"jobs": m[0], "fds": m[1], "rss_kib": m[2], "s": round(m[3], 1)}
                        for m in marks],
        }
        print(f"soak: {args.jobs} jobs in {elapsed:.1f} s ({figures['jobs_per_s']} jobs/s), "
              f"{len(ids)} accepted by the daemon, {figures['lost']} lost, "
              f"{len(duplicates)} duplicated ids, {len(soak.failures)} unexpected answers")
        print(f"soak: classes {figures['classes']}")
        print(f"soak: fds start/middle/end {first_mark[1]}/{middle_mark[1]}/{last_mark[1]}; "
              f"RSS start/middle/end {first_mark[2] / 1024:.1f}/{middle_mark[2] / 1024:.1f}/"
              f"{last_mark[2] / 1024:.1f} MiB")
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGTERM)
            try:
                daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
        if failures:
            print("soak: FAILED:\n  " + "\n  ".join(failures))
            print(f"soak: the end of keval serve's log ({log_path}):\n"
                  + log_path.read_text(errors="replace")[-3000:])
        if args.keep or failures:
            print(f"soak: state and log kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
