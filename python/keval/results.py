"""Typed views of keval's responses: ``EvalResult``, ``Job``, ``Health`` and their parts.

Each view keeps the whole response in ``raw``: keval's metadata (compile logs, validation
trials, profiling, sandbox) is large and grows, and typing all of it would freeze it; the fields
here are the ones a caller decides on. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

__all__ = ["ErrorInfo", "EvalResult", "Flag", "Health", "Job", "RuntimeStats",
           "JOB_DONE_STATUSES"]

# GET /jobs/{id} statuses after which nothing changes: the kernel's verdict, or keval's failure.
JOB_DONE_STATUSES = ("completed", "failed")


def _obj(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _num(value: Any) -> Optional[float]:
    # bool is an int in Python; a JSON true is no time.
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


@dataclass
class RuntimeStats:
    """Timing statistics of one side, in milliseconds (``runtime_stats``, ``ref_runtime``)."""

    mean: Optional[float] = None
    std: Optional[float] = None
    min: Optional[float] = None
    max: Optional[float] = None
    median: Optional[float] = None
    percentile_95: Optional[float] = None
    percentile_99: Optional[float] = None
    count: Optional[int] = None
    method: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, value: Any) -> Optional["RuntimeStats"]:
        """None for null or a non-object (a job that never reached profiling)."""
        if not isinstance(value, dict):
            return None
        count = value.get("count")
        return cls(mean=_num(value.get("mean")), std=_num(value.get("std")),
                   min=_num(value.get("min")), max=_num(value.get("max")),
                   median=_num(value.get("median")),
                   percentile_95=_num(value.get("percentile_95")),
                   percentile_99=_num(value.get("percentile_99")),
                   count=count if isinstance(count, int) and not isinstance(count, bool) else None,
                   method=_str(value.get("method")), raw=value)


@dataclass
class Flag:
    """What a verdict cannot settle (``kernel_exec_result.metadata.flags``; README "Checks and
    flags"). ``strict``: the request named it in ``strict``, so it made the result incorrect."""

    name: str
    reason: str = ""
    details: Any = None
    strict: bool = False

    @classmethod
    def from_json(cls, value: Any) -> "Flag":
        v = _obj(value)
        return cls(name=str(v.get("name", "")), reason=str(v.get("reason", "") or ""),
                   details=v.get("details"), strict=v.get("strict") is True)


@dataclass
class ErrorInfo:
    """``error`` of a response: ``bad_request`` (with ``path``), ``infrastructure``, ..."""

    error_class: str
    message: str = ""
    path: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, value: Any) -> Optional["ErrorInfo"]:
        if not isinstance(value, dict):
            return None
        return cls(error_class=str(value.get("class", "")),
                   message=str(value.get("message", "") or ""),
                   path=_str(value.get("path")), raw=value)


@dataclass
class EvalResult:
    """The answer to ``/evaluate`` or ``/compare`` (the V2 response), typed.

    A kernel that fails to compile, crashes or computes the wrong thing is a result
    (``status == "success"``, ``compiled`` or ``correctness`` False, the reason in
    ``compilation_error`` / ``validation_error``). A failure of keval itself (timeout, worker
    death: HTTP 500) is a result too, with ``status == "failed"`` and ``error`` set, because its
    body still carries every phase that completed; ``failed_infrastructure`` says so.
    """

    job_id: Optional[str]
    status: str
    compiled: bool = False
    correctness: bool = False
    runtime: Optional[float] = None
    runtime_stats: Optional[RuntimeStats] = None
    ref_runtime: Optional[RuntimeStats] = None
    speedup: Optional[float] = None
    compilation_error: Optional[str] = None
    validation_error: Optional[str] = None
    profiling_error: Optional[str] = None
    flags: List[Flag] = field(default_factory=list)
    error: Optional[ErrorInfo] = None
    gpu_type: Optional[str] = None
    http_status: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, body: Mapping[str, Any], http_status: Optional[int] = None,
                  gpu_type: Optional[str] = None) -> "EvalResult":
        body = dict(body)
        ker = _obj(body.get("kernel_exec_result"))
        meta = _obj(ker.get("metadata"))
        flags = meta.get("flags")
        runtime = _num(ker.get("runtime"))
        return cls(
            job_id=_str(body.get("job_id")),
            status=str(body.get("status", "") or ""),
            compiled=ker.get("compiled") is True,
            correctness=ker.get("correctness") is True,
            # -1: "not profiled" in the V2 contract; None says it without a magic number.
            runtime=runtime if runtime is not None and runtime >= 0 else None,
            runtime_stats=RuntimeStats.from_json(ker.get("runtime_stats")),
            ref_runtime=RuntimeStats.from_json(body.get("ref_runtime")),
            speedup=_num(body.get("speedup")),
            compilation_error=_str(body.get("compilation_error")),
            validation_error=_str(body.get("validation_error")),
            profiling_error=_str(body.get("profiling_error")),
            flags=[Flag.from_json(f) for f in flags] if isinstance(flags, list) else [],
            error=ErrorInfo.from_json(body.get("error")),
            gpu_type=gpu_type,
            http_status=http_status,
            raw=body,
        )

    @property
    def ok(self) -> bool:
        """Compiled and correct (and keval did not fail)."""
        return self.status == "success" and self.compiled and self.correctness

    @property
    def failed_infrastructure(self) -> bool:
        """keval failed, not the kernel (HTTP 500): retrying may give a verdict."""
        return self.status == "failed"

    @property
    def metadata(self) -> Dict[str, Any]:
        """``kernel_exec_result.metadata``: device, compile, validation, profiling, worker, ..."""
        return _obj(_obj(self.raw.get("kernel_exec_result")).get("metadata"))

    @property
    def speedup_floor(self) -> Optional[float]:
        """The reference's median over the candidate's median wall time per sample, measured by
        keval outside the candidate's process: a speedup nothing in that process can inflate
        (below ``speedup`` by the channel's round trip, tens of microseconds a sample)."""
        return _num(_obj(self.metadata.get("profiling")).get("speedup_floor"))

    @property
    def seed(self) -> Optional[int]:
        """The job's input seed; sending it back as ``seed`` reproduces the run's inputs."""
        seed = self.metadata.get("seed")
        return seed if isinstance(seed, int) else None

    @property
    def warnings(self) -> List[Any]:
        """Fields the request had that keval ignored, and other warnings."""
        w = self.metadata.get("warnings")
        return w if isinstance(w, list) else []

    @property
    def device_metrics(self) -> Optional[Dict[str, Any]]:
        """The candidate's hardware counters when the request asked (``"device_metrics"``):
        ``{"available": True, "kernels": [...], ...}`` or ``{"available": False, "reason"}``.
        None when not asked for. docs/device_metrics.md."""
        m = self.metadata.get("device_metrics")
        return m if isinstance(m, dict) else None

    @property
    def ref_device_metrics(self) -> Optional[Dict[str, Any]]:
        """The reference's, beside :attr:`device_metrics` (compare only)."""
        m = self.metadata.get("ref_device_metrics")
        return m if isinstance(m, dict) else None

    def flag(self, name: str) -> Optional[Flag]:
        """The flag called ``name``, or None."""
        return next((f for f in self.flags if f.name == name), None)


@dataclass
class Job:
    """``GET /jobs/{id}`` (and ``DELETE``): a job's status, its phases so far, and its result.

    ``status``: ``submitted``, ``compiling``, ``validating``, ``profiling``, then ``completed``
    (the kernel's verdict in ``result``) or ``failed`` (keval's failure or a cancellation:
    ``result.error``, ``http_status`` 500). ``result`` is None until the job has finished.
    """

    job_id: str
    status: str
    stage: Optional[str] = None
    result: Optional[EvalResult] = None
    http_status: Optional[int] = None
    interrupted: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "Job":
        body = dict(body)
        http_status = body.get("http_status")
        http_status = http_status if isinstance(http_status, int) else None
        device = _obj(body.get("device"))
        # X-GPU-Type is only on synchronous answers; a job's view names its device instead.
        gpu_type = _str(device.get("gpu_type")) or ("cpu" if device.get("type") == "cpu" else None)
        result = body.get("result")
        return cls(
            job_id=str(body.get("job_id", "")),
            status=str(body.get("status", "")),
            stage=_str(body.get("stage")),
            result=EvalResult.from_json(result, http_status=http_status, gpu_type=gpu_type)
            if isinstance(result, dict) and result else None,
            http_status=http_status,
            interrupted=body.get("interrupted") is True,
            raw=body,
        )

    @property
    def done(self) -> bool:
        """Finished: nothing about this job changes any more."""
        return self.status in JOB_DONE_STATUSES

    @property
    def error(self) -> Optional[ErrorInfo]:
        """keval's failure (or the cancellation), once failed."""
        return self.result.error if self.result is not None else None


@dataclass
class Health:
    """``GET /health``: version, kernel types, GPUs; ``status`` is ``shutting_down`` (HTTP 503)
    while the daemon stops."""

    status: str
    version: Optional[str] = None
    plugin_api: Optional[str] = None
    plugins: List[str] = field(default_factory=list)
    gpus: List[Dict[str, Any]] = field(default_factory=list)
    cpu_device: bool = False
    jobs: Dict[str, Any] = field(default_factory=dict)
    gpu_discovery: Optional[str] = None
    # Whether the daemon keeps the CUDA driver initialised: {"held": True, "pid", "init_ms"} or
    # {"held": False, "reason"}.
    driver: Dict[str, Any] = field(default_factory=dict)
    http_status: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, body: Mapping[str, Any], http_status: Optional[int] = None) -> "Health":
        body = dict(body)
        plugins = body.get("plugins")
        gpus = body.get("gpus")
        return cls(status=str(body.get("status", "")), version=_str(body.get("version")),
                   plugin_api=_str(body.get("plugin_api")),
                   plugins=[str(p) for p in plugins] if isinstance(plugins, list) else [],
                   gpus=[g for g in gpus if isinstance(g, dict)] if isinstance(gpus, list) else [],
                   cpu_device=body.get("cpu_device") is True, jobs=_obj(body.get("jobs")),
                   gpu_discovery=_str(body.get("gpu_discovery")), driver=_obj(body.get("driver")),
                   http_status=http_status,
                   raw=body)

    @property
    def ok(self) -> bool:
        return self.status == "ok"
