"""Evaluate a ComputeEval solutions datapack (or the problems' baselines) through keval.

One ``cuda_program`` job per solution goes to a keval daemon (``POST /evaluate``,
docs/cuda_program.md), ``jobs`` at a time. Each answer becomes one line of ComputeEval's
GradedSolution JSONL the moment it arrives, with keval's details in an extra ``"keval"`` key, so
an interrupted run resumes where it stopped: lines already in the output file (identified by
``keval.datapack``, ``keval.solution_index`` and ``task_id``) are kept and not submitted again,
except those that recorded an error of keval's, which are run again. At the end the metrics
(pass@k overall, by group and by difficulty, and the performance summary with ``benchmark``) are
printed and written to ``<output>.metrics.json``.

Exit codes: 0 the run completed (failing solutions included), 2 bad input (a datapack that is
corrupt or does not fit, an output file of another run, a request keval refused for the
problem's sake), 3 keval failed (a job's infrastructure failure, after one retry; a daemon that
cannot be started or reached).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, TextIO, Tuple

from .._daemon import DaemonError, LocalDaemon, UnixClient, retry_after_seconds
from .datapack import (
    DatapackError,
    datapack_name,
    read_problems,
    read_solutions,
)
from .passk import summarize

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_INFRASTRUCTURE",
    "EXIT_OK",
    "EvaluateOptions",
    "InputError",
    "Job",
    "build_request",
    "default_timeout",
    "evaluate",
    "graded_from_response",
    "plan_jobs",
]

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INFRASTRUCTURE = 3
EXIT_INTERRUPTED = 130

KERNEL_TYPE = "cuda_program"
# ComputeEval's defaults when a problem sets no timeout_seconds: per build and test command, and
# per benchmark run.
DEFAULT_COMMAND_TIMEOUT = 60.0
DEFAULT_BENCHMARK_TIMEOUT = 300.0
BENCHMARK_RUNS_PER_SIDE = 3  # docs/cuda_program.md: three runs each, alternately
INFRASTRUCTURE_RETRIES = 1


class InputError(Exception):
    """Bad input: the message is for the user; the exit code is 2."""


class InfrastructureError(Exception):
    """keval could not be started or reached: the exit code is 3."""


@dataclass
class EvaluateOptions:
    problems: str
    solutions: Optional[str] = None
    k: Sequence[int] = (1,)
    jobs: Optional[int] = None  # None: as many as the daemon runs at once (/health max_active)
    daemon: Optional[str] = None
    baseline: bool = False
    benchmark: bool = False
    output: Optional[str] = None
    timeout: Optional[float] = None
    keval_bin: Optional[str] = None
    daemon_args: Sequence[str] = ()
    busy_timeout: float = 3600.0
    retry_delay: float = 1.0  # before the retry of an infrastructure failure
    progress: Optional[bool] = None  # None: a bar when stderr is a TTY
    harness_reuse: bool = True  # False: every solution built with the plain build command


@dataclass
class Job:
    datapack: str
    solution_index: int
    task_id: str
    solution: Dict[str, Any]
    problem: Dict[str, Any]

    @property
    def key(self) -> Tuple[str, int, str]:
        return (self.datapack, self.solution_index, self.task_id)


@dataclass
class Plan:
    jobs: List[Job]
    datapack: str
    problems_path: str
    groups: Optional[List[str]]
    default_output: str
    warnings: List[str] = field(default_factory=list)


# -- planning ----------------------------------------------------------------------------------

def plan_jobs(options: EvaluateOptions) -> Plan:
    """Read the datapacks and make one job per solution (per problem with ``baseline``)."""
    try:
        if options.baseline:
            return _plan_baseline(options)
        if not options.solutions:
            raise InputError("--solutions is required (or --baseline, to evaluate the problems' "
                             "own baseline solutions)")
        solutions = read_solutions(options.solutions)
        problems = read_problems(options.problems, groups=solutions.groups)
    except DatapackError as e:
        raise InputError(str(e)) from e
    if solutions.release != problems.release:
        raise InputError(f"solutions datapack {options.solutions} is of release "
                         f"{solutions.release!r}, problems datapack {options.problems} of "
                         f"{problems.release!r}")
    name = solutions.name
    if not problems.problems:
        raise InputError(f"{options.problems}: no problems"
                         + (f" in groups {', '.join(solutions.groups)}"
                            if solutions.groups is not None else ""))
    keyed = {p["task_id"]: p for p in problems.problems}
    with_solutions = {s["task_id"] for s in solutions.solutions}
    missing = sorted(set(keyed) - with_solutions)
    if missing:
        raise InputError(f"The following task_ids are missing in the solutions datapack {name}: "
                         f"{', '.join(missing)}")
    unknown = sorted(with_solutions - set(keyed))
    if unknown:
        raise InputError(f"solutions datapack {name} has solutions for task_ids that "
                         f"{options.problems} does not hold"
                         + (" in the groups the solutions datapack names"
                            if solutions.groups is not None else "")
                         + f": {', '.join(unknown)}")
    jobs = [Job(name, i, s["task_id"], s, keyed[s["task_id"]])
            for i, s in enumerate(solutions.solutions)]
    return Plan(jobs, name, options.problems, solutions.groups,
                f"{name}-graded-solutions.jsonl")


def _plan_baseline(options: EvaluateOptions) -> Plan:
    problems = read_problems(options.problems)
    name = f"{datapack_name(options.problems)}-baseline"
    jobs: List[Job] = []
    without: List[str] = []
    for i, p in enumerate(problems.problems):
        baseline = p.get("baseline_solution")
        if baseline is None:
            without.append(p["task_id"])
            continue
        if baseline.get("task_id") != p["task_id"]:
            raise InputError(f"{options.problems}: the baseline_solution of {p['task_id']!r} is "
                             f"for task_id {baseline.get('task_id')!r}")
        jobs.append(Job(name, i, p["task_id"], baseline, p))
    if not jobs:
        raise InputError(f"{options.problems}: no problem has a baseline_solution")
    warnings = []
    if without:
        warnings.append(f"{len(without)} problems have no baseline_solution and are not "
                        f"evaluated: {', '.join(without)}")
    return Plan(jobs, name, options.problems, None, f"{name}-graded-solutions.jsonl", warnings)


def default_timeout(problem: Dict[str, Any], benchmark: bool) -> float:
    """A job's limit when ``--timeout`` gives none: every command the job may run, at the
    problem's own per-command limit (ComputeEval's defaults when it sets none), plus a margin."""
    per_command = problem.get("timeout_seconds") or DEFAULT_COMMAND_TIMEOUT
    total = 2 * per_command + 60.0  # build, test
    if benchmark and problem.get("benchmark_command"):
        per_run = problem.get("timeout_seconds") or DEFAULT_BENCHMARK_TIMEOUT
        total += per_command + 2 * BENCHMARK_RUNS_PER_SIDE * per_run  # the baseline's build
    return float(total)


def build_request(job: Job, benchmark: bool, timeout: float,
                  harness_reuse: bool = True) -> Dict[str, Any]:
    """The ``POST /evaluate`` body of a job (docs/cuda_program.md)."""
    return {
        "kernel": {
            "kernel_type": KERNEL_TYPE,
            "source_code": "",
            "metadata": {"problem": job.problem, "solution": job.solution,
                         "benchmark": bool(benchmark), "harness_reuse": bool(harness_reuse)},
        },
        "timeout": timeout,
    }


# -- one job -----------------------------------------------------------------------------------

@dataclass
class Outcome:
    """What the daemon answered for a job, after retries."""
    http_status: Optional[int]
    body: Dict[str, Any]
    attempts: int
    seconds: float
    error: Optional[Dict[str, Any]] = None  # an error of keval's (or of the request), not a verdict
    rejected: Optional[Dict[str, Any]] = None  # a 400 about the solution: the solution fails


def _retry_after(headers: Dict[str, str], default: float = 5.0) -> float:
    seconds = retry_after_seconds(headers)
    return min(max(default if seconds is None else seconds, 0.1), 60.0)


def _error_of(body: Dict[str, Any]) -> Dict[str, Any]:
    error = body.get("error")
    return error if isinstance(error, dict) else {}


def submit(client: UnixClient, request: Dict[str, Any], http_timeout: Optional[float],
           busy_timeout: float, stop: Optional[threading.Event] = None,
           retry_delay: float = 1.0, sleep=time.sleep) -> Outcome:
    """POST the request; wait out 503s (Retry-After), retry an infrastructure failure once."""
    start = time.monotonic()
    attempts = 0
    failures = 0
    while True:
        attempts += 1
        error: Optional[Dict[str, Any]] = None
        status: Optional[int] = None
        body: Dict[str, Any] = {}
        try:
            status, body, headers = client.post_json("/evaluate", request, timeout=http_timeout)
        except DaemonError as e:
            error = {"class": "connection", "message": str(e)}
        else:
            err = _error_of(body)
            if status == 503:
                if time.monotonic() - start < busy_timeout and not (stop and stop.is_set()):
                    sleep(_retry_after(headers))
                    attempts -= 1  # waiting for room is not an attempt
                    continue
                error = {"class": err.get("class", "unavailable"),
                         "message": f"the daemon stayed busy (503) for {busy_timeout:g} s: "
                                    f"{err.get('message', '')}".rstrip(": ")}
            elif status in (400, 413, 422) or err.get("class") == "bad_request":
                path = str(err.get("path") or "")
                message = str(err.get("message") or err.get("detail") or body.get("raw") or "")
                seconds = time.monotonic() - start
                if path.startswith("kernel.metadata.solution"):
                    return Outcome(status, body, attempts, seconds,
                                   rejected={"path": path, "message": message})
                return Outcome(status, body, attempts, seconds,
                               error={"class": "bad_request", "path": path, "message": message})
            elif status == 200 and body.get("status") != "failed":
                return Outcome(status, body, attempts, time.monotonic() - start)
            else:
                message = err.get("message") or err.get("detail") or body.get("raw") or \
                    json.dumps(body)[:2000]
                error = {"class": err.get("class", "infrastructure" if status == 500 else "http"),
                         "message": f"HTTP {status}: {message}"}
        failures += 1
        if failures > INFRASTRUCTURE_RETRIES or (stop and stop.is_set()):
            return Outcome(status, body, attempts, time.monotonic() - start, error=error)
        sleep(retry_delay)


def _join_output(stdout: Any, stderr: Any) -> str:
    parts = [p for p in (stdout, stderr) if isinstance(p, str) and p]
    if len(parts) == 2 and not parts[0].endswith("\n"):
        return parts[0] + "\n" + parts[1]
    return "".join(parts)


def _describe_test_failure(test: Dict[str, Any]) -> Optional[str]:
    if test.get("timed_out"):
        seconds = test.get("seconds")
        return ("[keval] the test timed out" +
                (f" after {seconds:.1f} s" if isinstance(seconds, (int, float)) else ""))
    sig = test.get("signal")
    if sig not in (None, 0, ""):
        name = ""
        if isinstance(sig, int) and not isinstance(sig, bool):
            try:
                name = f" ({signal.Signals(sig).name})"
            except ValueError:
                pass
        return f"[keval] the test was killed by signal {sig}{name}"
    code = test.get("exit_code")
    if isinstance(code, int) and 128 < code < 128 + 65:
        # The test runs under sh, which reports a program killed by signal N as 128 + N.
        try:
            name = f" ({signal.Signals(code - 128).name})"
        except ValueError:
            name = ""
        return (f"[keval] the test exited with code {code}: the shell's report of a program "
                f"killed by signal {code - 128}{name}")
    if isinstance(code, int) and code != 0:
        return f"[keval] the test exited with code {code}"
    return None


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def graded_from_response(job: Job, outcome: Outcome, benchmark: bool) -> Dict[str, Any]:
    """A ComputeEval GradedSolution (a dict, in its field order) plus keval's ``"keval"`` key."""
    body = outcome.body if isinstance(outcome.body, dict) else {}
    ker = body.get("kernel_exec_result") if isinstance(body.get("kernel_exec_result"), dict) else {}
    meta = ker.get("metadata") if isinstance(ker.get("metadata"), dict) else {}
    program = meta.get("program") if isinstance(meta.get("program"), dict) else {}

    skip_reason = program.get("skipped")
    skipped = bool(skip_reason) or body.get("status") == "skipped"
    compiled = bool(ker.get("compiled"))
    correct = bool(ker.get("correctness"))
    passed = compiled and correct and not skipped

    build = program.get("build") if isinstance(program.get("build"), dict) else {}
    build_output = build.get("output") if build else None
    if build_output is None and isinstance(body.get("compilation_error"), str):
        build_output = body["compilation_error"]

    refs = program.get("source_references") if isinstance(program.get("source_references"),
                                                          dict) else {}
    test = program.get("test") if isinstance(program.get("test"), dict) else {}
    validation_error = body.get("validation_error")
    test_output: Optional[str] = None
    if refs.get("passed") is False:
        # As ComputeEval reports it (no build ran), with the names keval found missing and its
        # message (keval puts it in compilation_error: nothing was compiled).
        missing = [str(m) for m in refs.get("missing") or []]
        test_output = ("[VALIDATION ERROR] Solution does not include required source references"
                       + (f": missing {', '.join(missing)}" if missing else "."))
        for detail in (validation_error, body.get("compilation_error")):
            if isinstance(detail, str) and detail and detail not in test_output:
                test_output += "\n" + detail
                break
        if not build:
            build_output = None
    elif test:
        test_output = _join_output(test.get("stdout"), test.get("stderr"))
        if not passed and not skipped:
            note = _describe_test_failure(test)
            if note is None and isinstance(validation_error, str) and validation_error:
                note = validation_error
            if note and note not in test_output:
                test_output = (test_output + ("\n" if test_output and not
                                              test_output.endswith("\n") else "") + note)
    elif isinstance(validation_error, str) and validation_error:
        test_output = validation_error
    if skipped and not build:
        build_output = None  # keval gives the reason as its compilation_error: nothing was built

    bench = program.get("benchmark") if isinstance(program.get("benchmark"), dict) else {}
    side = bench.get("solution") if isinstance(bench.get("solution"), dict) else {}
    base = bench.get("baseline") if isinstance(bench.get("baseline"), dict) else {}
    benchmark_output = bench.get("error") if isinstance(bench.get("error"), str) else None
    speedup = _number(body.get("speedup"))
    if speedup is None:
        speedup = _number(bench.get("speedup"))

    extras: Dict[str, Any] = {
        "datapack": job.datapack,
        "solution_index": job.solution_index,
        "job_id": body.get("job_id"),
        "status": body.get("status") if isinstance(body.get("status"), str) else None,
        "benchmark": bool(benchmark),
        "seconds": round(outcome.seconds, 3),
        "attempts": outcome.attempts,
    }
    if skip_reason:
        extras["skip_reason"] = skip_reason if isinstance(skip_reason, str) else str(skip_reason)
    cache = build.get("cache") if isinstance(build.get("cache"), dict) else {}
    if "reused" in cache:
        # The program was one an earlier job built from identical files (docs/cuda_program.md).
        extras["build_reused"] = bool(cache["reused"])
    if outcome.rejected is not None:
        passed = False
        skipped = False
        extras["rejected"] = outcome.rejected
        build_output = (f"[VALIDATION ERROR] {outcome.rejected['path']}: "
                        f"{outcome.rejected['message']}")
    if outcome.error is not None:
        passed = False
        skipped = False
        extras["error"] = outcome.error
        if outcome.http_status is not None:
            extras["http_status"] = outcome.http_status

    return {
        "task_id": job.task_id,
        "passed": passed,
        "skipped": skipped,
        "solution": job.solution,
        "problem": job.problem,
        "build_output": build_output,
        "test_output": test_output,
        "benchmark_output": benchmark_output,
        "solution_metrics": side.get("metrics"),
        "solution_time": _number(side.get("time_ms")),
        "baseline_metrics": base.get("metrics"),
        "baseline_time": _number(base.get("time_ms")),
        "speedup": speedup,
        "keval": extras,
    }


def _client_error_entry(job: Job, benchmark: bool, exc: BaseException) -> Dict[str, Any]:
    outcome = Outcome(None, {}, 0, 0.0, error={
        "class": "client", "message": "".join(traceback.format_exception_only(type(exc), exc))
        .strip()})
    return graded_from_response(job, outcome, benchmark)


# -- output and resume -------------------------------------------------------------------------

def _dump(entry: Dict[str, Any]) -> str:
    try:
        text = json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate somewhere: keep it as an escape
        text = json.dumps(entry, ensure_ascii=True, separators=(",", ":"))
    return text + "\n"


def _key_of(entry: Dict[str, Any]) -> Optional[Tuple[str, int, str]]:
    extras = entry.get("keval")
    if not isinstance(extras, dict):
        return None
    datapack = extras.get("datapack")
    index = extras.get("solution_index")
    task_id = entry.get("task_id")
    if not isinstance(datapack, str) or not isinstance(index, int) or not isinstance(task_id, str):
        return None
    return (datapack, index, task_id)


@dataclass
class Resumed:
    entries: Dict[Tuple[str, int, str], Dict[str, Any]]
    rerun: int = 0       # entries with an error of keval's, submitted again
    dropped: int = 0     # unreadable lines (an interrupted write) and duplicates
    rewritten: bool = False


def load_resume(path: str, jobs: Sequence[Job], benchmark: bool) -> Resumed:
    """The graded solutions an earlier run left in ``path`` that this run keeps.

    An entry of another run (a key this run does not have, another solution or problem at that
    key, or the other ``benchmark`` setting) is an ``InputError``. Entries that recorded an error
    of keval's are left out, to be run again; then the file is rewritten with the kept lines.
    """
    resumed = Resumed({})
    if not os.path.exists(path):
        return resumed
    planned = {job.key: job for job in jobs}
    kept_lines: List[str] = []
    try:
        with open(path, "r", encoding="utf-8", errors="surrogateescape") as f:
            lines = f.readlines()
    except OSError as e:
        raise InputError(f"--output {path}: {e.strerror or e}") from e
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            if not isinstance(entry, dict):
                raise ValueError("not an object")
        except ValueError:
            # An interrupted write leaves a last line cut short; anything else is not ours.
            if number == len(lines) and not line.endswith("\n"):
                resumed.dropped += 1
                continue
            raise InputError(f"--output {path} line {number} is not a JSON object: is it a "
                             "graded-solutions file of keval's? Choose another --output") from None
        key = _key_of(entry)
        if key is None:
            raise InputError(f"--output {path} line {number} has no keval key (datapack, "
                             "solution_index, task_id): not written by keval; choose another "
                             "--output")
        job = planned.get(key)
        if job is None:
            raise InputError(f"--output {path} line {number} is the result of solution "
                             f"{key[1]} ({key[2]}) of datapack {key[0]!r}, which this run does not "
                             "evaluate: choose another --output, or remove the file")
        if entry.get("solution") != job.solution or entry.get("problem") != job.problem:
            raise InputError(f"--output {path} line {number}: solution {key[1]} ({key[2]}) of "
                             f"{key[0]!r} differs from this run's (another version of the "
                             "datapacks?): choose another --output, or remove the file")
        if bool(entry["keval"].get("benchmark")) != bool(benchmark):
            raise InputError(f"--output {path} line {number} was evaluated "
                             f"{'with' if entry['keval'].get('benchmark') else 'without'} "
                             f"--benchmark; this run is {'with' if benchmark else 'without'} it: "
                             "choose another --output")
        if key in resumed.entries:
            resumed.dropped += 1
            continue
        if entry["keval"].get("error"):
            resumed.rerun += 1
            continue
        resumed.entries[key] = entry
        kept_lines.append(line if line.endswith("\n") else line + "\n")
    if resumed.rerun or resumed.dropped:
        directory = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".graded-", suffix=".jsonl", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.writelines(kept_lines)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        resumed.rewritten = True
    return resumed


# -- progress ----------------------------------------------------------------------------------

def _clock(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class Progress:
    """done/total, passed, failed, skipped and elapsed time on stderr: a ``\\r`` bar on a TTY,
    else a line at every 10 %."""

    WIDTH = 24

    def __init__(self, total: int, stream: TextIO, tty: Optional[bool] = None):
        self.total = total
        self.stream = stream
        if tty is None:
            isatty = getattr(stream, "isatty", None)
            tty = bool(isatty and isatty())
        self.tty = tty
        self.start = time.monotonic()
        self.done = self.passed = self.failed = self.skipped = self.errors = 0
        self._last_decile = 0
        self._shown = False

    def add(self, entry: Dict[str, Any]) -> None:
        self.done += 1
        extras = entry.get("keval") or {}
        if extras.get("error"):
            self.errors += 1
        elif entry.get("skipped"):
            self.skipped += 1
        elif entry.get("passed"):
            self.passed += 1
        else:
            self.failed += 1
        self.show()

    def _counts(self) -> str:
        text = (f"{self.done}/{self.total}  passed {self.passed}  failed {self.failed}  "
                f"skipped {self.skipped}")
        if self.errors:
            text += f"  keval errors {self.errors}"
        return text + f"  {_clock(time.monotonic() - self.start)}"

    def show(self) -> None:
        if self.total <= 0:
            return
        if self.tty:
            filled = self.WIDTH * self.done // self.total
            bar = "#" * filled + "." * (self.WIDTH - filled)
            self.stream.write(f"\r[{bar}] {self._counts()}\x1b[K")
            self.stream.flush()
            self._shown = True
            return
        decile = 10 * self.done // self.total
        if decile > self._last_decile:
            self._last_decile = decile
            self.stream.write(f"compute-eval: {10 * decile}%  {self._counts()}\n")
            self.stream.flush()

    def finish(self) -> None:
        if self.tty and self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False


# -- the run -----------------------------------------------------------------------------------

class _Connection:
    """The daemon of the run: the one at ``--daemon``, else a LocalDaemon."""

    def __init__(self, options: EvaluateOptions, log: TextIO):
        self.options = options
        self.log = log
        self.local: Optional[LocalDaemon] = None
        self.socket_path: Optional[str] = None
        self.max_active: Optional[int] = None  # jobs the daemon runs at once, as /health says

    def __enter__(self) -> "_Connection":
        if self.options.daemon:
            self.socket_path = self.options.daemon
        else:
            self.local = LocalDaemon(keval_bin=self.options.keval_bin,
                                     extra_args=self.options.daemon_args)
            try:
                self.local.start()
            except DaemonError as e:
                raise InfrastructureError(str(e)) from e
            self.socket_path = self.local.socket_path
            self.log.write(f"compute-eval: started keval serve on {self.socket_path}\n")
        client = UnixClient(self.socket_path, timeout=30.0)
        try:
            status, health, _ = client.get_json("/health")
        except DaemonError as e:
            self.__exit__(None, None, None)
            raise InfrastructureError(f"no keval daemon answers on {self.socket_path}: {e}") from e
        if status != 200:
            self.__exit__(None, None, None)
            raise InfrastructureError(f"the keval daemon on {self.socket_path} is not healthy "
                                      f"(GET /health: {status} {health})")
        plugins = health.get("plugins")
        if isinstance(plugins, list) and KERNEL_TYPE not in plugins:
            self.__exit__(None, None, None)
            raise InfrastructureError(f"the keval daemon on {self.socket_path} has no "
                                      f"{KERNEL_TYPE} kernel type (it has: "
                                      f"{', '.join(map(str, plugins)) or 'none'})")
        jobs = health.get("jobs")
        if isinstance(jobs, dict) and isinstance(jobs.get("max_active"), int) \
                and jobs["max_active"] > 0:
            self.max_active = jobs["max_active"]
        return self

    def jobs_at_once(self, asked: Optional[int]) -> int:
        """``--jobs`` when given; else enough to keep the daemon's workers busy (builds run in
        parallel while GPUs test); else ComputeEval's own default, 4, for a daemon that does
        not say how many it runs."""
        if asked is not None:
            return asked
        return self.max_active if self.max_active is not None else 4

    def __exit__(self, *exc) -> None:
        if self.local is not None:
            local, self.local = self.local, None
            local.stop()

    def log_tail(self) -> str:
        return self.local.log_tail() if self.local is not None else ""


def evaluate(options: EvaluateOptions, stdout: TextIO = None, stderr: TextIO = None) -> int:
    """Run an evaluation; returns the exit code (see the module's docstring)."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        return _evaluate(options, stdout, stderr)
    except InputError as e:
        stderr.write(f"compute-eval: error: {e}\n")
        return EXIT_BAD_INPUT
    except InfrastructureError as e:
        stderr.write(f"compute-eval: keval failed: {e}\n")
        return EXIT_INFRASTRUCTURE
    except KeyboardInterrupt:
        stderr.write("\ncompute-eval: interrupted\n")
        return EXIT_INTERRUPTED


def _evaluate(options: EvaluateOptions, stdout: TextIO, stderr: TextIO) -> int:
    started = time.monotonic()
    if options.jobs is not None and options.jobs < 1:
        raise InputError("--jobs must be at least 1")
    if not options.k or any(k < 1 for k in options.k):
        raise InputError("--k: each k must be a positive integer")
    plan = plan_jobs(options)
    for warning in plan.warnings:
        stderr.write(f"compute-eval: warning: {warning}\n")
    output = options.output or os.path.join(os.getcwd(), plan.default_output)
    metrics_path = output + ".metrics.json"

    resumed = load_resume(output, plan.jobs, options.benchmark)
    todo = [job for job in plan.jobs if job.key not in resumed.entries]
    if resumed.entries or resumed.rerun or resumed.dropped:
        note = f"compute-eval: resumed {len(resumed.entries)} of {len(plan.jobs)} graded " \
               f"solutions from {output}"
        if resumed.rerun:
            note += f"; {resumed.rerun} that recorded an error of keval's are run again"
        if resumed.dropped:
            note += f"; {resumed.dropped} unreadable or repeated lines dropped"
        stderr.write(note + "\n")

    results: List[Dict[str, Any]] = list(resumed.entries.values())
    interrupted = False
    if todo:
        try:
            out = open(output, "a", encoding="utf-8")
        except OSError as e:
            raise InputError(f"--output {output}: {e.strerror or e}") from e
        with out, _Connection(options, stderr) as connection:
            jobs = connection.jobs_at_once(options.jobs)
            stderr.write(f"compute-eval: {len(todo)} solutions of {plan.datapack} to evaluate, "
                         f"{min(jobs, len(todo))} at a time\n")
            interrupted = _run_jobs(options, jobs, todo, connection, out, results, stderr)

    if interrupted:
        stderr.write(f"compute-eval: interrupted; {len(results)} of {len(plan.jobs)} graded "
                     f"solutions are in {output}: run the same command again to resume\n")
        return EXIT_INTERRUPTED

    metrics = summarize(results, options.k, groups=plan.groups, performance=options.benchmark)
    errors = [r["keval"]["error"] for r in results if (r.get("keval") or {}).get("error")]
    infra = sum(1 for e in errors if e.get("class") != "bad_request")
    refused = len(errors) - infra
    metrics["keval"] = {
        "datapack": plan.datapack,
        "problems_datapack": os.path.basename(plan.problems_path),
        "output": output,
        "solutions": len(results),
        "passed": sum(1 for r in results if r.get("passed")),
        "failed": sum(1 for r in results if not r.get("passed") and not r.get("skipped")
                      and not (r.get("keval") or {}).get("error")),
        "skipped": sum(1 for r in results if r.get("skipped")),
        "infrastructure_failures": infra,
        "request_errors": refused,
        "resumed": len(resumed.entries),
        "seconds": round(time.monotonic() - started, 3),
    }
    text = json.dumps(metrics, indent=2)
    stdout.write(text + "\n")
    stdout.flush()
    try:
        with open(metrics_path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    except OSError as e:
        raise InputError(f"cannot write {metrics_path}: {e.strerror or e}") from e
    k = metrics["keval"]
    stderr.write(f"compute-eval: {k['solutions']} graded solutions ({k['resumed']} resumed): "
                 f"{k['passed']} passed, {k['failed']} failed, {k['skipped']} skipped, "
                 f"{infra} infrastructure failures"
                 + (f", {refused} requests keval refused" if refused else "")
                 + f"; results in {output}, metrics in {metrics_path}\n")
    if infra:
        for r in results:
            e = (r.get("keval") or {}).get("error")
            if e and e.get("class") != "bad_request":
                stderr.write(f"compute-eval: keval failed on {r['task_id']} (solution "
                             f"{r['keval']['solution_index']}): {e.get('message')}\n")
                break
        return EXIT_INFRASTRUCTURE
    if refused:
        for r in results:
            e = (r.get("keval") or {}).get("error")
            if e and e.get("class") == "bad_request":
                stderr.write(f"compute-eval: keval refused the request for {r['task_id']}: "
                             f"{e.get('path')}: {e.get('message')}\n")
                break
        return EXIT_BAD_INPUT
    return EXIT_OK


def _run_jobs(options: EvaluateOptions, jobs: int, todo: List[Job], connection: _Connection,
              out: TextIO, results: List[Dict[str, Any]], stderr: TextIO) -> bool:
    """Evaluate ``todo``, appending each graded solution to ``out`` as it completes;
    True when interrupted (Ctrl-C)."""
    assert connection.socket_path is not None
    timeouts = {id(job): options.timeout or default_timeout(job.problem, options.benchmark)
                for job in todo}
    # A synchronous POST answers when the job ends: after its own limit, and at worst after the
    # jobs of ours queued before it on the daemon.
    http_timeout = max(timeouts.values()) * jobs + 300.0
    client = UnixClient(connection.socket_path, timeout=http_timeout)
    stop = threading.Event()
    pending: "queue.Queue[Job]" = queue.Queue()
    for job in todo:
        pending.put(job)
    done: "queue.Queue[Dict[str, Any]]" = queue.Queue()

    def worker() -> None:
        while not stop.is_set():
            try:
                job = pending.get_nowait()
            except queue.Empty:
                return
            try:
                request = build_request(job, options.benchmark, timeouts[id(job)],
                                        options.harness_reuse)
                outcome = submit(client, request, http_timeout, options.busy_timeout, stop,
                                 options.retry_delay)
                entry = graded_from_response(job, outcome, options.benchmark)
            except Exception as e:  # never lose a job: it is recorded as keval's failure
                entry = _client_error_entry(job, options.benchmark, e)
            done.put(entry)

    # Daemon threads: a Ctrl-C ends the run without waiting for the answers in flight.
    threads = [threading.Thread(target=worker, name=f"compute-eval-{i}", daemon=True)
               for i in range(min(jobs, len(todo)))]
    progress = Progress(len(todo), stderr, tty=options.progress)
    for t in threads:
        t.start()
    if progress.tty:
        progress.show()  # 0/N at once: the first answer may take minutes
    received = 0
    try:
        while received < len(todo):
            try:
                entry = done.get(timeout=1.0)
            except queue.Empty:
                if progress.tty:
                    progress.show()  # the clock moves on
                continue
            received += 1
            out.write(_dump(entry))
            out.flush()
            results.append(entry)
            progress.add(entry)
    except KeyboardInterrupt:
        stop.set()
        progress.finish()
        return True
    progress.finish()
    return False
