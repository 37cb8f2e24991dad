"""The per-node actor of ``keval.ray``: one per Ray node, in front of that node's ``keval serve``.

``NodeDaemon`` attaches to the daemon answering on the node's socket (a DaemonSet's, a systemd
unit's) or starts one, reports what the node offers (GPUs by type, kernel types, capacity, load)
and runs jobs through ``keval.Client``. Jobs run in the actor's own thread pool, so one actor
serves many at once; the daemon queues them for its GPUs.

The daemon is started from a thread of the actor's own that lives as long as the actor process:
``keval.Client.local`` ties a started daemon to the thread that started it (PDEATHSIG), and the
threads Ray runs actor methods on are not ours to keep. When the actor dies (its node removed, the
evaluator closed), the daemon it started gets SIGTERM; a daemon it attached to is left alone.

Every job's answer is an "outcome" dict (plain data, so that it crosses Ray as it is):
``{"kind": "result"|"bad_request"|"http_error"|"unavailable", ...}``. ``unavailable`` means the
daemon could not be reached (or stayed busy): the driver treats the node as failed and retries the
job elsewhere; everything else is the job's answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import socket
import threading
import time
from typing import Any, Dict, Mapping, Optional

import ray  # the real Ray: this module is keval.ray.node, absolute imports only

from ..client import Client, DaemonUnavailable, KevalHTTPError

__all__ = ["NodeDaemon", "format_node_path"]


def format_node_path(template: Optional[str], node_id: str, node_ip: str = "") -> Optional[str]:
    """``template`` with ``{node_id}`` (the Ray node id, 56 hex digits), ``{node}`` (its first
    12) and ``{node_ip}`` filled in; None stays None. Paths of Unix sockets are limited to 107
    bytes: prefer ``{node}``."""
    if not template:
        return None
    text = template.format(node_id=node_id, node=node_id[:12], node_ip=node_ip)
    return text if "://" in text else os.path.expanduser(text)


class NodeDaemon:
    """The actor (``ray.remote(NodeDaemon)``); built by ``keval.ray.Evaluator``, one per node.

    ``config`` keys (all optional): ``keval_bin``, ``state_dir`` and ``socket_path`` (templates,
    see ``format_node_path``), ``start_daemon`` (default True: start ``keval serve`` when none
    answers on the socket; False: attach only), ``url`` (a template too: talk TCP to a daemon
    there, never start one) with ``token_file``, ``serve_args``, ``env`` (set in the actor's
    environment before the daemon starts, so that it inherits them: ``KEVAL_PLUGIN_PATH``...),
    ``start_timeout``,
    ``capacity`` (jobs the node runs at once; default GPUs x ``jobs_per_gpu``, else ``node_cpus``,
    else this machine's cores), ``jobs_per_gpu``, ``node_cpus``, ``threads`` (jobs this actor
    carries at once), ``busy_retries`` (503 "queue full" answers waited out before the node counts
    as unavailable).
    """

    def __init__(self, config: Optional[Mapping[str, Any]] = None):
        self.config: Dict[str, Any] = dict(config or {})
        self.node_id: str = ray.get_runtime_context().get_node_id()
        self.ip = ray.util.get_node_ip_address()
        os.environ.update({str(k): str(v) for k, v in (self.config.get("env") or {}).items()})
        self.state_dir = format_node_path(self.config.get("state_dir"), self.node_id, self.ip)
        self.socket_path = format_node_path(self.config.get("socket_path"), self.node_id, self.ip)
        self.url = format_node_path(self.config.get("url"), self.node_id, self.ip)
        self._client: Optional[Client] = None
        self._error: Optional[str] = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._in_flight = 0
        self._count_lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=int(self.config.get("threads", 64)), thread_name_prefix="keval-ray-job")
        # Our own long-lived thread starts the daemon and stays until shutdown (see module doc).
        self._thread = threading.Thread(target=self._daemon_main, name="keval-ray-daemon",
                                        daemon=True)
        self._thread.start()

    # -- the daemon ----------------------------------------------------------------------------
    def _daemon_main(self) -> None:
        try:
            if self.url:
                self._client = Client(url=self.url, token_file=self.config.get("token_file"))
            elif not self.config.get("start_daemon", True):
                socket_path = self.socket_path or (
                    os.path.join(self.state_dir, "keval.sock") if self.state_dir else None)
                self._client = Client(socket_path=socket_path)  # None: the default socket
            else:
                self._client = Client.local(
                    keval_bin=self.config.get("keval_bin"), state_dir=self.state_dir,
                    serve_args=tuple(self.config.get("serve_args") or ()),
                    socket_path=self.socket_path,
                    start_timeout=float(self.config.get("start_timeout", 60.0)))
        except Exception as e:  # noqa: BLE001 - reported through info()
            self._error = f"{type(e).__name__}: {e}"
        finally:
            self._ready.set()
        self._stop.wait()
        client, self._client = self._client, None
        if client is not None:
            client.close()  # stops the daemon if this actor started it

    async def _run_in_pool(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # -- methods -------------------------------------------------------------------------------
    async def info(self) -> Dict[str, Any]:
        """What this node offers: ``ok``, ``node_id``, ``ip``, ``gpus`` (as /health lists them),
        ``gpu_types`` (type -> count), ``kernel_types``, ``cpu_device``, ``capacity``,
        ``in_flight`` (jobs this actor carries), ``jobs`` (the daemon's active/queued), ``daemon``
        (address, started or attached, version); ``ok`` False with ``error`` when no daemon."""
        return await self._run_in_pool(self._info)

    def _info(self) -> Dict[str, Any]:
        timeout = float(self.config.get("start_timeout", 60.0)) + 5.0
        base: Dict[str, Any] = {"node_id": self.node_id, "ip": self.ip,
                                "hostname": socket.gethostname(), "pid": os.getpid(),
                                "in_flight": self._in_flight}
        if not self._ready.wait(timeout):
            return {**base, "ok": False, "error": f"no keval daemon within {timeout:g} s"}
        client = self._client
        if client is None:
            return {**base, "ok": False, "error": self._error or "no keval daemon"}
        try:
            health = client.health()
        except (DaemonUnavailable, KevalHTTPError) as e:
            return {**base, "ok": False, "error": f"{type(e).__name__}: {e}"}
        if not health.ok:
            return {**base, "ok": False, "error": f"daemon status {health.status!r}"}
        gpu_types: Dict[str, int] = {}
        for gpu in health.gpus:
            kind = str(gpu.get("type") or "other")
            gpu_types[kind] = gpu_types.get(kind, 0) + 1
        capacity = self.config.get("capacity")
        if not capacity:
            if health.gpus:
                capacity = len(health.gpus) * max(1, int(self.config.get("jobs_per_gpu", 1)))
            else:
                capacity = int(self.config.get("node_cpus") or 0) or (os.cpu_count() or 1)
        daemon = client.daemon
        return {**base, "ok": True, "gpus": health.gpus, "gpu_types": gpu_types,
                "kernel_types": list(health.plugins), "cpu_device": health.cpu_device,
                "capacity": max(1, int(capacity)), "jobs": health.jobs,
                "daemon": {"address": client.address, "started": daemon is not None,
                           "version": health.version,
                           "state_dir": daemon.state_dir if daemon is not None else None}}

    async def run(self, mode: str, request: Mapping[str, Any], gpu_type: Optional[str] = None,
                  timeout: Optional[float] = None) -> Dict[str, Any]:
        """One job: ``mode`` ``evaluate`` or ``compare``; returns an outcome (module doc)."""
        with self._count_lock:
            self._in_flight += 1
        try:
            return await self._run_in_pool(self._run, mode, request, gpu_type, timeout)
        finally:
            with self._count_lock:
                self._in_flight -= 1

    def _run(self, mode: str, request: Mapping[str, Any], gpu_type: Optional[str],
             timeout: Optional[float]) -> Dict[str, Any]:
        started = time.monotonic()
        base = {"node_id": self.node_id, "ip": self.ip}
        if not self._ready.wait(float(self.config.get("start_timeout", 60.0)) + 5.0):
            return {**base, "kind": "unavailable", "error": "keval daemon not started in time"}
        client = self._client
        if client is None:
            return {**base, "kind": "unavailable", "error": self._error or "no keval daemon"}
        method = client.compare if mode == "compare" else client.evaluate
        busy_retries = int(self.config.get("busy_retries", 5))
        for attempt in range(busy_retries + 1):
            try:
                r = method(request, timeout=timeout, gpu_type=gpu_type)
            except KevalHTTPError as e:
                if e.status == 503 and attempt < busy_retries:
                    time.sleep(min(max(e.retry_after or 1.0, 0.1), 10.0))
                    continue
                error = {"class": e.error_class or "http_error", "message": e.message}
                if e.path is not None:
                    error["path"] = e.path
                body = dict(e.body)
                body["status"] = "failed"
                body["error"] = error
                kind = ("bad_request" if e.status == 400 else
                        "unavailable" if e.status == 503 else "http_error")
                return {**base, "kind": kind, "http_status": e.status, "body": body,
                        "error": str(e), "elapsed_s": time.monotonic() - started}
            except DaemonUnavailable as e:
                return {**base, "kind": "unavailable", "error": f"DaemonUnavailable: {e}",
                        "elapsed_s": time.monotonic() - started}
            return {**base, "kind": "result", "http_status": r.http_status, "body": r.raw,
                    "gpu_type": r.gpu_type, "elapsed_s": time.monotonic() - started}
        raise AssertionError("unreachable")

    async def shutdown(self) -> bool:
        """Stops the daemon this actor started (an attached one is left running)."""
        self._stop.set()
        await self._run_in_pool(self._thread.join, 30.0)
        return not self._thread.is_alive()
