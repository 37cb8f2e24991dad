"""``keval.ray.Evaluator``: keval across a Ray cluster, one daemon per node (docs/ray.md).

The driver keeps one ``NodeDaemon`` actor per alive Ray node (``NodeAffinitySchedulingStrategy``,
hard), routes each request to the least-loaded node that has the GPU type and kernel types it
needs, and yields results as they complete. A job whose node dies (its actor dies, Ray reports
the node dead, its daemon stops answering) is run again once on another node, and the result says
so; a second failure is a result too (``kind == "infrastructure"``). Each request yields exactly
one result: an answer that comes late from a node given up on is dropped.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from typing import (Any, Callable, Deque, Dict, Iterable, Iterator, List, Mapping, Optional,
                    Sequence, Tuple)

import ray  # the real Ray: this module is keval.ray.evaluator, absolute imports only
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..results import EvalResult
from .node import NodeDaemon
from .routing import NodeState, pick_node, request_needs, resolve_mode

__all__ = ["ClusterResult", "Evaluator", "KevalCluster"]

# ClusterResult.kind values.
KINDS = ("result", "bad_request", "http_error", "unroutable", "infrastructure")


@dataclass
class ClusterResult:
    """The answer to one request of ``evaluate_many``.

    ``index``: the request's position in the list given; ``result``: an ``EvalResult`` always
    (for an answer that is no verdict, ``status == "failed"`` and ``error`` says why);
    ``kind``: ``result`` (the daemon's answer: the kernel's verdict, or keval's own failure of
    the job, ``result.status == "failed"``), ``bad_request`` (HTTP 400, ``error.path`` names the
    field), ``http_error`` (another HTTP error), ``unroutable`` (no node has the GPU type or
    kernel type asked for), ``infrastructure`` (nodes failed on both attempts, no node came up,
    or the call's timeout passed); ``node_id``/``node_ip``: the node that answered (None if none
    did); ``retried``: None, or ``{"after": "<the first attempt's error>", "first_node": ID}``;
    ``attempts``: attempts started; ``elapsed_s``: from the first dispatch to the answer.
    """

    index: int
    result: EvalResult
    kind: str = "result"
    node_id: Optional[str] = None
    node_ip: Optional[str] = None
    retried: Optional[Dict[str, Any]] = None
    attempts: int = 0
    elapsed_s: Optional[float] = None

    @property
    def ok(self) -> bool:
        """Compiled and correct (``EvalResult.ok``)."""
        return self.result.ok

    @property
    def error(self):
        """``result.error`` (``ErrorInfo``): keval's failure, the 400's path, the routing or
        infrastructure failure; None for a verdict."""
        return self.result.error

    def to_dict(self) -> Dict[str, Any]:
        """Plain JSON values: this result with the daemon's whole response under ``result``."""
        return {"index": self.index, "kind": self.kind, "node_id": self.node_id,
                "node_ip": self.node_ip, "retried": self.retried, "attempts": self.attempts,
                "elapsed_s": self.elapsed_s, "http_status": self.result.http_status,
                "result": self.result.raw}


@dataclass
class _Job:
    index: int
    mode: str
    request: Dict[str, Any]
    kernel_types: Tuple[str, ...]
    gpu_type: Optional[str]
    attempts: int = 0
    retried: Optional[Dict[str, Any]] = None
    first_dispatch: Optional[float] = None
    done: bool = False


@dataclass
class _Attempt:
    job: _Job
    node_id: str
    number: int
    started: float = field(default_factory=time.monotonic)


def _failure(message: str, error_class: str = "infrastructure") -> EvalResult:
    body = {"job_id": None, "status": "failed",
            "error": {"class": error_class, "message": message}}
    return EvalResult.from_json(body)


def _describe(error: BaseException) -> str:
    """One line for a Ray error: its type and the sentence that says why."""
    text = str(error)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    why = next((ln for ln in lines if "because" in ln), lines[0] if lines else "")
    return f"{type(error).__name__}: {why}"[:400]


class Evaluator:
    """keval on every node of a Ray cluster.

    >>> ray.init()                                   # or inside an RL framework's Ray job
    >>> ev = keval.ray.Evaluator()                   # one actor per alive node
    >>> for r in ev.evaluate_many(requests):         # as they complete
    ...     rewards[r.index] = r.result.speedup if r.ok else 0.0

    Options (all optional):
      ``keval_bin``: the ``keval`` binary on the nodes (default: ``$KEVAL_BIN``, else PATH).
      ``state_dir``, ``socket_path``: per-node templates, ``{node}`` (12 hex digits of the Ray
        node id) and ``{node_id}`` filled in. Default: the daemon's default socket, attached to
        when a daemon answers there (a DaemonSet's), started otherwise (``start_daemon=False``:
        never started; a node without one is failed). Nodes sharing one filesystem (a test
        cluster) need ``state_dir="/tmp/kr/{node}"``.
      ``url`` (``{node_ip}`` filled in too) and ``token_file``: talk TCP to the node's daemon
        instead (``keval serve --listen``; the Kubernetes Service of docs/ray.md), never start one.
      ``serve_args``: arguments for a started ``keval serve``; ``daemon_env``: environment
        variables for it (``KEVAL_PLUGIN_PATH``...).
      ``capacity``: jobs a node runs at once (default GPUs x ``jobs_per_gpu``, else the node's
        Ray CPUs); ``max_in_flight_per_node``: jobs sent to a node before the driver waits
        (default 2 x capacity, so that the daemon's queue is never empty).
      ``node_filter``: ``f(ray_node_dict) -> bool``, nodes to use (default: all alive nodes).
      ``actor_options``: extra ``.options()`` for the actors (``runtime_env``, ``resources``).
      ``start_timeout``: seconds for a node's daemon to come up; the constructor waits that long
        for the nodes of the moment (``wait_for_nodes``).
      ``refresh_interval``: seconds between looks for nodes that joined (also on any failure);
        ``liveness_interval``: seconds between asking Ray which nodes died while jobs run;
        ``node_backoff``: seconds before a node whose daemon failed is tried again.
      ``attempt_timeout``: seconds one attempt may take before it counts as failed (and is retried
        elsewhere; a late answer is dropped); default None: as long as the job takes.
      ``node_wait_timeout``: seconds requests wait when no node can take them at all.
      ``max_retries``: attempts after the first on node failure (default 1).
    """

    def __init__(self, *, keval_bin: Optional[str] = None, state_dir: Optional[str] = None,
                 socket_path: Optional[str] = None, start_daemon: bool = True,
                 url: Optional[str] = None, token_file: Optional[str] = None,
                 serve_args: Sequence[str] = (),
                 daemon_env: Optional[Mapping[str, str]] = None, capacity: Optional[int] = None,
                 jobs_per_gpu: int = 1, max_in_flight_per_node: Optional[int] = None,
                 node_filter: Optional[Callable[[Dict[str, Any]], bool]] = None,
                 actor_options: Optional[Mapping[str, Any]] = None, start_timeout: float = 120.0,
                 refresh_interval: float = 10.0, liveness_interval: float = 1.0,
                 node_backoff: float = 30.0, attempt_timeout: Optional[float] = None,
                 node_wait_timeout: float = 60.0, max_retries: int = 1,
                 wait_for_nodes: bool = True):
        if not ray.is_initialized():
            ray.init()
        self._config: Dict[str, Any] = {
            "keval_bin": keval_bin, "state_dir": state_dir, "socket_path": socket_path,
            "start_daemon": start_daemon, "url": url, "token_file": token_file,
            "serve_args": list(serve_args), "env": dict(daemon_env or {}),
            "capacity": capacity, "jobs_per_gpu": jobs_per_gpu, "start_timeout": start_timeout}
        self._max_in_flight = max_in_flight_per_node
        self._node_filter = node_filter
        self._actor_options = dict(actor_options or {})
        self.start_timeout = start_timeout
        self.refresh_interval = refresh_interval
        self.liveness_interval = liveness_interval
        self.node_backoff = node_backoff
        self.attempt_timeout = attempt_timeout
        self.node_wait_timeout = node_wait_timeout
        self.max_retries = max_retries
        self._lock = threading.RLock()
        self._nodes: Dict[str, NodeState] = {}
        self._actors: Dict[str, Any] = {}
        self._info_refs: Dict[Any, str] = {}
        self._failed_results: List[ClusterResult] = []
        self._actor_class: Any = None
        self._order = 0
        self._last_refresh = 0.0
        self._running = False
        self._closed = False
        self.refresh(wait=wait_for_nodes)

    # -- nodes ---------------------------------------------------------------------------------
    def refresh(self, wait: bool = False, timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """Looks for alive nodes without an actor (new ones, failed ones past their backoff) and
        starts their actors; forgets dead ones. ``wait``: until every starting node is ready or
        failed (at most ``timeout``, default ``start_timeout`` + 30 s). Returns ``nodes()``."""
        now = time.monotonic()
        self._last_refresh = now
        alive: Dict[str, Dict[str, Any]] = {}
        for n in ray.nodes():
            if n.get("Alive") and (self._node_filter is None or self._node_filter(n)):
                alive[n["NodeID"]] = n
        with self._lock:
            for node_id, node in self._nodes.items():
                if node_id not in alive and node.state != "dead":
                    self._mark_dead(node_id, "Ray reports the node dead")
            for node_id, n in alive.items():
                node = self._nodes.get(node_id)
                if node is not None and (node.state in ("starting", "ready") or
                                         (node.state == "failed" and now < node.retry_at)):
                    continue
                if node is not None and node.state == "dead":
                    continue  # a node id never comes back
                self._start_actor(node_id, n)
        if wait:
            deadline = time.monotonic() + (timeout if timeout is not None
                                           else self.start_timeout + 30.0)
            while self._info_refs and time.monotonic() < deadline:
                ready, _ = ray.wait(list(self._info_refs), num_returns=1,
                                    timeout=max(0.0, min(1.0, deadline - time.monotonic())))
                for ref in ready:
                    self._on_info(ref)
        return self.nodes()

    def _start_actor(self, node_id: str, ray_node: Dict[str, Any]) -> None:
        old = self._actors.pop(node_id, None)
        if old is not None:
            _kill(old)
        config = dict(self._config)
        config["node_cpus"] = int(ray_node.get("Resources", {}).get("CPU", 0) or 0)
        # Threads for the jobs the driver may send (max_in_flight), with room to spare.
        bound = max(self._max_in_flight or 0, 2 * int(self._config.get("capacity") or 0))
        config["threads"] = max(64, bound + 8)
        options: Dict[str, Any] = {"num_cpus": 0, "max_restarts": 0, "max_task_retries": 0,
                                   "max_concurrency": 1000}
        options.update(self._actor_options)
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
        if self._actor_class is None:
            self._actor_class = ray.remote(NodeDaemon)
        actor = self._actor_class.options(**options).remote(config)
        self._order += 1
        node = NodeState(node_id=node_id, ip=str(ray_node.get("NodeManagerAddress", "")),
                         state="starting", order=self._order,
                         retry_at=time.monotonic() + self.start_timeout + 30.0)
        self._nodes[node_id] = node
        self._actors[node_id] = actor
        self._info_refs[actor.info.remote()] = node_id

    def _on_info(self, ref: Any) -> None:
        node_id = self._info_refs.pop(ref)
        with self._lock:
            node = self._nodes.get(node_id)
            if node is None or node.state != "starting":
                return
            try:
                info = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - the actor could not start: node failed
                self._mark_failed(node_id, _describe(e))
                return
            if not info.get("ok"):
                self._mark_failed(node_id, str(info.get("error") or "no keval daemon"))
                return
            node.info = info
            node.ip = str(info.get("ip") or node.ip)
            node.gpu_types = dict(info.get("gpu_types") or {})
            node.kernel_types = tuple(info.get("kernel_types") or ())
            node.cpu_device = bool(info.get("cpu_device"))
            node.capacity = max(1, int(info.get("capacity") or 1))
            node.max_in_flight = max(1, int(self._max_in_flight or 2 * node.capacity))
            node.error = None
            node.state = "ready"

    def _mark_failed(self, node_id: str, why: str) -> None:
        node = self._nodes[node_id]
        node.state = "failed"
        node.error = why
        node.retry_at = time.monotonic() + self.node_backoff
        self._last_refresh = 0.0  # look for nodes again soon: one may have taken its place
        actor = self._actors.pop(node_id, None)
        if actor is not None:
            _kill(actor)

    def _mark_dead(self, node_id: str, why: str) -> None:
        node = self._nodes[node_id]
        node.state = "dead"
        node.error = why
        self._last_refresh = 0.0
        self._actors.pop(node_id, None)

    def nodes(self) -> List[Dict[str, Any]]:
        """Each node as the driver sees it: ``node_id``, ``ip``, ``state`` (starting, ready,
        failed, dead), ``gpu_types``, ``kernel_types``, ``capacity``, ``max_in_flight``,
        ``in_flight``, ``load``, ``error``, ``daemon``. Safe to call from another thread."""
        with self._lock:
            return [n.to_dict() for n in self._nodes.values()]

    def in_flight(self) -> Dict[str, int]:
        """Jobs in flight per node id (ready nodes). Safe to call from another thread."""
        with self._lock:
            return {k: n.in_flight for k, n in self._nodes.items() if n.state == "ready"}

    def node_reports(self, timeout: float = 30.0) -> List[Dict[str, Any]]:
        """Each ready node's own report (``NodeDaemon.info``: GPUs, kernel types, capacity, the
        daemon's queue, the actor's in-flight jobs), asked now."""
        with self._lock:
            actors = [(k, self._actors[k]) for k, n in self._nodes.items()
                      if n.state == "ready" and k in self._actors]
        refs = [a.info.remote() for _, a in actors]
        out = []
        for ref in refs:
            try:
                out.append(ray.get(ref, timeout=timeout))
            except Exception as e:  # noqa: BLE001
                out.append({"ok": False, "error": _describe(e)})
        return out

    # -- evaluation ----------------------------------------------------------------------------
    def evaluate(self, request: Mapping[str, Any], mode: str = "auto", *,
                 gpu_type: Optional[str] = None, timeout: Optional[float] = None) -> ClusterResult:
        """One request, on the least-loaded node that can run it (``evaluate_many``'s rules)."""
        results = list(self.evaluate_many([request], mode, gpu_type=gpu_type, timeout=timeout))
        return results[0]

    def evaluate_all(self, requests: Iterable[Mapping[str, Any]], mode: str = "auto", *,
                     gpu_type: Optional[str] = None,
                     timeout: Optional[float] = None) -> List[ClusterResult]:
        """``evaluate_many`` collected, in the requests' order (a batch of rewards)."""
        requests = list(requests)
        out: List[Optional[ClusterResult]] = [None] * len(requests)
        for r in self.evaluate_many(requests, mode, gpu_type=gpu_type, timeout=timeout):
            out[r.index] = r
        return [r for r in out if r is not None]

    def evaluate_many(self, requests: Iterable[Mapping[str, Any]], mode: str = "auto", *,
                      gpu_type: Optional[str] = None,
                      timeout: Optional[float] = None) -> Iterator[ClusterResult]:
        """Runs every request and yields a ``ClusterResult`` for each as it completes.

        ``mode``: ``evaluate``, ``compare``, or ``auto`` (``compare`` for a request with
        ``ref_kernel``/``custom_kernel``). ``gpu_type``: run only on GPUs of that type; a
        request's own ``gpu_type`` field overrides it (and is not sent to the daemon).
        ``timeout``: seconds for the whole call; requests still unanswered then yield
        ``infrastructure`` results. Exactly one result per request, whatever happens to nodes.
        Jobs are dispatched while the caller consumes results: iterate promptly. One
        ``evaluate_many`` at a time per ``Evaluator``.
        """
        jobs = []
        for i, request in enumerate(requests):
            if not isinstance(request, Mapping):
                raise TypeError(f"requests[{i}]: want a dict, got {type(request).__name__}")
            m = resolve_mode(request, mode)
            kinds, gtype = request_needs(request, m, gpu_type)
            body = dict(request)
            body.pop("gpu_type", None)
            jobs.append(_Job(index=i, mode=m, request=body, kernel_types=kinds, gpu_type=gtype))
        return self._drive(jobs, timeout)

    def _drive(self, jobs: List[_Job], timeout: Optional[float]) -> Iterator[ClusterResult]:
        with self._lock:
            if self._closed:
                raise RuntimeError("this keval.ray.Evaluator is closed")
            if self._running:
                raise RuntimeError("one evaluate_many at a time per keval.ray.Evaluator")
            self._running = True
        pending: Deque[_Job] = collections.deque(jobs)
        inflight: Dict[Any, _Attempt] = {}
        left = len(jobs)
        deadline = None if timeout is None else time.monotonic() + timeout
        last_liveness = time.monotonic()
        stuck_since: Optional[float] = None
        try:
            while left:
                now = time.monotonic()
                finished: List[ClusterResult] = []
                # 1. Dispatch what has somewhere to go.
                with self._lock:
                    finished += self._dispatch(pending, inflight)
                # 2. Nothing running and nothing can start: wait for nodes, within bounds.
                if pending and not inflight and not finished:
                    with self._lock:
                        starting = any(n.state == "starting" for n in self._nodes.values())
                    if not starting:
                        stuck_since = stuck_since or now
                        if now - self._last_refresh >= min(2.0, self.refresh_interval):
                            self.refresh()
                        if now - stuck_since >= self.node_wait_timeout:
                            while pending:
                                job = pending.popleft()
                                finished.append(self._finish(job, _failure(
                                    f"no keval node could take this request within "
                                    f"{self.node_wait_timeout:g} s: "
                                    f"{self._nodes_summary()}"), "infrastructure"))
                else:
                    stuck_since = None
                for r in finished:
                    left -= 1
                    yield r
                if not left:
                    break
                # 3. Wait for an answer (or a node coming up), bounded.
                refs = list(inflight) + list(self._info_refs)
                if refs:
                    ready, _ = ray.wait(refs, num_returns=1, timeout=0.5)
                    if ready:
                        more, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
                        ready = list({r: None for r in list(ready) + list(more)})
                else:
                    ready = []
                    time.sleep(0.2)
                for ref in ready:
                    if ref in self._info_refs:
                        self._on_info(ref)
                    elif ref in inflight:
                        r = self._on_answer(ref, inflight, pending)
                        if r is not None:
                            left -= 1
                            yield r
                # 4. Nodes Ray says died; attempts past attempt_timeout; new nodes.
                now = time.monotonic()
                if inflight and now - last_liveness >= self.liveness_interval:
                    last_liveness = now
                    self._check_liveness(inflight, pending)
                if self.attempt_timeout is not None:
                    for ref, att in list(inflight.items()):
                        if now - att.started > self.attempt_timeout:
                            r = self._attempt_failed(
                                ref, inflight, pending,
                                f"no answer within attempt_timeout {self.attempt_timeout:g} s")
                            if r is not None:
                                left -= 1
                                yield r
                if now - self._last_refresh >= self.refresh_interval:
                    self.refresh()
                self._expire_starting()
                for r in self._drain_failed():
                    left -= 1
                    yield r
                # 5. The call's own timeout.
                if deadline is not None and time.monotonic() >= deadline and left:
                    for ref in list(inflight):
                        att = inflight.pop(ref)
                        self._release(att)
                        _cancel(ref)
                        if not att.job.done:
                            pending.append(att.job)
                    while pending:
                        job = pending.popleft()
                        if job.done:
                            continue
                        left -= 1
                        yield self._finish(job, _failure(
                            f"evaluate_many timeout of {timeout:g} s passed before an answer"),
                            "infrastructure")
        finally:
            for ref, att in list(inflight.items()):
                self._release(att)
                _cancel(ref)
            with self._lock:
                self._running = False

    def _dispatch(self, pending: Deque[_Job], inflight: Dict[Any, _Attempt]
                  ) -> List[ClusterResult]:
        finished = []
        keep: Deque[_Job] = collections.deque()
        nodes = list(self._nodes.values())
        while pending:
            job = pending.popleft()
            if job.done:
                continue
            avoid = job.retried.get("first_node") if job.retried else None
            route = pick_node(nodes, job.kernel_types, job.gpu_type, avoid=avoid)
            if route.reason is not None:
                finished.append(self._finish(job, _failure(route.reason, "unroutable"),
                                             "unroutable"))
                continue
            if route.node is None:
                keep.append(job)
                continue
            node = route.node
            actor = self._actors[node.node_id]
            job.attempts += 1
            if job.first_dispatch is None:
                job.first_dispatch = time.monotonic()
            timeout = None
            ref = actor.run.remote(job.mode, job.request, job.gpu_type, timeout)
            inflight[ref] = _Attempt(job=job, node_id=node.node_id, number=job.attempts)
            node.in_flight += 1
        pending.extend(keep)
        return finished

    def _release(self, att: _Attempt) -> None:
        with self._lock:
            node = self._nodes.get(att.node_id)
            if node is not None and node.in_flight > 0:
                node.in_flight -= 1

    def _on_answer(self, ref: Any, inflight: Dict[Any, _Attempt],
                   pending: Deque[_Job]) -> Optional[ClusterResult]:
        att = inflight.get(ref)
        if att is None:
            return None
        try:
            outcome = ray.get(ref)
        except ray.exceptions.RayActorError as e:
            # The actor is gone (its node died, or it crashed): every job on it fails over.
            why = _describe(e)
            with self._lock:
                if self._nodes[att.node_id].state in ("ready", "starting"):
                    self._mark_dead_or_failed(att.node_id, why)
            first = self._attempt_failed(ref, inflight, pending, why)
            self._fail_node_attempts(att.node_id, inflight, pending, why)
            return first
        except Exception as e:  # noqa: BLE001 - a task error: this attempt failed, not the node
            return self._attempt_failed(ref, inflight, pending, _describe(e))
        kind = outcome.get("kind")
        if kind == "unavailable":
            why = f"keval daemon on node {att.node_id[:12]} unavailable: {outcome.get('error')}"
            with self._lock:
                if self._nodes[att.node_id].state == "ready":
                    self._mark_failed(att.node_id, why)
            first = self._attempt_failed(ref, inflight, pending, why)
            self._fail_node_attempts(att.node_id, inflight, pending, why)
            return first
        inflight.pop(ref)
        self._release(att)
        job = att.job
        if job.done:
            return None  # a late answer for a job already answered: dropped
        result = EvalResult.from_json(outcome.get("body") or {},
                                      http_status=outcome.get("http_status"),
                                      gpu_type=outcome.get("gpu_type"))
        return self._finish(job, result, kind if kind in KINDS else "result",
                            node_id=outcome.get("node_id") or att.node_id,
                            node_ip=outcome.get("ip"))

    def _mark_dead_or_failed(self, node_id: str, why: str) -> None:
        # Dead when Ray says so (in the error, or its node table); otherwise the actor alone
        # died: failed, and given a new actor after node_backoff.
        alive = "node has died" not in why and any(
            n.get("NodeID") == node_id and n.get("Alive") for n in ray.nodes())
        if alive:
            self._mark_failed(node_id, why)
        else:
            self._mark_dead(node_id, why)

    def _fail_node_attempts(self, node_id: str, inflight: Dict[Any, _Attempt],
                            pending: Deque[_Job], why: str) -> None:
        # Other attempts on that node are lost too: retried (or failed) now, results yielded
        # through _drain_failed.
        for ref, att in list(inflight.items()):
            if att.node_id == node_id:
                r = self._attempt_failed(ref, inflight, pending, why)
                if r is not None:
                    self._failed_results.append(r)

    def _drain_failed(self) -> List[ClusterResult]:
        out, self._failed_results = self._failed_results, []
        return out

    def _expire_starting(self) -> None:
        # An actor that never got placed (resources, node_filter) must not hold requests forever.
        now = time.monotonic()
        with self._lock:
            for ref, node_id in list(self._info_refs.items()):
                node = self._nodes.get(node_id)
                if node is not None and node.state == "starting" and now >= node.retry_at:
                    del self._info_refs[ref]
                    self._mark_failed(node_id, f"actor not ready within "
                                      f"{self.start_timeout + 30:g} s")

    def _attempt_failed(self, ref: Any, inflight: Dict[Any, _Attempt], pending: Deque[_Job],
                        why: str) -> Optional[ClusterResult]:
        """The attempt behind ``ref`` is given up: the job goes back to the front of the queue
        for another node, or, past ``max_retries``, gets an infrastructure result."""
        att = inflight.pop(ref, None)
        if att is None:
            return None
        self._release(att)
        _cancel(ref)  # its answer, should it still come, is not waited for
        job = att.job
        if job.done or att.number != job.attempts:
            return None
        if job.attempts <= self.max_retries:
            if job.retried is None:
                job.retried = {"after": why, "first_node": att.node_id}
            else:
                job.retried.setdefault("more", []).append({"after": why, "node": att.node_id})
            pending.appendleft(job)
            return None
        first = job.retried or {}
        message = (f"every attempt failed ({job.attempts}): the last on node "
                   f"{att.node_id[:12]}: {why}")
        if first:
            message += f"; first on node {str(first.get('first_node'))[:12]}: {first.get('after')}"
        return self._finish(job, _failure(message), "infrastructure")

    def _check_liveness(self, inflight: Dict[Any, _Attempt], pending: Deque[_Job]) -> None:
        try:
            alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        except Exception:  # noqa: BLE001 - GCS busy: the next round asks again
            return
        busy = {att.node_id for att in inflight.values()}
        for node_id in busy - alive:
            why = f"node {node_id[:12]} died (Ray reports it dead)"
            with self._lock:
                if self._nodes[node_id].state != "dead":
                    self._mark_dead(node_id, why)
            self._fail_node_attempts(node_id, inflight, pending, why)

    def _finish(self, job: _Job, result: EvalResult, kind: str, node_id: Optional[str] = None,
                node_ip: Optional[str] = None) -> ClusterResult:
        assert not job.done, f"request {job.index} answered twice"
        job.done = True
        elapsed = None if job.first_dispatch is None else time.monotonic() - job.first_dispatch
        return ClusterResult(index=job.index, result=result, kind=kind, node_id=node_id,
                             node_ip=node_ip, retried=job.retried, attempts=job.attempts,
                             elapsed_s=elapsed)

    def _nodes_summary(self) -> str:
        with self._lock:
            if not self._nodes:
                return "no Ray node runs a keval actor"
            return "; ".join(f"{n.node_id[:12]} {n.state}" + (f" ({n.error})" if n.error else "")
                             for n in self._nodes.values())

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self, timeout: float = 30.0) -> None:
        """Stops the daemons the actors started and the actors themselves."""
        with self._lock:
            self._closed = True
            actors = list(self._actors.values())
            self._actors.clear()
            self._info_refs.clear()
        refs = []
        for a in actors:
            try:
                refs.append(a.shutdown.remote())
            except Exception:  # noqa: BLE001
                pass
        if refs:
            try:
                ray.wait(refs, num_returns=len(refs), timeout=timeout)
            except Exception:  # noqa: BLE001
                pass
        for a in actors:
            _kill(a)

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


KevalCluster = Evaluator


def _kill(actor: Any) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001 - already dead
        pass


def _cancel(ref: Any) -> None:
    try:
        ray.cancel(ref)
    except Exception:  # noqa: BLE001 - finished, or its actor is gone
        pass
