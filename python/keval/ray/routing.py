"""Routing for ``keval.ray``: which node takes a request. Pure functions, no Ray.

A node is eligible for a request when it is ready, serves every kernel type the request names and,
when the request names a GPU type (``H100``, ``A100``: /health's ``gpus[].type``), has a GPU of
that type; the daemon then runs it on one (``X-GPU-Type``). Among the
eligible nodes with room (in-flight below the node's bound), the least loaded wins: in-flight jobs
over capacity, then fewer in-flight jobs, then more capacity, then the order nodes joined.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

__all__ = ["NodeState", "Route", "pick_node", "request_needs", "resolve_mode"]

# Node states: "starting" (actor or daemon coming up), "ready", "failed" (daemon could not be
# started or stopped answering; tried again after a backoff), "dead" (Ray says the node is gone).
STATES = ("starting", "ready", "failed", "dead")


@dataclass
class NodeState:
    """The driver's view of one node and its keval daemon."""

    node_id: str
    ip: str = ""
    state: str = "starting"
    gpu_types: Dict[str, int] = field(default_factory=dict)
    kernel_types: Tuple[str, ...] = ()
    cpu_device: bool = False
    capacity: int = 1
    max_in_flight: int = 2
    in_flight: int = 0
    error: Optional[str] = None
    info: Dict[str, Any] = field(default_factory=dict, repr=False)
    order: int = 0
    retry_at: float = 0.0

    @property
    def load(self) -> float:
        """In-flight jobs per unit of capacity (1.0: every GPU, or CPU, busy)."""
        return self.in_flight / max(1, self.capacity)

    @property
    def has_room(self) -> bool:
        return self.state == "ready" and self.in_flight < self.max_in_flight

    def serves(self, kernel_types: Sequence[str], gpu_type: Optional[str]) -> bool:
        """Whether this node could run the request once it has room (its state aside)."""
        if any(k not in self.kernel_types for k in kernel_types):
            return False
        return not gpu_type or self.gpu_types.get(gpu_type, 0) > 0

    def to_dict(self) -> Dict[str, Any]:
        return {"node_id": self.node_id, "ip": self.ip, "state": self.state,
                "gpu_types": dict(self.gpu_types), "kernel_types": list(self.kernel_types),
                "cpu_device": self.cpu_device, "capacity": self.capacity,
                "max_in_flight": self.max_in_flight, "in_flight": self.in_flight,
                "load": round(self.load, 3), "error": self.error,
                "daemon": self.info.get("daemon"), "daemon_jobs": self.info.get("jobs")}


@dataclass
class Route:
    """``pick_node``'s answer: ``node`` to send to; or ``node`` None and ``reason`` None: wait
    (eligible nodes are full, starting or failed for now, or no node is ready at all); or
    ``reason``: no node can take it (ready nodes exist, none with its GPU or kernel type)."""

    node: Optional[NodeState] = None
    reason: Optional[str] = None

    @property
    def wait(self) -> bool:
        return self.node is None and self.reason is None


def pick_node(nodes: Iterable[NodeState], kernel_types: Sequence[str] = (),
              gpu_type: Optional[str] = None, avoid: Optional[str] = None) -> Route:
    """The node a request should go to.

    ``kernel_types``: the request's kernel types (``request_needs``); ``gpu_type``: the GPU type
    it must run on, or None; ``avoid``: a node id to stay off when any other eligible node exists
    (a retry goes to another node than the first attempt's).
    """
    nodes = list(nodes)
    candidates = [n for n in nodes if n.state == "ready" and n.serves(kernel_types, gpu_type)]
    if not candidates:
        # Wait while a node that may serve it is coming (starting: not known yet; failed: it
        # served it before and gets a new actor after a backoff), or while no node is ready at
        # all (nodes may join; the driver bounds this wait). Otherwise no node can.
        if (not any(n.state == "ready" for n in nodes)
                or any(n.state == "starting" for n in nodes)
                or any(n.state == "failed" and n.kernel_types and n.serves(kernel_types, gpu_type)
                       for n in nodes)):
            return Route()
        return Route(reason=_unroutable(nodes, kernel_types, gpu_type))
    if avoid is not None and any(n.node_id != avoid for n in candidates):
        candidates = [n for n in candidates if n.node_id != avoid]
    with_room = [n for n in candidates if n.has_room]
    if not with_room:
        return Route()
    best = min(with_room, key=lambda n: (n.load, n.in_flight, -n.capacity, n.order))
    return Route(node=best)


def _unroutable(nodes: List[NodeState], kernel_types: Sequence[str],
                gpu_type: Optional[str]) -> str:
    ready = [n for n in nodes if n.state == "ready"]
    have_types = sorted({t for n in ready for t in n.gpu_types})
    have_kernels = sorted({k for n in ready for k in n.kernel_types})
    missing = [k for k in kernel_types if k not in have_kernels]
    parts = []
    if missing:
        parts.append(f"no ready node serves kernel type {', '.join(map(repr, missing))} "
                     f"(kernel types: {', '.join(have_kernels) or 'none'})")
    if gpu_type and not missing and gpu_type in have_types:
        parts.append(f"no ready node has GPU type {gpu_type!r} and kernel type(s) "
                     f"{', '.join(map(repr, kernel_types))} together")
    elif gpu_type:
        parts.append(f"no ready node has GPU type {gpu_type!r} (GPU types on the {len(ready)} "
                     f"ready node(s): {', '.join(have_types) or 'none'})")
    return "; ".join(parts) or "no ready node can take this request"


def resolve_mode(request: Mapping[str, Any], mode: str = "auto") -> str:
    """``evaluate`` or ``compare``: ``mode`` as given, or for ``auto``, ``compare`` when the
    request has ``ref_kernel`` or ``custom_kernel``, else ``evaluate``."""
    if mode in ("evaluate", "compare"):
        return mode
    if mode != "auto":
        raise ValueError(f"mode: want 'auto', 'evaluate' or 'compare', got {mode!r}")
    return "compare" if ("ref_kernel" in request or "custom_kernel" in request) else "evaluate"


def request_needs(request: Mapping[str, Any], mode: str,
                  gpu_type: Optional[str] = None) -> Tuple[Tuple[str, ...], Optional[str]]:
    """The kernel types a request names and the GPU type it must run on: the request's own
    ``gpu_type`` field (keval.ray's, not sent to the daemon) else ``gpu_type``."""
    sides = ("ref_kernel", "custom_kernel") if mode == "compare" else ("kernel",)
    kinds: List[str] = []
    for side in sides:
        kernel = request.get(side)
        kind = kernel.get("kernel_type") if isinstance(kernel, Mapping) else None
        if isinstance(kind, str) and kind and kind not in kinds:
            kinds.append(kind)
    own = request.get("gpu_type")
    return tuple(kinds), (own if isinstance(own, str) and own else gpu_type)
