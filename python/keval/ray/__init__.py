"""``keval.ray``: keval across a Ray cluster, for RL loops (docs/ray.md).

One ``NodeDaemon`` actor per Ray node attaches to (or starts) that node's ``keval serve``;
``Evaluator.evaluate_many(requests)`` yields results as they complete, routed by GPU type and
load, a job whose node died retried once elsewhere, one result per request. Needs Ray
(``pip install 'keval[ray]'``). This package is ``keval.ray``; it imports the real ``ray``.
"""

try:
    import ray as _ray  # noqa: F401 - absolute: the real Ray, not this package
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("keval.ray needs Ray: pip install 'keval[ray]' (or pip install ray)") from e

from .evaluator import ClusterResult, Evaluator, KevalCluster
from .node import NodeDaemon, format_node_path
from .routing import NodeState, Route, pick_node, request_needs, resolve_mode

__all__ = ["ClusterResult", "Evaluator", "KevalCluster", "NodeDaemon", "NodeState", "Route",
           "format_node_path", "pick_node", "request_needs", "resolve_mode"]
