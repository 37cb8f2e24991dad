"""``keval.Client``: keval's daemon (``keval serve``) from Python, over its Unix socket or TCP.

Standard library only. ``Client`` is synchronous and thread-safe (one connection per request);
``AsyncClient`` offers the same methods as coroutines for ``asyncio`` code. Both return typed
results (``keval.results``) and raise ``KevalHTTPError`` for an HTTP error, carrying the JSON
path of the field at fault on a 400, and ``DaemonUnavailable`` when no daemon answers.

What is an error and what is a result follows the V2 contract: a kernel that does not compile or
is wrong is a result (200); a failure of keval itself during a job (timeout, worker death: 500)
is a result too, ``EvalResult.status == "failed"`` with ``error`` set, because its body carries
the phases that completed; everything else that is not 2xx raises.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import time
import urllib.parse
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple, TypeVar

from ._daemon import (WAIT_FOREVER, DaemonError, LocalDaemon, TcpClient, UnixClient,
                      default_socket_path, read_token_file, retry_after_seconds)
from .results import EvalResult, Health, Job

__all__ = ["AsyncClient", "Client", "DaemonUnavailable", "JobTimeout", "KevalError",
           "KevalHTTPError"]

_MODES = ("evaluate", "compare")
T = TypeVar("T")


class KevalError(Exception):
    """Base of the errors ``keval.Client`` raises."""


class DaemonUnavailable(KevalError, DaemonError):
    """No daemon answered: the socket or port is not there, the connection broke or timed out,
    or a daemon could not be started. (Also a ``keval._daemon.DaemonError``.)"""


class JobTimeout(KevalError, TimeoutError):
    """``wait`` gave up before the job finished; ``job`` is the last state seen. The job goes on:
    cancel it if it is no longer wanted."""

    def __init__(self, message: str, job: Job):
        super().__init__(message)
        self.job = job


class KevalHTTPError(KevalError):
    """The daemon answered with an HTTP error.

    ``status``: the HTTP status; ``error_class``: ``error.class`` (``bad_request``,
    ``not_found``, ``conflict``, ``unavailable``, ``unauthorized``, ...); ``path``: on a 400, the
    JSON path of the bad field (``custom_kernel.io.args[1].tensor_spec.shape[0]``; ``""`` for the
    whole body); ``message``: ``error.message``; ``body``: the whole answer; ``retry_after``:
    seconds, on a 503 (queue full, connection limit, shutting down).
    """

    def __init__(self, status: int, body: Mapping[str, Any],
                 headers: Optional[Mapping[str, str]] = None, request: str = ""):
        self.status = status
        self.body: Dict[str, Any] = dict(body)
        self.headers: Dict[str, str] = dict(headers or {})
        error = self.body.get("error")
        error = error if isinstance(error, dict) else {}
        self.error_class: str = str(error.get("class", "") or "")
        path = error.get("path")
        self.path: Optional[str] = path if isinstance(path, str) else None
        message = error.get("message")
        if not isinstance(message, str):
            message = str(self.body.get("raw", "") or "")[:500]
        self.message: str = message
        self.retry_after: Optional[float] = retry_after_seconds(self.headers)
        where = f" at {self.path}" if self.path else ""
        text = f"HTTP {status}"
        if self.error_class:
            text += f" {self.error_class}"
        if request:
            text = f"{request}: {text}"
        super().__init__(f"{text}{where}: {self.message}" if self.message else text + where)


def _jsonable(value: Any) -> Any:
    """The request as plain JSON values: IOContract objects (``to_dict``) become dicts, so a
    built contract can be put into a request as it is."""
    if hasattr(value, "to_dict") and callable(value.to_dict):
        return _jsonable(value.to_dict())
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _request_body(request: Mapping[str, Any], async_: bool) -> Dict[str, Any]:
    if not isinstance(request, Mapping):
        raise TypeError(f"request: want a dict (the JSON body), got {type(request).__name__}")
    body = _jsonable(request)
    # The method decides synchronous or not; an "async" left in a reused request must not.
    body.pop("async", None)
    if async_:
        body["async"] = True
    return body


def _gpu_header(gpu_type: Optional[str]) -> Optional[Dict[str, str]]:
    return {"X-GPU-Type": gpu_type} if gpu_type else None


class Client:
    """A client of one keval daemon.

    >>> with keval.Client() as c:                  # the default socket, as `keval serve` uses
    ...     r = c.compare(request)
    ...     print(r.ok, r.speedup, r.validation_error)

    ``Client()`` talks to ``socket_path``, else ``$KEVAL_SOCKET``, else
    ``${TMPDIR:-/tmp}/keval-<uid>/daemon/keval.sock``. ``Client(url="http://HOST:PORT",
    token=...)`` (or ``token_file=``) talks TCP to ``keval serve --listen``. ``timeout`` bounds
    each short request (health, job, cancel, ...) in seconds; ``evaluate`` and ``compare`` wait as
    long as the job takes unless given a ``timeout`` of their own.
    """

    def __init__(self, socket_path: Optional[str] = None, *, url: Optional[str] = None,
                 token: Optional[str] = None, token_file: Optional[str] = None,
                 timeout: Optional[float] = 30.0):
        if url is not None and socket_path is not None:
            raise ValueError("give socket_path or url, not both")
        if url is None and (token is not None or token_file is not None):
            raise ValueError("token and token_file are for TCP: give url too")
        if token is not None and token_file is not None:
            raise ValueError("give token or token_file, not both")
        self._daemon: Optional[LocalDaemon] = None
        self._transport: Any
        if url is not None:
            if token_file is not None:
                try:
                    token = read_token_file(token_file)
                except (OSError, ValueError) as e:
                    raise KevalError(f"token_file: cannot read {token_file}: {e}") from e
            self._transport = TcpClient(url, token=token, timeout=timeout)
        else:
            self._transport = UnixClient(socket_path or default_socket_path(), timeout=timeout)
        self.timeout = timeout

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def local(cls, keval_bin: Optional[str] = None, state_dir: Optional[str] = None,
              serve_args: Iterable[str] = (), *, socket_path: Optional[str] = None,
              timeout: Optional[float] = 30.0, start_timeout: float = 60.0) -> "Client":
        """A client of the daemon on this machine, started if none is running.

        Looks at ``socket_path``, else ``STATE_DIR/keval.sock`` when ``state_dir`` is given, else
        the default socket; a daemon answering ``GET /health`` 200 there is used as it is.
        Otherwise starts ``keval serve [serve_args...]`` (binary: ``keval_bin``, else
        ``$KEVAL_BIN``, else ``keval`` on PATH) in ``state_dir`` (default: a temporary directory,
        removed afterwards) serving that socket (default: one in the state directory), and stops
        it on ``close()``. ``client.daemon`` is the started daemon, or None when attached.
        A started daemon also ends with the thread that started it (Linux's PDEATHSIG, so that
        no daemon outlives a crashed caller): call this from the main thread or a long-lived one.
        """
        if socket_path is None and state_dir is not None:
            socket_path = os.path.join(state_dir, "keval.sock")
        probe = socket_path or default_socket_path()
        if os.path.exists(probe):
            try:
                status, _, _ = UnixClient(probe, timeout=5.0).get_json("/health")
            except DaemonError:
                status = 0
            if status == 200:
                return cls(socket_path=probe, timeout=timeout)
        daemon = LocalDaemon(keval_bin=keval_bin, extra_args=serve_args,
                             start_timeout=start_timeout, state_dir=state_dir,
                             socket_path=socket_path)
        try:
            daemon.start()
        except DaemonError as e:
            raise DaemonUnavailable(str(e)) from e
        client = cls(socket_path=daemon.socket_path, timeout=timeout)
        client._daemon = daemon
        return client

    @property
    def daemon(self) -> Optional[LocalDaemon]:
        """The daemon ``local()`` started for this client (stopped by ``close()``), or None."""
        return self._daemon

    @property
    def address(self) -> str:
        """The socket path or URL this client talks to."""
        return self._transport.describe()

    def close(self) -> None:
        """Stops the daemon ``local()`` started, if any. Nothing else is held between calls."""
        daemon, self._daemon = self._daemon, None
        if daemon is not None:
            daemon.stop()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"keval.Client({self.address!r})"

    # -- transport ---------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: Any = None, timeout: Optional[float] = None,
              headers: Optional[Dict[str, str]] = None) -> Tuple[int, Dict[str, Any],
                                                                  Dict[str, str]]:
        try:
            if method == "POST":
                return self._transport.post_json(path, body, timeout=timeout, headers=headers)
            if method == "DELETE":
                return self._transport.delete_json(path, timeout=timeout, headers=headers)
            return self._transport.get_json(path, timeout=timeout, headers=headers)
        except DaemonError as e:
            raise DaemonUnavailable(f"no keval daemon answered: {e}") from e

    @staticmethod
    def _job_path(job_id: str) -> str:
        if not isinstance(job_id, str) or not job_id:
            raise ValueError(f"job_id: want a non-empty string, got {job_id!r}")
        return "/jobs/" + urllib.parse.quote(job_id, safe="")

    # -- jobs --------------------------------------------------------------------------------
    def evaluate(self, request: Mapping[str, Any], *, timeout: Optional[float] = None,
                 gpu_type: Optional[str] = None) -> EvalResult:
        """``POST /evaluate``: run one kernel (``request["kernel"]``) and wait for its result.

        ``timeout``: seconds to wait for the answer (default: as long as the job takes; the
        request's own ``timeout`` bounds the job's run, not its queueing). ``gpu_type``: run only
        on GPUs of that type (``X-GPU-Type``; a 400 when the host has none).
        """
        return self._run("evaluate", request, timeout, gpu_type)

    def compare(self, request: Mapping[str, Any], *, timeout: Optional[float] = None,
                gpu_type: Optional[str] = None) -> EvalResult:
        """``POST /compare``: ``custom_kernel`` against ``ref_kernel``; as ``evaluate``."""
        return self._run("compare", request, timeout, gpu_type)

    def _run(self, mode: str, request: Mapping[str, Any], timeout: Optional[float],
             gpu_type: Optional[str]) -> EvalResult:
        body = _request_body(request, async_=False)
        status, answer, headers = self._call("POST", "/" + mode, body,
                                             timeout if timeout is not None else WAIT_FOREVER,
                                             _gpu_header(gpu_type))
        return _eval_result(status, answer, headers, "POST /" + mode)

    def submit(self, request: Mapping[str, Any], mode: str = "evaluate", *,
               gpu_type: Optional[str] = None) -> str:
        """Queue a job (``"async": true``) and return its id at once (HTTP 202); follow it with
        ``job``, ``wait`` or ``cancel``. A ``job_id`` in the request picks the id (409 if taken)."""
        if mode not in _MODES:
            raise ValueError(f"mode: want 'evaluate' or 'compare', got {mode!r}")
        body = _request_body(request, async_=True)
        status, answer, headers = self._call("POST", "/" + mode, body, None,
                                             _gpu_header(gpu_type))
        if status != 202 or not isinstance(answer.get("job_id"), str):
            raise KevalHTTPError(status, answer, headers, "POST /" + mode)
        return answer["job_id"]

    def job(self, job_id: str) -> Job:
        """``GET /jobs/{id}``: the job's status, its phases so far, its result once finished.
        An id that is unknown or expired (``--job-ttl``) raises ``KevalHTTPError`` 404."""
        path = self._job_path(job_id)
        status, answer, headers = self._call("GET", path)
        if status != 200:
            raise KevalHTTPError(status, answer, headers, "GET " + path)
        return Job.from_json(answer)

    def wait(self, job_id: str, timeout: Optional[float] = None,
             poll_interval: float = 0.2) -> Job:
        """Poll ``job`` until the job has finished (``completed`` or ``failed``) and return it.

        ``timeout``: seconds before raising ``JobTimeout`` (the job is not cancelled); None waits
        as long as it takes.
        """
        if poll_interval <= 0:
            raise ValueError(f"poll_interval: want > 0 seconds, got {poll_interval!r}")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job.done:
                return job
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise JobTimeout(f"job {job_id} still {job.status} after {timeout:g} s", job)
                time.sleep(min(poll_interval, left))
            else:
                time.sleep(poll_interval)

    def cancel(self, job_id: str) -> Job:
        """``DELETE /jobs/{id}``: drop a queued job, kill a running one's worker; returns the job,
        ``failed`` with "job cancelled by the client" and the phases it completed. A job that has
        already finished raises ``KevalHTTPError`` 409 (its result stays in ``job()``)."""
        path = self._job_path(job_id)
        # The answer comes once the worker is gone, which may take longer than a health check.
        status, answer, headers = self._call("DELETE", path, timeout=WAIT_FOREVER)
        if status != 200:
            raise KevalHTTPError(status, answer, headers, "DELETE " + path)
        return Job.from_json(answer)

    # -- the daemon --------------------------------------------------------------------------
    def health(self) -> Health:
        """``GET /health``: version, kernel types, GPUs. A daemon shutting down answers 503 with
        a body: that is returned (``Health.status == "shutting_down"``), not raised."""
        status, answer, headers = self._call("GET", "/health")
        # A 503 of the connection limit is no health report: only one with the daemon's version.
        if not (status == 200 or (status == 503 and "version" in answer)):
            raise KevalHTTPError(status, answer, headers, "GET /health")
        return Health.from_json(answer, http_status=status)

    def stats(self) -> Dict[str, Any]:
        """``GET /stats``: jobs, verdicts, timings, connections, GPUs, state (README)."""
        return self._get_object("/stats")

    def plugins(self) -> Dict[str, Any]:
        """``GET /plugins``: the search path, each plugin found and why any failed to load."""
        return self._get_object("/plugins")

    def metrics(self) -> str:
        """``GET /metrics``: the Prometheus text."""
        status, answer, headers = self._call("GET", "/metrics")
        if status != 200:
            raise KevalHTTPError(status, answer, headers, "GET /metrics")
        return str(answer.get("raw", ""))

    def _get_object(self, path: str) -> Dict[str, Any]:
        status, answer, headers = self._call("GET", path)
        if status != 200:
            raise KevalHTTPError(status, answer, headers, "GET " + path)
        return answer


def _eval_result(status: int, body: Dict[str, Any], headers: Mapping[str, str],
                 request: str) -> EvalResult:
    # 200: the verdict. 500 with a job in the body: keval failed during the job; the body keeps
    # the phases that completed, so it is a result. A 500 without one (the daemon's own fault
    # before any job) and every other status raise.
    if status == 200 or (status == 500 and ("job_id" in body or "kernel_exec_result" in body)):
        return EvalResult.from_json(body, http_status=status, gpu_type=headers.get("x-gpu-type"))
    raise KevalHTTPError(status, body, headers, request)


class AsyncClient:
    """``Client``'s methods as coroutines, for ``asyncio`` code.

    >>> async with keval.AsyncClient() as c:
    ...     results = await asyncio.gather(*(c.compare(r) for r in requests))

    Construction takes ``Client``'s arguments. Each request runs in a thread of the client's own
    pool (``max_workers`` at once), so that many synchronous evaluations can wait together
    without holding the event loop or its default executor. ``wait`` polls with
    ``asyncio.sleep``. Cancelling an awaited ``evaluate``/``compare`` abandons the answer but
    not the job: use ``submit`` + ``wait`` + ``cancel`` for work that may be called off.
    """

    def __init__(self, socket_path: Optional[str] = None, *, url: Optional[str] = None,
                 token: Optional[str] = None, token_file: Optional[str] = None,
                 timeout: Optional[float] = 30.0, max_workers: int = 64,
                 client: Optional[Client] = None):
        self.sync: Client = client if client is not None else Client(
            socket_path, url=url, token=token, token_file=token_file, timeout=timeout)
        self._max_workers = max_workers
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None

    @classmethod
    def local(cls, keval_bin: Optional[str] = None, state_dir: Optional[str] = None,
              serve_args: Iterable[str] = (), **kwargs: Any) -> "AsyncClient":
        """As ``Client.local`` (not a coroutine: it blocks while a daemon starts, about a
        second); ``max_workers`` may be given too."""
        max_workers = kwargs.pop("max_workers", 64)
        return cls(client=Client.local(keval_bin, state_dir, serve_args, **kwargs),
                   max_workers=max_workers)

    @property
    def daemon(self) -> Optional[LocalDaemon]:
        return self.sync.daemon

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self._max_workers, thread_name_prefix="keval-client")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def evaluate(self, request: Mapping[str, Any], *, timeout: Optional[float] = None,
                       gpu_type: Optional[str] = None) -> EvalResult:
        return await self._run(self.sync.evaluate, request, timeout=timeout, gpu_type=gpu_type)

    async def compare(self, request: Mapping[str, Any], *, timeout: Optional[float] = None,
                      gpu_type: Optional[str] = None) -> EvalResult:
        return await self._run(self.sync.compare, request, timeout=timeout, gpu_type=gpu_type)

    async def submit(self, request: Mapping[str, Any], mode: str = "evaluate", *,
                     gpu_type: Optional[str] = None) -> str:
        return await self._run(self.sync.submit, request, mode, gpu_type=gpu_type)

    async def job(self, job_id: str) -> Job:
        return await self._run(self.sync.job, job_id)

    async def wait(self, job_id: str, timeout: Optional[float] = None,
                   poll_interval: float = 0.2) -> Job:
        if poll_interval <= 0:
            raise ValueError(f"poll_interval: want > 0 seconds, got {poll_interval!r}")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            job = await self.job(job_id)
            if job.done:
                return job
            delay = poll_interval
            if deadline is not None:
                left = deadline - loop.time()
                if left <= 0:
                    raise JobTimeout(f"job {job_id} still {job.status} after {timeout:g} s", job)
                delay = min(delay, left)
            await asyncio.sleep(delay)

    async def cancel(self, job_id: str) -> Job:
        return await self._run(self.sync.cancel, job_id)

    async def health(self) -> Health:
        return await self._run(self.sync.health)

    async def stats(self) -> Dict[str, Any]:
        return await self._run(self.sync.stats)

    async def plugins(self) -> Dict[str, Any]:
        return await self._run(self.sync.plugins)

    async def metrics(self) -> str:
        return await self._run(self.sync.metrics)

    def close(self) -> None:
        """Stops a daemon ``local()`` started and the client's threads."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)
        self.sync.close()

    async def aclose(self) -> None:
        # Stopping a daemon waits for it to exit: not on the event loop's thread.
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __enter__(self) -> "AsyncClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"keval.AsyncClient({self.sync.address!r})"
