"""A KernelBench run through a keval daemon: plan, submit with bounded concurrency, record.

The plan is every (problem, sample) of the selection that the output does not already hold a
verdict for; each is one ``POST /compare`` (the problem as the torch reference, the generation —
or, in baseline mode, the problem itself — as the candidate). ``jobs`` threads keep that many
requests in flight; the daemon queues them and runs them on its workers, and answers 503 when
its queue is full, which is waited out. Every finished sample is written at once (the full
response to ``responses/``, the entry to ``eval_results.json`` by rename), so a run that is
stopped — Ctrl-C, a crash, the machine taken away — loses at most what was in flight, and the
same command carries on where it stopped.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Optional

from . import dataset
from .progress import Progress
from .results import (RETRIED_CLASSES, atomic_write_json, baseline_timing, entry_from_response,
                      failure_entry, load_results, sorted_results, summarize)

__all__ = ["EXIT_INFRASTRUCTURE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "RunOptions",
           "Runner", "SubmitOutcome"]

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INFRASTRUCTURE = 3
EXIT_INTERRUPTED = 130

RUN_FORMAT = "keval-kernelbench-run/1"


@dataclass
class RunOptions:
    """What ``keval kernelbench run`` was asked to do (paths already absolute)."""

    kernelbench: str                     # the folder holding level{N}/
    level: int
    problems: Optional[List[int]]        # None: every problem of the level
    generations: Optional[str]           # the run directory; None in baseline mode
    out: str
    samples: int = 1
    jobs: int = 8
    num_trials: int = 100
    timeout: Optional[float] = None
    kernel_type: Optional[str] = None    # None: detected per generation
    request_extra: Dict[str, Any] = field(default_factory=dict)
    force: bool = False
    run_name: Optional[str] = None
    kernelbench_arg: Optional[str] = None  # as the user gave it, for keval_run.json

    @property
    def baseline(self) -> bool:
        return self.generations is None


@dataclass
class SubmitOutcome:
    """What one submission came back with: a response body, or an exception's description.

    ``response`` is keval's JSON body (any HTTP status that carried one); without one,
    ``failure_class`` and ``message`` say what went wrong on the way. ``daemon_gone`` marks a
    daemon that could not be reached at all, which stops the run.
    """

    response: Optional[Dict[str, Any]] = None
    http_status: Optional[int] = None
    gpu_type: Optional[str] = None
    failure_class: Optional[str] = None
    error_class: Optional[str] = None
    message: Optional[str] = None
    daemon_gone: bool = False


# Submits one request: (request) -> SubmitOutcome. The real one wraps keval.Client (__main__);
# tests may pass their own.
Submit = Callable[[Dict[str, Any]], SubmitOutcome]


@dataclass
class _Work:
    problem: dataset.Problem
    sample_id: int
    source: Optional[str]          # None: missing generation
    kernel_type: Optional[str]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Runner:
    """One run: ``plan()`` then ``run()``; ``summary()`` and ``run_record()`` after."""

    def __init__(self, options: RunOptions, submit: Submit, progress_stream=None,
                 tty: Optional[bool] = None, hardware: Optional[str] = None,
                 keval_version: Optional[str] = None):
        self.options = options
        self.submit = submit
        self.progress_stream = progress_stream
        self.tty = tty
        self.hardware = hardware
        self.keval_version = keval_version
        self.results_path = os.path.join(options.out, "eval_results.json")
        self.run_path = os.path.join(options.out, "keval_run.json")
        self.timing_path = os.path.join(options.out, "baseline_time_torch.json")
        self.responses_dir = os.path.join(options.out, "responses")
        self.results: Dict[str, List[Dict[str, Any]]] = {}
        self.problems: Dict[int, dataset.Problem] = {}
        self.selected: List[int] = []
        self.unknown_ids: List[int] = []
        self.work: List[_Work] = []
        self.skipped = 0
        self.submitted = 0
        self.started = _now()
        self.finished: Optional[str] = None
        self.wall_seconds = 0.0
        self.interrupted = False
        self.aborted: Optional[str] = None   # why infrastructure trouble stopped the run
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self.progress: Optional[Progress] = None

    # -- planning ----------------------------------------------------------------------------
    def plan(self) -> None:
        """Read the problems and the output so far; list what is left to evaluate.

        Raises ``dataset.DatasetError`` (usage) for a level folder that is not there, a
        selection that names no problem of it, and ``ValueError`` for an output file that is not
        KernelBench's shape.
        """
        o = self.options
        self.problems = dataset.load_problems(o.kernelbench, o.level)
        if not self.problems:
            raise dataset.DatasetError(f"--level {o.level}: no problems ({{id}}_{{Name}}.py) in "
                                       f"{os.path.join(o.kernelbench, f'level{o.level}')}")
        wanted = o.problems if o.problems is not None else sorted(self.problems)
        self.selected = [p for p in wanted if p in self.problems]
        self.unknown_ids = [p for p in wanted if p not in self.problems]
        if not self.selected:
            raise dataset.DatasetError(
                f"--problems: none of {_ids_text(wanted)} is a problem of level {o.level} "
                f"(it has {_ids_text(sorted(self.problems))})")
        self.results = load_results(self.results_path)
        other_levels = sorted({e.get("level") for v in self.results.values() for e in v
                               if isinstance(e, dict) and isinstance(e.get("level"), int)
                               and e.get("level") != o.level})
        if other_levels:
            # KernelBench keys results by problem id alone: two levels in one file collide.
            raise dataset.DatasetError(
                f"{self.results_path} holds level {other_levels[0]} results; give level "
                f"{o.level} an --out of its own")
        previous = self._previous_run_record()
        self.hardware = self.hardware or previous.get("hardware")
        self.keval_version = self.keval_version or previous.get("keval_version")
        for pid in self.selected:
            problem = self.problems[pid]
            for sample_id in range(o.samples):
                existing = self._existing(pid, sample_id)
                if o.baseline:
                    source: Optional[str] = None
                    kernel_type: Optional[str] = "torch"
                else:
                    path = dataset.find_generation(o.generations, o.level, pid, sample_id)
                    source = None
                    if path is not None:
                        with open(path, "r", encoding="utf-8", errors="replace") as f:
                            source = f.read()
                    kernel_type = (o.kernel_type or dataset.detect_kernel_type(source)
                                   if source is not None else o.kernel_type)
                if existing is not None and not o.force and not self._redo(existing, source,
                                                                          o.baseline):
                    self.skipped += 1
                    continue
                self.work.append(_Work(problem, sample_id, source, kernel_type))

    def _previous_run_record(self) -> Dict[str, Any]:
        """The keval_run.json a previous run left (what it learnt of the machine), or {}."""
        try:
            with open(self.run_path, "r", encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, ValueError):
            return {}
        return record if isinstance(record, dict) else {}

    def _existing(self, pid: int, sample_id: int) -> Optional[Dict[str, Any]]:
        for entry in self.results.get(str(pid), []):
            if isinstance(entry, dict) and entry.get("sample_id") == sample_id:
                return entry
        return None

    @staticmethod
    def _redo(entry: Dict[str, Any], source: Optional[str], baseline: bool) -> bool:
        """Evaluate again what is no verdict: keval's own failures, a generation now present."""
        cls = entry.get("failure_class")
        if cls in RETRIED_CLASSES:
            return True
        if cls == "missing_generation" and (baseline or source is not None):
            return True
        return False

    # -- running -----------------------------------------------------------------------------
    def run(self) -> int:
        """Evaluate the plan; the exit status (0, 3 when keval's trouble stopped it, 130)."""
        o = self.options
        os.makedirs(o.out, exist_ok=True)
        self._t0 = time.monotonic()
        self._write_run_record()
        self.progress = Progress(len(self.work), stream=self.progress_stream, tty=self.tty)
        if self.unknown_ids:
            self.progress.note(f"note: level {o.level} has no problems {_ids_text(self.unknown_ids)}"
                               f"; they are left out")
        if self.skipped:
            self.progress.note(f"resuming: {self.skipped} sample(s) already in "
                               f"{self.results_path} are kept (--force evaluates them again)")
        self.progress.start()
        pending: "queue.Queue[_Work]" = queue.Queue()
        for w in self.work:
            if w.source is None and not o.baseline:
                missing = dataset.generation_path(o.generations, o.level, w.problem.problem_id,
                                                  w.sample_id)
                self._record(w, failure_entry(
                    sample_id=w.sample_id, problem_name=w.problem.name, level=o.level,
                    kernel_type=w.kernel_type, failure_class="missing_generation",
                    hardware=self.hardware,
                    message=f"no generation {os.path.basename(missing)} in {o.generations}"),
                    evaluated=False)
            else:
                pending.put(w)
        threads = [threading.Thread(target=self._worker, args=(pending,), daemon=True,
                                    name=f"kernelbench-{i}")
                   for i in range(max(1, min(o.jobs, pending.qsize())))]
        try:
            # Started inside: Ctrl-C can come while Thread.start() waits for its thread, which
            # may already have run ahead.
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(timeout=0.5)
                    self.progress.tick()
        except KeyboardInterrupt:
            # Stop submitting; what finished is already on disk. Jobs in flight are abandoned:
            # their threads are daemons, and a daemon this process started goes with it.
            self.interrupted = True
            self._stop.set()
            self.progress.note("interrupted: no more submissions; finished samples are saved")
        self.progress.finish()
        self.finish()
        if self.interrupted:
            return EXIT_INTERRUPTED
        if self.aborted:
            return EXIT_INFRASTRUCTURE
        return EXIT_OK

    def _worker(self, pending: "queue.Queue[_Work]") -> None:
        while not self._stop.is_set():
            try:
                w = pending.get_nowait()
            except queue.Empty:
                return
            try:
                entry = self._evaluate(w)
            except Exception as e:  # noqa: BLE001 - one sample's trouble must not end its thread
                entry = failure_entry(
                    sample_id=w.sample_id, problem_name=w.problem.name, level=self.options.level,
                    kernel_type=w.kernel_type, failure_class="infrastructure",
                    error_class="client", message=f"{type(e).__name__}: {e}",
                    hardware=self.hardware)
            if entry is None:   # stopped while waiting out a full queue
                return
            if self._stop.is_set() and self.interrupted:
                return
            self._record(w, entry)

    def request_for(self, w: _Work) -> Dict[str, Any]:
        """The /compare request: the problem as the torch reference, the candidate beside it."""
        o = self.options
        reference = w.problem.read()
        if o.baseline:
            candidate, kernel_type = dataset.baseline_source(reference), "torch"
        else:
            assert w.source is not None
            candidate, kernel_type = w.source, w.kernel_type or "torch"
        request: Dict[str, Any] = {
            "ref_kernel": {"kernel_type": "torch", "source_code": reference},
            "custom_kernel": {"kernel_type": kernel_type, "source_code": candidate},
            "num_trials": o.num_trials,
        }
        if o.timeout is not None:
            request["timeout"] = o.timeout
        return _merge(request, o.request_extra)

    def _evaluate(self, w: _Work) -> Optional[Dict[str, Any]]:
        o = self.options
        request = self.request_for(w)
        kernel_type = request["custom_kernel"].get("kernel_type") \
            if isinstance(request.get("custom_kernel"), dict) else w.kernel_type
        pid = w.problem.problem_id
        rel = os.path.join("responses", f"level_{o.level}_problem_{pid}_sample_{w.sample_id}.json")
        delay = 1.0
        while True:
            if self._stop.is_set():
                return None
            with self._lock:
                self.submitted += 1
            outcome = self.submit(request)
            if outcome.http_status == 503 and outcome.failure_class == "busy":
                # The daemon's queue is full: wait and submit again (not a verdict).
                wait = outcome.response.get("retry_after") if outcome.response else None
                wait = float(wait) if isinstance(wait, (int, float)) and wait > 0 else delay
                delay = min(delay * 2, 30.0)
                with self._lock:
                    self.submitted -= 1
                if self._stop.wait(min(wait, 60.0)):
                    return None
                continue
            break
        if outcome.daemon_gone:
            with self._lock:
                # After Ctrl-C the daemon this run started is stopped under the jobs in flight:
                # that is no trouble of keval's to report.
                if not self.aborted and not self.interrupted:
                    self.aborted = outcome.message or "the daemon could not be reached"
                    if self.progress:
                        self.progress.note(f"keval daemon unreachable, stopping: {self.aborted}")
            self._stop.set()
        response_file = None
        if outcome.response is not None:
            atomic_write_json(os.path.join(o.out, rel), outcome.response, indent=1)
            response_file = rel
            if any(k in outcome.response for k in ("kernel_exec_result", "error", "job_id")):
                return entry_from_response(
                    sample_id=w.sample_id, problem_name=w.problem.name, level=o.level,
                    kernel_type=kernel_type, response=outcome.response,
                    http_status=outcome.http_status, gpu_type=outcome.gpu_type,
                    response_file=response_file, hardware=self.hardware)
        return failure_entry(
            sample_id=w.sample_id, problem_name=w.problem.name, level=o.level,
            kernel_type=kernel_type, failure_class=outcome.failure_class or "infrastructure",
            error_class=outcome.error_class, message=outcome.message or "no response",
            hardware=self.hardware, response_file=response_file)

    def _record(self, w: _Work, entry: Dict[str, Any], evaluated: bool = True) -> None:
        """Add a finished sample and write the results at once (atomically)."""
        pid = w.problem.problem_id
        with self._lock:
            if self.hardware is None and entry.get("metadata", {}).get("hardware"):
                self.hardware = entry["metadata"]["hardware"]
            entries = [e for e in self.results.get(str(pid), [])
                       if not (isinstance(e, dict) and e.get("sample_id") == w.sample_id)]
            entries.append(entry)
            self.results[str(pid)] = entries
            self.results = sorted_results(self.results)
            atomic_write_json(self.results_path, self.results)
            if self.options.baseline:
                self._write_timing()
        if self.progress:
            self.progress.update(pid, w.sample_id, entry, evaluated)

    def _write_timing(self) -> None:
        existing = None
        if os.path.exists(self.timing_path):
            try:
                with open(self.timing_path, "r", encoding="utf-8") as f:
                    existing = json.load(f)
            except (OSError, ValueError):
                existing = None
        if not isinstance(existing, dict):
            existing = None
        atomic_write_json(self.timing_path, baseline_timing(self.results, self.options.level,
                                                            existing))

    def finish(self) -> None:
        """Write the final results, timing table and run record (also when nothing ran)."""
        with self._lock:
            self.finished = _now()
            self.wall_seconds = time.monotonic() - self._t0
            atomic_write_json(self.results_path, sorted_results(self.results))
            if self.options.baseline:
                self._write_timing()
            self._write_run_record()

    # -- reporting ---------------------------------------------------------------------------
    def summary(self) -> Dict[str, Any]:
        return summarize(self.results, self.selected)

    def run_record(self) -> Dict[str, Any]:
        o = self.options
        s = self.summary()
        run_name = o.run_name or (os.path.basename(os.path.normpath(o.generations))
                                  if o.generations else f"baseline-level{o.level}")
        return {
            "format": RUN_FORMAT,
            "mode": "baseline" if o.baseline else "generations",
            "run_name": run_name,
            "level": o.level,
            "kernelbench": o.kernelbench_arg or o.kernelbench,
            "generations": o.generations,
            "problems": self.selected,
            "samples": o.samples,
            "num_trials": o.num_trials,
            "started": self.started,
            "finished": self.finished,
            "wall_seconds": round(self.wall_seconds, 3),
            "hardware": self.hardware,
            "keval_version": self.keval_version,
            "interrupted": self.interrupted,
            "aborted": self.aborted,
            "counts": s["counts"],
        }

    def _write_run_record(self) -> None:
        atomic_write_json(self.run_path, self.run_record())

    def summary_text(self) -> str:
        """The closing lines: counts, fast_p, the speedups' geometric mean, where things are."""
        o = self.options
        s = self.summary()
        c = s["counts"]
        lines = []
        state = ("interrupted" if self.interrupted else
                 "stopped (keval unreachable)" if self.aborted else "done")
        lines.append(f"kernelbench level {o.level} "
                     f"({'baseline' if o.baseline else 'generations'}): {state} in "
                     f"{_fmt_seconds(self.wall_seconds)}; {self.submitted} submitted, "
                     f"{self.skipped} kept from before")
        lines.append(f"  samples {c['total']}: {c['compiled']} compiled, {c['correct']} correct")
        if c["failed_by_class"]:
            lines.append("  failed: " + ", ".join(f"{k} {v}"
                                                  for k, v in c["failed_by_class"].items()))
        fast = ", ".join(f"{k} {s[k]:.3f}" if s[k] is not None else f"{k} -"
                         for k in ("fast_0", "fast_1"))
        gm = (f"{s['geomean_speedup']:.3f}x over {s['speedups_counted']} correct sample(s)"
              if s["geomean_speedup"] is not None else "none (no correct sample was timed)")
        lines.append(f"  over {s['problems']} problem(s): {fast}; geometric-mean speedup {gm}")
        retried = sum(v for k, v in c["failed_by_class"].items() if k in RETRIED_CLASSES)
        if retried:
            lines.append(f"  {retried} sample(s) hit keval trouble (timeout or infrastructure): "
                         f"they are recorded, and the same command evaluates them again")
        if self.aborted:
            lines.append(f"  stopped: {self.aborted}")
        if self.interrupted or self.aborted:
            lines.append("  the same command carries on where this run stopped")
        lines.append(f"  results: {self.results_path}")
        if o.baseline:
            lines.append(f"  reference times: {self.timing_path}")
        lines.append(f"  responses: {self.responses_dir}/")
        lines.append(f"  next: keval report {self.results_path}")
        return "\n".join(lines)


def _merge(base: Dict[str, Any], extra: Dict[str, Any]) -> Dict[str, Any]:
    """``extra`` laid over ``base``, objects merged key by key: ``--request-extra
    '{"custom_kernel": {"metadata": {...}}}'`` adds to the candidate, not replaces it."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _fmt_seconds(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def _ids_text(ids: List[int]) -> str:
    """``1-3,7``: a list of ids as ranges, short enough for a message."""
    if not ids:
        return "none"
    parts = []
    start = prev = ids[0]
    for i in list(ids[1:]) + [None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(parts)
