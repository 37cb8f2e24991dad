"""keval's MCP server: the daemon's evaluations as tools for an agent.

Built on the official MCP Python SDK (``mcp`` 2.x, ``mcp.server.mcpserver.MCPServer``).
``create_server(client)`` registers the tools against a ``keval.Client`` (or anything with its
``submit``/``job``/``cancel``/``health``/``plugins`` methods); ``keval.mcp.cli`` runs it over
stdio or streamable HTTP.

Every evaluation is submitted as an asynchronous job and polled, so a long job holds no HTTP
request open, its stages are reported as MCP progress, a client that cancels the tool call
cancels the job, and a job that outlives ``max_wait`` seconds is handed back as a job id to
poll with ``get_job`` rather than failing.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, is_dataclass
from typing import Annotated, Any, Dict, List, Literal, Mapping, Optional

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from . import guide
from .summary import job_finished, summarize_job, translate_path

__all__ = ["create_server", "DEFAULT_MAX_WAIT"]

# How long a tool call waits for its job before handing back the job id (seconds). MCP clients
# time tool calls out themselves (often after a few minutes); get_job(wait=true) waits again.
DEFAULT_MAX_WAIT = 600.0
_POLL_FIRST = 0.1
_POLL_MAX = 1.0
_STAGES = ("submitted", "compiling", "validating", "profiling", "done")


# -- output schemas (published as the tools' outputSchema; extra keys allowed) ---------------

class RuntimeStats(BaseModel):
    """Sample times in milliseconds."""
    model_config = ConfigDict(extra="allow")
    mean: Optional[float] = None
    median: Optional[float] = None
    p95: Optional[float] = None
    p99: Optional[float] = None
    min: Optional[float] = None
    max: Optional[float] = None
    std: Optional[float] = None
    samples: Optional[int] = None
    method: Optional[str] = Field(None, description="cuda_graph, cuda_event or cpu_wall_clock")


class FlagSummary(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    reason: str = ""
    strict: bool = Field(False, description="true: the request made this flag fail the result")


class JobSummary(BaseModel):
    """A job's verdict and times (finished), or its stage (still running)."""
    model_config = ConfigDict(extra="allow")
    job_id: Optional[str] = None
    headline: str = Field(description="one line: the verdict, speedup, times and flags")
    finished: bool
    mode: Optional[str] = Field(None, description="compare or evaluate")
    verdict: Optional[Literal["correct", "incorrect", "compile_error", "error"]] = None
    compiled: Optional[bool] = None
    correctness: Optional[bool] = None
    speedup: Optional[float] = Field(None, description="reference median / candidate median")
    speedup_floor: Optional[float] = Field(
        None, description="reference median / the candidate's median wall time, measured by keval "
                          "outside the candidate's process: a speedup the candidate cannot have "
                          "inflated (below the speedup by the channel's round trip)")
    runtime_ms: Optional[RuntimeStats] = None
    ref_runtime_ms: Optional[RuntimeStats] = None
    flags: List[FlagSummary] = Field(default_factory=list)
    compilation_error: Optional[str] = None
    validation_error: Optional[str] = None
    error: Optional[Dict[str, Any]] = None
    job_status: Optional[str] = Field(None, description="submitted, compiling, validating, "
                                                        "profiling, completed or failed")
    stage: Optional[str] = None


class GpuInfo(BaseModel):
    model_config = ConfigDict(extra="allow")
    index: Optional[int] = None
    name: Optional[str] = None
    type: Optional[str] = None
    state: Optional[str] = None


class HealthSummary(BaseModel):
    model_config = ConfigDict(extra="allow")
    status: str = Field(description="ok, or shutting_down")
    version: Optional[str] = None
    kernel_types: List[str] = Field(default_factory=list)
    gpus: List[GpuInfo] = Field(default_factory=list)
    cpu_device: Optional[bool] = Field(None, description="CPU-capable kernel types can run")
    jobs: Dict[str, Any] = Field(default_factory=dict, description="active, queued, "
                                                                   "queue_capacity")


class KernelTypeInfo(BaseModel):
    model_config = ConfigDict(extra="allow")
    kernel_type: str
    usable: bool = True
    description: Optional[str] = None
    capabilities: List[str] = Field(default_factory=list)
    plugin_version: Optional[str] = None
    api_version: Optional[str] = None
    source: Optional[str] = Field(None, description="what the source_code must hold")
    io: Optional[str] = Field(None, description="whether an IOContract is needed")
    devices: Optional[str] = None


class KernelTypes(BaseModel):
    model_config = ConfigDict(extra="allow")
    kernel_types: List[KernelTypeInfo]
    load_errors: List[Dict[str, Any]] = Field(default_factory=list)


# -- talking to the daemon ---------------------------------------------------------------------

class ToolFailure(Exception):
    """A failure the agent should read: becomes an ``isError`` result with ``error``."""

    def __init__(self, message: str, **fields: Any):
        super().__init__(message)
        self.fields = {"message": message, **fields}


def _as_dict(obj: Any) -> Dict[str, Any]:
    """A client object (EvalResult, Job, Health, ...) as the daemon's JSON object."""
    if obj is None:
        return {}
    if isinstance(obj, Mapping):
        return dict(obj)
    raw = getattr(obj, "raw", None)
    if isinstance(raw, Mapping):
        return dict(raw)
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    if hasattr(obj, "__dict__"):
        return {k: v for k, v in vars(obj).items() if not k.startswith("_")}
    return {"value": obj}


def _errors():
    """keval's client exception classes (imported late: keval.mcp must import without them)."""
    import keval
    return (getattr(keval, "KevalHTTPError", None), getattr(keval, "DaemonUnavailable", None),
            getattr(keval, "KevalError", None))


class _Daemon:
    """Blocking ``keval.Client`` calls, run on worker threads, errors made ``ToolFailure``s."""

    def __init__(self, client: Any, where: str):
        self.client = client
        self.where = where

    async def call(self, name: str, *args: Any, mode: Optional[str] = None,
                   job_id: Optional[str] = None) -> Any:
        method = getattr(self.client, name)
        try:
            return await anyio.to_thread.run_sync(lambda: method(*args))
        except Exception as e:  # noqa: BLE001 - every failure becomes a readable tool error
            raise self._failure(e, mode, job_id) from e

    def _failure(self, e: Exception, mode: Optional[str], job_id: Optional[str]) -> ToolFailure:
        http_error, unavailable, keval_error = _errors()
        if unavailable is not None and isinstance(e, unavailable):
            return ToolFailure(
                f"the keval daemon is unreachable at {self.where}: {e}. Start it (`keval serve`) "
                f"or run the MCP server with --local.", **{"class": "daemon_unavailable"})
        if http_error is not None and isinstance(e, http_error):
            status = getattr(e, "status", None)
            cls = getattr(e, "error_class", None) or "http_error"
            message = getattr(e, "message", None) or str(e)
            api_path = getattr(e, "path", None)
            if status == 400:
                path = translate_path(api_path, mode or "") if mode else api_path
                text = f"bad request: {path}: {message}" if path else f"bad request: {message}"
                return ToolFailure(text, **{"class": cls, "path": path, "api_path": api_path,
                                            "http_status": status})
            if status == 404 and job_id is not None:
                return ToolFailure(f"no job {job_id!r}: unknown, or expired after the daemon's "
                                   f"--job-ttl", **{"class": cls, "http_status": status})
            if status == 503:
                return ToolFailure(f"the daemon is busy (queue full, connection limit, or "
                                   f"shutting down): {message}; retry later",
                                   **{"class": cls, "http_status": status})
            if status in (401, 403):
                return ToolFailure(f"the daemon refused this server ({status}): {message}; check "
                                   f"--token-file", **{"class": cls, "http_status": status})
            return ToolFailure(f"the daemon answered {status}: {message}",
                               **{"class": cls, "http_status": status})
        if keval_error is not None and isinstance(e, keval_error):
            return ToolFailure(f"keval client error: {e}", **{"class": type(e).__name__})
        if isinstance(e, (OSError, ConnectionError)):
            return ToolFailure(f"the keval daemon is unreachable at {self.where}: {e}",
                               **{"class": "daemon_unavailable"})
        return ToolFailure(f"{type(e).__name__}: {e}", **{"class": "internal"})


# -- results -----------------------------------------------------------------------------------

def _result(structured: Dict[str, Any]) -> CallToolResult:
    text = json.dumps(structured, ensure_ascii=False, separators=(",", ":"), default=str)
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=structured)


def _error_result(failure: ToolFailure) -> CallToolResult:
    fields = {k: v for k, v in failure.fields.items() if v is not None}
    text = str(failure)
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content={"error": fields}, is_error=True)


def _job_id_of(submitted: Any) -> str:
    if isinstance(submitted, str):
        return submitted
    d = _as_dict(submitted)
    job_id = d.get("job_id")
    if not job_id:
        raise ToolFailure(f"the daemon accepted the job but named no job id: {d}",
                          **{"class": "internal"})
    return str(job_id)


# -- argument types (their JSON schemas are what an agent reads in tools/list) -----------------

Detail = Annotated[Literal["summary", "full"], Field(
    description="summary (default): verdict, speedup, times, flags, error excerpts. full: also "
                "the daemon's whole response (large: sandbox, every trial, profiling).")]
Wait = Annotated[bool, Field(
    description="true (default): wait for the result (stages are sent as progress). false: "
                "return the job id at once; poll with get_job.")]
NumTrials = Annotated[Optional[int], Field(
    ge=1, le=100000, description="timed samples (default 100); every sample's outputs are "
                                 "checked too. 10-30 is plenty while iterating.")]
Timeout = Annotated[Optional[float], Field(
    gt=0, description="seconds for the whole job, not counting the wait for a device "
                      "(default 120)")]
Atol = Annotated[Optional[float], Field(ge=0, description="absolute tolerance (default 1e-2)")]
Rtol = Annotated[Optional[float], Field(ge=0, description="relative tolerance (default 1e-2)")]
IoArg = Annotated[Optional[Dict[str, Any]], WithJsonSchema(guide.IO_CONTRACT_SCHEMA)]
MetadataArg = Annotated[Optional[Dict[str, Any]], WithJsonSchema(guide.METADATA_SCHEMA)]
OptionsArg = Annotated[Optional[Dict[str, Any]], WithJsonSchema(guide.OPTIONS_SCHEMA)]
KernelSpecArg = Annotated[Dict[str, Any], WithJsonSchema(guide.KERNEL_SPEC_SCHEMA)]

_RESERVED = {"kernel", "ref_kernel", "custom_kernel", "async"}


def _request(kernels: Dict[str, Dict[str, Any]], num_trials: Optional[int],
             timeout: Optional[float], atol: Optional[float], rtol: Optional[float],
             options: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    request: Dict[str, Any] = {}
    if options:
        clash = sorted(set(options) & _RESERVED)
        if clash:
            raise ToolFailure(f"options may not set {', '.join(clash)}: the tool's own arguments "
                              f"give the kernels, and wait gives async",
                              **{"class": "bad_request", "path": "options." + clash[0]})
        request.update(options)
    for key, value in (("num_trials", num_trials), ("timeout", timeout), ("atol", atol),
                       ("rtol", rtol)):
        if value is not None:
            request[key] = value
    request.update(kernels)
    return request


def _kernel(source_code: str, kernel_type: str, metadata: Optional[Dict[str, Any]],
            io: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    kernel: Dict[str, Any] = {"source_code": source_code, "kernel_type": kernel_type}
    if metadata is not None:
        kernel["metadata"] = metadata
    if io is not None:
        kernel["io"] = io
    return kernel


# -- the server --------------------------------------------------------------------------------

def create_server(client: Any, *, where: str = "the daemon", max_wait: float = DEFAULT_MAX_WAIT,
                  name: str = "keval", version: str = "",
                  log_level: str = "WARNING") -> MCPServer:
    """An ``MCPServer`` whose tools evaluate kernels through ``client`` (a ``keval.Client``).

    ``where`` names the daemon in error messages (its socket or URL); ``max_wait`` bounds how
    long one tool call waits for its job.
    """
    daemon = _Daemon(client, where)
    server = MCPServer(name=name, title="keval GPU kernel evaluator",
                       description="Compile, check and time GPU kernels with keval",
                       instructions=guide.SERVER_INSTRUCTIONS, version=version,
                       log_level=log_level)  # type: ignore[arg-type]

    async def wait_for(job_id: str, mode: Optional[str], ctx: Optional[Context],
                       limit: float, cancel_on_abort: bool) -> Dict[str, Any]:
        """Poll the job until it finishes or ``limit`` seconds pass; its last record."""
        deadline = time.monotonic() + limit
        delay = _POLL_FIRST
        last_stage = None
        try:
            while True:
                job = _as_dict(await daemon.call("job", job_id, mode=mode, job_id=job_id))
                if job_finished(job):
                    return job
                stage = job.get("stage") or job.get("status")
                if ctx is not None and stage != last_stage:
                    last_stage = stage
                    step = _STAGES.index(stage) if stage in _STAGES else 0
                    try:
                        await ctx.report_progress(step, len(_STAGES) - 1, f"job {job_id}: {stage}")
                    except Exception:  # noqa: BLE001 - progress is best effort
                        pass
                if time.monotonic() >= deadline:
                    return job
                await anyio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 1.5, _POLL_MAX)
        except anyio.get_cancelled_exc_class():
            # The client cancelled the tool call: cancel the job it started, then give up.
            if cancel_on_abort:
                with anyio.CancelScope(shield=True):
                    try:
                        await daemon.call("cancel", job_id, mode=mode, job_id=job_id)
                    except ToolFailure:
                        pass
            raise

    async def run_job(request: Dict[str, Any], mode: str, wait: bool, detail: str,
                      ctx: Optional[Context]) -> CallToolResult:
        try:
            job_id = _job_id_of(await daemon.call("submit", request, mode, mode=mode))
            if not wait:
                return _result({
                    "job_id": job_id, "mode": mode, "finished": False, "job_status": "submitted",
                    "headline": f"submitted as job {job_id}: call get_job(job_id, wait=true) "
                                f"for the result"})
            job = await wait_for(job_id, mode, ctx, max_wait, cancel_on_abort=True)
            summary = summarize_job(job)
            if not summary.get("finished"):
                summary["headline"] = (f"job {job_id} is still running after {max_wait:g} s "
                                       f"({job.get('stage') or job.get('status')}): call "
                                       f"get_job(job_id, wait=true)")
            elif detail == "full":
                summary.pop("more", None)
                summary["response"] = job.get("result")
            return _result(summary)
        except ToolFailure as failure:
            return _error_result(failure)

    @server.tool(
        name="evaluate_kernel",
        title="Run and time one kernel",
        description=(
            "Compile one kernel, run it on inputs generated from its IOContract (or its own "
            "get_inputs()), check that it runs and does not corrupt its inputs, and time it. "
            "There is no reference, so correctness means 'it ran'; use compare_kernels to check "
            "results against a reference. kernel_type says what source_code holds: torch "
            "(PyTorch Model/forward or a function), torch_cuda (KernelBench ModelNew with "
            "load_inline), triton (@triton.jit kernel; io with launch.grid required), cuda "
            "(CUDA C++ __global__ kernel, no host code; io with launch.grid and launch.block "
            "required), multi_kernel (Python entry point, metadata.entry_point; io required); "
            "list_kernel_types says which this daemon has and what each needs. " +
            guide.RESULT_GUIDE),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                    idempotent_hint=False, open_world_hint=False),
    )
    async def evaluate_kernel(
        source_code: Annotated[str, Field(description="the kernel's whole source, as text")],
        kernel_type: Annotated[str, Field(description="torch, torch_cuda, triton, cuda, "
                                                      "multi_kernel, cuda_program, or a "
                                                      "plugin's own (list_kernel_types)")],
        io: IoArg = None,
        metadata: MetadataArg = None,
        num_trials: NumTrials = None,
        timeout: Timeout = None,
        atol: Atol = None,
        rtol: Rtol = None,
        options: OptionsArg = None,
        wait: Wait = True,
        detail: Detail = "summary",
        ctx: Context = None,  # type: ignore[assignment]
    ) -> Annotated[CallToolResult, JobSummary]:
        try:
            request = _request({"kernel": _kernel(source_code, kernel_type, metadata, io)},
                               num_trials, timeout, atol, rtol, options)
        except ToolFailure as failure:
            return _error_result(failure)
        return await run_job(request, "evaluate", wait, detail, ctx)

    @server.tool(
        name="compare_kernels",
        title="Compare a candidate kernel against a reference",
        description=(
            "Judge a candidate kernel against a reference: both get bit-identical inputs (from "
            "an IOContract or the reference's KernelBench get_inputs()), the candidate's outputs "
            "are compared with the reference's (atol/rtol) on several trials and on every timed "
            "sample, and both are timed, interleaved, by the same method. reference and "
            "candidate are each {source_code, kernel_type, metadata?, io?}; any two kernel "
            "types can be compared (a torch reference against a cuda or triton candidate "
            "shares the IOContract given on either side). KernelBench: reference kernel_type "
            "torch with Model, get_inputs, get_init_inputs; candidate torch or torch_cuda with "
            "ModelNew. " + guide.RESULT_GUIDE),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                    idempotent_hint=False, open_world_hint=False),
    )
    async def compare_kernels(
        reference: Annotated[KernelSpecArg, Field(description="the reference kernel")],
        candidate: Annotated[KernelSpecArg, Field(description="the kernel under test")],
        num_trials: NumTrials = None,
        timeout: Timeout = None,
        atol: Atol = None,
        rtol: Rtol = None,
        options: OptionsArg = None,
        wait: Wait = True,
        detail: Detail = "summary",
        ctx: Context = None,  # type: ignore[assignment]
    ) -> Annotated[CallToolResult, JobSummary]:
        try:
            request = _request({"ref_kernel": dict(reference), "custom_kernel": dict(candidate)},
                               num_trials, timeout, atol, rtol, options)
        except ToolFailure as failure:
            return _error_result(failure)
        return await run_job(request, "compare", wait, detail, ctx)

    @server.tool(
        name="get_job",
        title="Get a job's state or result",
        description=(
            "A job's result once finished (the same summary evaluate_kernel and compare_kernels "
            "give), or its stage (submitted, compiling, validating, profiling) while it runs. "
            "wait=true waits up to wait_timeout seconds for it to finish. detail='full' adds "
            "the daemon's whole job record: the request's phases (compilation_result, "
            "validation_result, profiling_result) and the full response. Results are kept for "
            "the daemon's --job-ttl (default an hour)."),
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True,
                                    open_world_hint=False),
    )
    async def get_job(
        job_id: Annotated[str, Field(min_length=1, max_length=64, description="the job's id")],
        wait: Annotated[bool, Field(description="wait for the job to finish")] = False,
        wait_timeout: Annotated[Optional[float], Field(
            gt=0, description=f"seconds to wait at most (default and cap {DEFAULT_MAX_WAIT:g})"
        )] = None,
        detail: Detail = "summary",
        ctx: Context = None,  # type: ignore[assignment]
    ) -> Annotated[CallToolResult, JobSummary]:
        try:
            if wait:
                limit = min(wait_timeout or max_wait, max_wait)
                job = await wait_for(job_id, None, ctx, limit, cancel_on_abort=False)
            else:
                job = _as_dict(await daemon.call("job", job_id, job_id=job_id))
            return _result(summarize_job(job, detail=detail))
        except ToolFailure as failure:
            return _error_result(failure)

    @server.tool(
        name="cancel_job",
        title="Cancel a job",
        description=(
            "Cancel a queued or running job: a queued job is dropped, a running one's processes "
            "are killed. Answers the job's final state (verdict 'error', 'job cancelled by the "
            "client', with the phases it completed). A job that has already finished is left "
            "as it is and its result returned."),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True,
                                    idempotent_hint=True, open_world_hint=False),
    )
    async def cancel_job(
        job_id: Annotated[str, Field(min_length=1, max_length=64, description="the job's id")],
    ) -> Annotated[CallToolResult, JobSummary]:
        try:
            try:
                job = _as_dict(await daemon.call("cancel", job_id, job_id=job_id))
                cancelled = True
            except ToolFailure as failure:
                if failure.fields.get("http_status") != 409:
                    raise
                job = _as_dict(await daemon.call("job", job_id, job_id=job_id))
                cancelled = False
            if "result" not in job and "kernel_exec_result" in job:
                job = {"job_id": job.get("job_id", job_id), "status": "failed", "result": job}
            summary = summarize_job(job)
            summary["cancelled"] = cancelled
            if not cancelled:
                summary["headline"] = "already finished, not cancelled: " + summary["headline"]
            return _result(summary)
        except ToolFailure as failure:
            return _error_result(failure)

    @server.tool(
        name="list_kernel_types",
        title="List kernel types",
        description=(
            "The kernel types this daemon can evaluate (its plugins): for each, whether it is "
            "usable, its description, capabilities (requires_io_contract, default_inputs, cuda, "
            "cpu, python, returns_outputs, ...), versions, and what the source must hold and "
            "whether an IOContract is needed. Plugins that failed to load are listed under "
            "load_errors. A type with capability cpu runs without a GPU; the others need one "
            "(health lists the GPUs)."),
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True,
                                    open_world_hint=False),
    )
    async def list_kernel_types() -> Annotated[CallToolResult, KernelTypes]:
        try:
            plugins = _as_dict(await daemon.call("plugins"))
        except ToolFailure as failure:
            return _error_result(failure)
        types: List[Dict[str, Any]] = []
        errors: List[Dict[str, Any]] = []
        seen = set()
        for entry in plugins.get("plugins") or []:
            if not isinstance(entry, Mapping):
                continue
            kernel_type = entry.get("kernel_type")
            if not kernel_type or not entry.get("usable", True):
                errors.append({k: entry.get(k) for k in ("path", "kernel_type", "error")
                               if entry.get(k) is not None} or dict(entry))
                continue
            if kernel_type in seen:  # the first provider on the search path wins
                continue
            seen.add(kernel_type)
            info: Dict[str, Any] = {"kernel_type": kernel_type, "usable": True}
            for key in ("description", "capabilities", "plugin_version", "api_version"):
                if entry.get(key) is not None:
                    info[key] = entry[key]
            info.update(guide.KERNEL_TYPE_NOTES.get(kernel_type, {}))
            types.append(info)
        for entry in plugins.get("errors") or plugins.get("load_errors") or []:
            errors.append(dict(entry) if isinstance(entry, Mapping) else {"error": str(entry)})
        out: Dict[str, Any] = {"kernel_types": types, "load_errors": errors}
        if plugins.get("search_path"):
            out["search_path"] = plugins["search_path"]
        return _result(out)

    @server.tool(
        name="health",
        title="Daemon health",
        description=(
            "The daemon's state: status (ok, or shutting_down), version, kernel types, GPUs "
            "(index, name, type such as H100, architecture, memory, state idle/busy) or why "
            "none was found, whether CPU-mode kernel types can run, and the job queue (active, "
            "queued, capacity)."),
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True,
                                    open_world_hint=False),
    )
    async def health() -> Annotated[CallToolResult, HealthSummary]:
        try:
            body = _as_dict(await daemon.call("health"))
        except ToolFailure as failure:
            return _error_result(failure)
        out: Dict[str, Any] = {"status": str(body.get("status") or "unknown")}
        for key in ("version", "plugin_api", "cpu_device", "gpu_discovery"):
            if body.get(key) is not None:
                out[key] = body[key]
        out["kernel_types"] = list(body.get("plugins") or body.get("kernel_types") or [])
        out["gpus"] = [dict(g) for g in body.get("gpus") or [] if isinstance(g, Mapping)]
        out["jobs"] = dict(body.get("jobs") or {})
        out["daemon"] = where
        return _result(out)

    return server
