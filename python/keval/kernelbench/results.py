"""Results in KernelBench's eval-results shape, with keval's fields beside KernelBench's.

``eval_results.json`` is what KernelBench's ``eval_from_generations.py`` writes —
``{"<problem_id>": [{sample_id, compiled, correctness, metadata, runtime, runtime_stats}]}``
sorted by numeric key — so KernelBench's own analysis scripts read it unchanged; each entry also
carries keval's fields (speedup, the reference's times, timing methods, flags, why it failed,
where the full response is). ``keval report`` reads the same file. Writes are atomic (a temporary
file and a rename), so an interrupted run never leaves a torn file behind.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from typing import Any, Dict, Iterable, List, Optional, Tuple

__all__ = [
    "FAILURE_CLASSES",
    "RETRIED_CLASSES",
    "atomic_write_json",
    "baseline_timing",
    "classify",
    "entry_from_response",
    "failure_entry",
    "load_results",
    "sorted_results",
    "summarize",
]

FAILURE_CLASSES = ("compile", "correctness", "runtime", "timeout", "infrastructure",
                   "bad_request", "missing_generation")
# Failures of the machinery, not verdicts on the kernel: a rerun evaluates these again. A timeout
# is keval ending the job at the request's limit — possibly the kernel's fault, possibly a loaded
# machine's — so it is retried too rather than frozen as a verdict.
RETRIED_CLASSES = frozenset({"timeout", "infrastructure"})

EXCERPT_BYTES = 2048
_CORRECTNESS_TYPES = frozenset({"mismatch", "input_modified", "device_trace_lost"})


def excerpt(text: Optional[str], limit: int = EXCERPT_BYTES) -> Optional[str]:
    """At most ``limit`` bytes of UTF-8: the start of a message (where the reason is) and a mark."""
    if text is None:
        return None
    text = str(text)
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    cut = data[:limit - 20].decode("utf-8", errors="ignore")
    return cut + "\n... [truncated]"


def _dict(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def classify(response: Dict[str, Any], http_status: Optional[int] = None) -> Optional[str]:
    """The failure class of a keval /compare response, or None when compiled and correct.

    keval answers every verdict with HTTP 200 and ``status: success``; a refused request with 400
    and ``error.class: bad_request``; its own failures with ``status: failed`` and
    ``error.class: infrastructure`` — a job that exceeded its timeout among them, told apart by
    the message. A kernel that ran but failed is told apart from a wrong one by the type of the
    validation (or profiling) error: ``mismatch`` and ``input_modified`` are wrong answers, any
    other (an exception, a device fault, a dead worker) is a runtime failure.
    """
    error = _dict(response.get("error"))
    if response.get("status") == "failed" or error:
        cls = error.get("class")
        if cls == "bad_request" or (http_status is not None and 400 <= http_status < 500):
            return "bad_request"
        message = str(error.get("message") or "")
        if "timeout" in message or "timed out" in message:
            return "timeout"
        return "infrastructure"
    exec_result = _dict(response.get("kernel_exec_result"))
    if not exec_result.get("compiled"):
        return "compile"
    if exec_result.get("correctness"):
        return None
    metadata = _dict(exec_result.get("metadata"))
    for phase in ("validation", "profiling"):
        err = _dict(_dict(metadata.get(phase)).get("error"))
        if err.get("type"):
            return "correctness" if err["type"] in _CORRECTNESS_TYPES else "runtime"
    validation = _dict(metadata.get("validation"))
    if validation.get("ok") is False:
        return "correctness"
    text = str(response.get("validation_error") or response.get("profiling_error") or "")
    if text.startswith("trial ") or text.startswith("timed sample "):
        return "correctness"
    return "runtime"


def _hardware(metadata: Dict[str, Any], gpu_type: Optional[str]) -> Tuple[Optional[str],
                                                                           Optional[str]]:
    """KernelBench's (hardware, device): the device's name and ``cuda:N`` (or ``cpu``)."""
    device = _dict(metadata.get("device"))
    if not device:
        device = _dict(_dict(metadata.get("validation")).get("device"))
    name = device.get("name") or gpu_type
    if device.get("type") == "cuda":
        where = f"cuda:{device.get('index', 0)}"
    else:
        where = device.get("type")
    return name, where


def _flags(metadata: Dict[str, Any]) -> List[Dict[str, Any]]:
    out = []
    for flag in metadata.get("flags") or []:
        if isinstance(flag, dict) and flag.get("name"):
            out.append({"name": flag.get("name"), "reason": flag.get("reason")})
    return out


def _error_summary(response: Dict[str, Any], failure_class: Optional[str]) -> Optional[Dict]:
    """``{class, message}``: why the entry failed, in one place whatever the stage."""
    error = _dict(response.get("error"))
    if error:
        return {"class": error.get("class") or failure_class,
                "message": excerpt(error.get("detail") or error.get("message"))}
    if failure_class is None:
        return None
    for key in ("compilation_error", "validation_error", "profiling_error"):
        if response.get(key):
            return {"class": failure_class, "message": excerpt(response[key])}
    return {"class": failure_class, "message": None}


def entry_from_response(*, sample_id: int, problem_name: str, level: int, kernel_type: str,
                        response: Dict[str, Any], http_status: Optional[int] = None,
                        gpu_type: Optional[str] = None,
                        response_file: Optional[str] = None,
                        hardware: Optional[str] = None) -> Dict[str, Any]:
    """One eval_results.json entry from a keval /compare response (any status).

    ``hardware``: the machine's device name as the daemon's health gave it, for responses that
    name no device (a candidate that did not compile never reached one).
    """
    exec_result = _dict(response.get("kernel_exec_result"))
    metadata = _dict(exec_result.get("metadata"))
    failure_class = classify(response, http_status)
    hardware_seen, device = _hardware(metadata, None)
    hardware = hardware_seen or hardware or gpu_type
    runtime_stats = _dict(exec_result.get("runtime_stats"))
    ref_stats = _dict(response.get("ref_runtime"))
    runtime = _number(exec_result.get("runtime"))
    small_metadata: Dict[str, Any] = {"hardware": hardware, "device": device}
    if response.get("compilation_error"):
        small_metadata["compilation_error"] = excerpt(response["compilation_error"])
    if response.get("validation_error"):
        small_metadata["validation_error"] = excerpt(response["validation_error"])
    if response.get("profiling_error"):
        small_metadata["profiling_error"] = excerpt(response["profiling_error"])
    return {
        "sample_id": sample_id,
        "compiled": bool(exec_result.get("compiled")),
        "correctness": bool(exec_result.get("correctness")) and failure_class is None,
        "metadata": small_metadata,
        "runtime": runtime if runtime is not None else -1.0,
        "runtime_stats": runtime_stats,
        "problem_name": problem_name,
        "level": level,
        "kernel_type": kernel_type,
        "job_id": response.get("job_id"),
        "status": response.get("status"),
        "speedup": _number(response.get("speedup")),
        "speedup_floor": _number(_dict(metadata.get("profiling")).get("speedup_floor")),
        "ref_runtime": _number(ref_stats.get("mean")),
        "ref_runtime_stats": ref_stats,
        "methods": {"custom": runtime_stats.get("method"), "ref": ref_stats.get("method")},
        "flags": _flags(metadata),
        "failure_class": failure_class,
        "error": _error_summary(response, failure_class),
        "response_file": response_file,
    }


def failure_entry(*, sample_id: int, problem_name: str, level: int, kernel_type: Optional[str],
                  failure_class: str, message: str, error_class: Optional[str] = None,
                  job_id: Optional[str] = None, status: Optional[str] = None,
                  hardware: Optional[str] = None,
                  response_file: Optional[str] = None) -> Dict[str, Any]:
    """An entry for a sample that got no verdict: not submitted, refused, or lost on the way."""
    return {
        "sample_id": sample_id,
        "compiled": False,
        "correctness": False,
        "metadata": {"hardware": hardware, "device": None, "error": excerpt(message)},
        "runtime": -1.0,
        "runtime_stats": {},
        "problem_name": problem_name,
        "level": level,
        "kernel_type": kernel_type,
        "job_id": job_id,
        "status": status,
        "speedup": None,
        "speedup_floor": None,
        "ref_runtime": None,
        "ref_runtime_stats": {},
        "methods": {"custom": None, "ref": None},
        "flags": [],
        "failure_class": failure_class,
        "error": {"class": error_class or failure_class, "message": excerpt(message)},
        "response_file": response_file,
    }


def load_results(path: str) -> Dict[str, List[Dict[str, Any]]]:
    """An existing eval_results.json (KernelBench's or ours), or {} when there is none.

    A file that is not KernelBench's shape raises ``ValueError``: overwriting it would lose data
    the user may want, so the run stops and says so.
    """
    if not os.path.exists(path):
        return {}
    with open(path, "r", encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise ValueError(f"{path} is not a KernelBench eval_results.json "
                         f"({{\"<problem_id>\": [entries]}})")
    return data


def sorted_results(results: Dict[str, List[Dict[str, Any]]]) -> Dict[str, List[Dict[str, Any]]]:
    """KernelBench's order: problems by numeric id, and (ours) samples by id within each."""
    def key(item: Tuple[str, Any]) -> Tuple[int, str]:
        try:
            return int(item[0]), ""
        except ValueError:
            return 1 << 62, item[0]
    return {k: sorted(v, key=lambda e: e.get("sample_id", 0) if isinstance(e, dict) else 0)
            for k, v in sorted(results.items(), key=key)}


def atomic_write_json(path: str, data: Any, indent: Optional[int] = 4) -> None:
    """Write JSON to ``path`` by rename, so that readers and a killed run see whole files."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=indent, ensure_ascii=False, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _entries(results: Dict[str, List[Dict[str, Any]]],
             problem_ids: Optional[Iterable[int]] = None) -> List[Tuple[int, Dict[str, Any]]]:
    wanted = None if problem_ids is None else {str(p) for p in problem_ids}
    out = []
    for key, entries in results.items():
        if wanted is not None and key not in wanted:
            continue
        for entry in entries:
            if isinstance(entry, dict):
                out.append((int(key) if key.isdigit() else -1, entry))
    return out


def summarize(results: Dict[str, List[Dict[str, Any]]],
              problem_ids: Optional[Iterable[int]] = None) -> Dict[str, Any]:
    """Counts by verdict and failure class, and KernelBench's fast_p over problems.

    fast_p (KernelBench's metric) is the fraction of problems whose kernel is correct and faster
    than the reference by more than p; with several samples a problem counts through its best
    correct sample. The geometric mean of speedups is over correct samples with a speedup.
    """
    entries = _entries(results, problem_ids)
    counts: Dict[str, Any] = {"total": len(entries), "compiled": 0, "correct": 0}
    failed: Dict[str, int] = {}
    best: Dict[int, Optional[float]] = {}
    logs = []
    for pid, e in entries:
        counts["compiled"] += bool(e.get("compiled"))
        correct = bool(e.get("correctness")) and bool(e.get("compiled"))
        counts["correct"] += correct
        cls = e.get("failure_class")
        if cls is None and not correct:
            cls = "compile" if not e.get("compiled") else "correctness"
        if cls is not None:
            failed[cls] = failed.get(cls, 0) + 1
        speedup = _number(e.get("speedup"))
        best.setdefault(pid, None)
        if correct and speedup is not None and speedup > 0:
            logs.append(math.log(speedup))
            if best[pid] is None or speedup > best[pid]:
                best[pid] = speedup
    counts["failed_by_class"] = {k: failed[k] for k in FAILURE_CLASSES if k in failed}
    n_problems = len(best)
    fast = {}
    for name, p in (("fast_0", 0.0), ("fast_1", 1.0)):
        hits = sum(1 for s in best.values() if s is not None and s > p)
        fast[name] = hits / n_problems if n_problems else None
    return {
        "counts": counts,
        "problems": n_problems,
        **fast,
        "geomean_speedup": math.exp(sum(logs) / len(logs)) if logs else None,
        "speedups_counted": len(logs),
    }


def baseline_timing(results: Dict[str, List[Dict[str, Any]]], level: int,
                    existing: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The reference's times in KernelBench's ``baseline_time_torch.json`` shape.

    ``{"level{N}": {"<file name>.py": {mean, std, min, max, num_trials, hardware, device}}}``,
    from each problem's first sample that timed the reference; other levels already in
    ``existing`` are kept, so one file can gather a machine's levels run by run.
    """
    out: Dict[str, Any] = dict(existing or {})
    table: Dict[str, Any] = dict(_dict(out.get(f"level{level}")))
    for key, entries in sorted_results(results).items():
        for e in entries:
            stats = _dict(e.get("ref_runtime_stats"))
            if _number(stats.get("mean")) is None or not e.get("problem_name"):
                continue
            meta = _dict(e.get("metadata"))
            table[e["problem_name"]] = {
                "mean": stats.get("mean"),
                "std": stats.get("std"),
                "min": stats.get("min"),
                "max": stats.get("max"),
                "num_trials": stats.get("count"),
                "hardware": meta.get("hardware"),
                "device": meta.get("device"),
            }
            break
    out[f"level{level}"] = dict(sorted(table.items(),
                                       key=lambda kv: (int(kv[0].split("_", 1)[0])
                                                       if kv[0].split("_", 1)[0].isdigit()
                                                       else 1 << 62, kv[0])))
    return out
