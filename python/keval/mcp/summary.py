"""Compact summaries of keval's responses and job records, for an agent to read.

Standard library only. A V2 response carries the sandbox report, every validation trial and
the profiling books (12 KB for a small CPU compare, far more on a GPU); an agent needs the
verdict, the speedup, the times, the flags and the excerpts of any error. ``summarize_response``
makes that from a response, ``summarize_job`` from a ``GET /jobs/{id}`` record (finished or
not). Neither raises on an unexpected shape: missing parts are left out.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

__all__ = [
    "FINISHED_STATUSES",
    "excerpt",
    "job_finished",
    "summarize_job",
    "summarize_response",
    "translate_path",
]

FINISHED_STATUSES = ("completed", "failed")

# Error logs are cut to their head and tail (a compiler's first error, a traceback's last lines).
LOG_EXCERPT_CHARS = 4000
REASON_EXCERPT_CHARS = 600
OUTPUT_EXCERPT_CHARS = 2000


def excerpt(text: Any, limit: int = LOG_EXCERPT_CHARS) -> Optional[str]:
    """``text`` if it fits ``limit`` characters, else its head and tail around a marker."""
    if text is None:
        return None
    if not isinstance(text, str):
        text = str(text)
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[-tail:]}"


def _num(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _stats(stats: Any, mean_fallback: Any = None) -> Optional[Dict[str, Any]]:
    """``runtime_stats`` as ``{mean, median, p95, p99, min, max, std, samples, method}`` (ms)."""
    if not isinstance(stats, Mapping):
        mean = _num(mean_fallback)
        return {"mean": mean} if mean is not None and mean >= 0 else None
    out: Dict[str, Any] = {}
    for key, name in (("mean", "mean"), ("median", "median"), ("percentile_95", "p95"),
                      ("percentile_99", "p99"), ("min", "min"), ("max", "max"), ("std", "std")):
        value = _num(stats.get(key))
        if value is not None:
            out[name] = value
    if isinstance(stats.get("count"), int):
        out["samples"] = stats["count"]
    if stats.get("method"):
        out["method"] = stats["method"]
    if not any(k in out for k in ("mean", "median")):
        return None
    return out


def _fmt_ms(value: Optional[float]) -> str:
    if value is None:
        return "?"
    if value >= 100:
        return f"{value:.1f} ms"
    if value >= 1:
        return f"{value:.3f} ms"
    return f"{value * 1000:.2f} us"


def _verdict(resp: Mapping[str, Any], ker: Mapping[str, Any]) -> str:
    if resp.get("status") == "failed" or resp.get("error"):
        return "error"
    if ker.get("compiled") is False or (resp.get("compilation_error") and not ker.get("compiled")):
        return "compile_error"
    if ker.get("correctness") is True:
        return "correct"
    return "incorrect"


def _first_line(text: Optional[str], limit: int = 300) -> str:
    if not text:
        return ""
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[:limit] + "..."
    return ""


def _headline(summary: Dict[str, Any], mode: str) -> str:
    verdict = summary["verdict"]
    if verdict == "error":
        err = summary.get("error") or {}
        return (f"keval could not finish the job ({err.get('class', 'error')}): "
                f"{_first_line(err.get('message'))}").rstrip(": ")
    if verdict == "compile_error":
        return f"did not compile: {_first_line(summary.get('compilation_error'))}".rstrip(": ")
    if verdict == "incorrect":
        reason = summary.get("validation_error") or summary.get("profiling_error")
        what = "wrong or failed" if mode == "compare" else "failed to run"
        return f"compiled but {what}: {_first_line(reason)}".rstrip(": ")
    parts = ["correct" if mode == "compare" else "ran"]
    cand = summary.get("runtime_ms") or {}
    ref = summary.get("ref_runtime_ms") or {}
    speedup = summary.get("speedup")
    if speedup is not None:
        parts.append(f"speedup {speedup:.3g}x ({'faster' if speedup > 1 else 'slower'} than the "
                     f"reference: median {_fmt_ms(cand.get('median'))} vs "
                     f"{_fmt_ms(ref.get('median'))})")
        floor = summary.get("speedup_floor")
        if floor is not None:
            parts.append(f"at least {floor:.3g}x by keval's own wall times")
    elif cand.get("median") is not None or cand.get("mean") is not None:
        parts.append(f"median {_fmt_ms(cand.get('median', cand.get('mean')))}")
    if cand.get("method"):
        samples = cand.get("samples")
        parts.append(f"{cand['method']}" + (f", {samples} samples" if samples else ""))
    flags = summary.get("flags") or []
    if flags:
        parts.append("flags: " + ", ".join(f["name"] for f in flags))
    return "; ".join(parts)


# Per kernel, what says why it is slow: (section, key) of docs/device_metrics.md's report.
_KERNEL_METRICS = (("speed_of_light", "duration"), ("speed_of_light", "sm_throughput"),
                   ("speed_of_light", "memory_throughput"), ("speed_of_light", "dram_throughput"),
                   ("occupancy", "achieved_occupancy"), ("occupancy", "theoretical_occupancy"))
_MAX_SUMMARY_KERNELS = 8


def _device_metrics(report: Any) -> Optional[Dict[str, Any]]:
    """A side's device_metrics, cut to what an agent acts on: per kernel (longest first, at
    most eight) its duration, throughputs, occupancy and roofline side; the reason when there
    are none."""
    if not isinstance(report, Mapping):
        return None
    if report.get("available") is not True:
        return {"available": False,
                "reason": excerpt(str(report.get("reason") or ""), REASON_EXCERPT_CHARS)}
    kernels = []
    for kernel in report.get("kernels") or []:
        if not isinstance(kernel, Mapping):
            continue
        row: Dict[str, Any] = {"name": excerpt(str(kernel.get("name") or ""), 120)}
        for section, key in _KERNEL_METRICS:
            entry = (kernel.get(section) or {}).get(key) if isinstance(
                kernel.get(section), Mapping) else None
            if isinstance(entry, Mapping) and _num(entry.get("value")) is not None:
                unit = entry.get("unit")
                row[f"{key}_{'pct' if unit == '%' else unit}"] = round(_num(entry["value"]), 3)
        limiters = (kernel.get("occupancy") or {}).get("limiters") if isinstance(
            kernel.get("occupancy"), Mapping) else None
        if limiters:
            row["occupancy_limiters"] = list(limiters)
        roofline = kernel.get("roofline")
        if isinstance(roofline, Mapping) and roofline.get("available"):
            row["bound"] = roofline.get("bound")
            if _num(roofline.get("fraction_of_roof")) is not None:
                row["fraction_of_roof"] = round(_num(roofline["fraction_of_roof"]), 3)
        kernels.append(row)
    kernels.sort(key=lambda k: -(k.get("duration_us") or 0))
    out: Dict[str, Any] = {"available": True, "kernel_count": report.get("kernel_count"),
                           "kernels": kernels[:_MAX_SUMMARY_KERNELS]}
    return out


def summarize_response(resp: Mapping[str, Any], mode: Optional[str] = None,
                       detail: str = "summary") -> Dict[str, Any]:
    """The compact summary of one V2 response (``/evaluate`` or ``/compare``).

    ``mode`` is ``compare`` or ``evaluate`` (guessed from ``ref_runtime`` when not given);
    ``detail="full"`` adds the whole response under ``response``.
    """
    resp = resp if isinstance(resp, Mapping) else {}
    ker = resp.get("kernel_exec_result")
    ker = ker if isinstance(ker, Mapping) else {}
    meta = ker.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    if mode is None:
        mode = "compare" if ("ref_runtime" in resp or "speedup" in resp) else "evaluate"

    out: Dict[str, Any] = {"job_id": resp.get("job_id"), "mode": mode, "finished": True,
                           "status": resp.get("status")}
    out["verdict"] = _verdict(resp, ker)
    out["compiled"] = ker.get("compiled")
    out["correctness"] = ker.get("correctness")
    speedup = _num(resp.get("speedup"))
    out["speedup"] = speedup

    runtime = _stats(ker.get("runtime_stats"), ker.get("runtime"))
    if runtime:
        out["runtime_ms"] = runtime
    ref = _stats(resp.get("ref_runtime"))
    if ref:
        out["ref_runtime_ms"] = ref

    profiling = meta.get("profiling") if isinstance(meta.get("profiling"), Mapping) else {}
    work = profiling.get("device_work") if isinstance(profiling.get("device_work"), Mapping) else {}
    if _num(work.get("kernel_speedup")) is not None:
        out["kernel_speedup"] = _num(work.get("kernel_speedup"))
    if _num(profiling.get("speedup_floor")) is not None:
        out["speedup_floor"] = _num(profiling.get("speedup_floor"))
    sampling = profiling.get("sampling") if isinstance(profiling.get("sampling"), Mapping) else {}
    if sampling:
        out["sampling"] = {k: sampling[k] for k in
                           ("stopped_by", "samples", "noise_percent", "throttled_samples")
                           if k in sampling}
    device = meta.get("device")
    if isinstance(device, Mapping):
        out["device"] = {k: device[k] for k in ("type", "name", "index", "gpu_type", "arch")
                         if k in device}

    for key, name in (("device_metrics", "device_metrics"),
                      ("ref_device_metrics", "ref_device_metrics")):
        metrics = _device_metrics(meta.get(key))
        if metrics is not None:
            out[name] = metrics

    flags: List[Dict[str, Any]] = []
    for flag in meta.get("flags") or []:
        if isinstance(flag, Mapping) and flag.get("name"):
            flags.append({"name": flag["name"],
                          "reason": excerpt(flag.get("reason") or "", REASON_EXCERPT_CHARS),
                          "strict": bool(flag.get("strict"))})
    out["flags"] = flags

    for key in ("compilation_error", "validation_error", "profiling_error"):
        if resp.get(key):
            out[key] = excerpt(resp[key])
    error = resp.get("error")
    if isinstance(error, Mapping):
        out["error"] = {k: (excerpt(v) if isinstance(v, str) else v)
                        for k, v in error.items() if k in ("class", "message")}
        if isinstance(error.get("path"), str):
            out["error"]["path"] = translate_path(error["path"], mode)
            out["error"]["api_path"] = error["path"]
    elif error:
        out["error"] = {"class": "error", "message": excerpt(error)}

    warnings = meta.get("warnings")
    if warnings:
        out["warnings"] = [excerpt(w, REASON_EXCERPT_CHARS) for w in warnings][:20]
    worker = meta.get("worker")
    if isinstance(worker, Mapping):
        output = {}
        for stream in ("stdout", "stderr"):
            if worker.get(stream):
                output[stream] = excerpt(worker[stream], OUTPUT_EXCERPT_CHARS)
        if worker.get("exit_code") not in (None, 0):
            output["exit_code"] = worker.get("exit_code")
        if output:
            out["kernel_output"] = output
    if meta.get("seed") is not None:
        out["seed"] = str(meta["seed"])

    out = {k: v for k, v in out.items() if v is not None or k in
           ("compiled", "correctness", "speedup")}
    out = {"headline": _headline(out, mode), **out}
    if detail == "full":
        out["response"] = dict(resp)
    else:
        out["more"] = ("get_job(job_id, detail='full') returns the daemon's whole response "
                       "(compile info, every validation trial, sandbox, profiling)")
    return out


def job_finished(job: Mapping[str, Any]) -> bool:
    return job.get("status") in FINISHED_STATUSES


def summarize_job(job: Mapping[str, Any], detail: str = "summary") -> Dict[str, Any]:
    """The summary of a ``GET /jobs/{id}`` record: the result's when finished, else progress."""
    job = job if isinstance(job, Mapping) else {}
    mode = job.get("mode") if job.get("mode") in ("compare", "evaluate") else None
    result = job.get("result")
    if job_finished(job) and isinstance(result, Mapping) and result:
        out = summarize_response(result, mode, detail="summary")
        out["job_id"] = out.get("job_id") or job.get("job_id")
        out["job_status"] = job.get("status")
        if job.get("interrupted"):
            out["interrupted"] = True
        if detail == "full":
            out.pop("more", None)
            out["job"] = dict(job)
        return out
    out = {"headline": "", "job_id": job.get("job_id"), "mode": mode or job.get("mode"),
           "finished": job_finished(job), "job_status": job.get("status"),
           "stage": job.get("stage")}
    device = job.get("device")
    if isinstance(device, Mapping):
        out["device"] = dict(device)
    phases = {}
    for phase in ("compilation_result", "validation_result", "profiling_result"):
        value = job.get(phase)
        if isinstance(value, Mapping) and "ok" in value:
            phases[phase.split("_")[0]] = bool(value["ok"])
    if phases:
        out["phases_ok"] = phases
    if job_finished(job):
        out["verdict"] = "error"
        out["headline"] = f"the job {job.get('status')} without a result"
    else:
        out["headline"] = (f"still running ({job.get('stage') or job.get('status')}): call "
                           f"get_job with wait=true to wait for the result")
    if detail == "full":
        out["job"] = dict(job)
    return {k: v for k, v in out.items() if v is not None}


# The daemon names the request's fields (``custom_kernel.io.args[0]``); the tools name their
# arguments (``candidate.io.args[0]``). Longest prefix first.
_PATH_PREFIXES = {
    "evaluate": (("kernel.", ""), ("kernel", "source_code/kernel_type")),
    "compare": (("ref_kernel.", "reference."), ("custom_kernel.", "candidate."),
                ("ref_kernel", "reference"), ("custom_kernel", "candidate")),
}


def translate_path(path: Optional[str], mode: str) -> Optional[str]:
    """The tool argument a daemon's request path names (``kernel.io`` -> ``io``)."""
    if not path:
        return path
    for prefix, replacement in _PATH_PREFIXES.get(mode, ()):
        if path.startswith(prefix):
            return replacement + path[len(prefix):]
    return path
