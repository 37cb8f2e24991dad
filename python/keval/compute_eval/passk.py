"""pass@k as ComputeEval computes it, and its performance summary, standard library only.

``estimate_pass_at_k`` is the unbiased estimator of Chen et al. (2021), ``1 - C(n-c, k) / C(n, k)``
(1 when ``n - c < k``). ``estimate_metrics`` follows ComputeEval's ``evaluation.py``: solutions are
grouped by task_id; a problem whose solutions were all skipped is left out and counted in
``skipped``; ``pass@k`` is the mean over the evaluated problems, reported only when every one of
them has at least k solutions. The same numbers are computed per group and per difficulty.
``estimate_performance_metrics`` is ComputeEval's performance summary (geometric mean speedup
and the rest) over graded solutions.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence

__all__ = [
    "estimate_metrics",
    "estimate_metrics_by",
    "estimate_pass_at_k",
    "estimate_performance_metrics",
    "geometric_mean",
    "percentile",
    "summarize",
]


def estimate_pass_at_k(n: int, c: int, k: int) -> float:
    """The probability that at least one of k of the n solutions, c of them correct, passes."""
    if k <= 0:
        raise ValueError("k must be positive")
    if n < 0 or c < 0 or c > n:
        raise ValueError(f"need 0 <= c <= n (got n={n}, c={c})")
    if n - c < k:
        return 1.0
    # Exact integers, one rounding: ComputeEval's product form gives the same to a few ulps.
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _field(result: Any, name: str) -> Any:
    return result.get(name) if isinstance(result, Mapping) else getattr(result, name)


def _task_id(result: Any) -> str:
    solution = _field(result, "solution")
    if isinstance(solution, Mapping) and solution.get("task_id") is not None:
        return solution["task_id"]
    return _field(result, "task_id")


def estimate_metrics(results: Iterable[Any], k_vals: Sequence[int]) -> Dict[str, Any]:
    """``{"skipped", "evaluated_problem_count", "pass@k"...}`` over graded solutions (dicts in
    the GradedSolution shape: ``task_id``/``solution.task_id``, ``passed``, ``skipped``)."""
    by_task: "OrderedDict[str, List[Any]]" = OrderedDict()
    for r in results:
        by_task.setdefault(_task_id(r), []).append(r)
    skipped = 0
    totals: List[int] = []
    corrects: List[int] = []
    for task_results in by_task.values():
        if all(bool(_field(r, "skipped")) for r in task_results):
            skipped += 1
            continue
        totals.append(len(task_results))
        corrects.append(sum(1 for r in task_results if _field(r, "passed")))
    out: Dict[str, Any] = {"skipped": float(skipped), "evaluated_problem_count": len(totals)}
    for k in k_vals:
        if totals and all(n >= k for n in totals):
            values = [estimate_pass_at_k(n, c, k) for n, c in zip(totals, corrects)]
            out[f"pass@{k}"] = sum(values) / len(values)
    return out


def estimate_metrics_by(results: Iterable[Any], k_vals: Sequence[int],
                        key: Callable[[Any], Optional[str]]) -> Dict[str, Dict[str, Any]]:
    """``estimate_metrics`` for each value of ``key(result)`` (in order of first appearance)."""
    groups: "OrderedDict[str, List[Any]]" = OrderedDict()
    for r in results:
        groups.setdefault(key(r), []).append(r)
    return {name: estimate_metrics(rs, k_vals) for name, rs in groups.items()}


def _problem_field(result: Any, name: str, default: Any = None) -> Any:
    problem = _field(result, "problem")
    if isinstance(problem, Mapping):
        return problem.get(name, default)
    return default


def group_of(result: Any) -> str:
    return _problem_field(result, "group") or "unknown"


def difficulty_of(result: Any) -> str:
    metadata = _problem_field(result, "metadata") or {}
    difficulty = metadata.get("difficulty") if isinstance(metadata, Mapping) else None
    return difficulty or "unknown"


def geometric_mean(values: Sequence[float]) -> float:
    """ComputeEval's: exp of the mean log over the positive values, divided by all of them."""
    if not values:
        return 0.0
    return math.exp(sum(math.log(v) for v in values if v > 0) / len(values))


def percentile(values: Sequence[float], q: float) -> float:
    """numpy.percentile's default (linear interpolation between closest ranks)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = math.ceil(position)
    if low == high:
        return float(ordered[low])
    return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))


def _average_throughput(metrics: Any, name: str) -> Optional[float]:
    if not isinstance(metrics, Mapping):
        return None
    values = [k.get(name) for k in metrics.get("kernels") or [] if isinstance(k, Mapping)]
    values = [v for v in values if isinstance(v, (int, float))]
    return sum(values) / len(values) if values else None


def estimate_performance_metrics(results: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """ComputeEval's ``estimate_performance_metrics`` over graded solutions (dicts)."""

    def valid(getter: Callable[[Mapping[str, Any]], Any]) -> List[float]:
        out = []
        for r in results:
            if not r.get("passed"):
                continue
            v = getter(r)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v):
                out.append(float(v))
        return out

    times = valid(lambda r: r.get("solution_time"))
    sm = valid(lambda r: _average_throughput(r.get("solution_metrics"), "sm_throughput_avg"))
    dram = valid(lambda r: _average_throughput(r.get("solution_metrics"), "dram_throughput_avg"))
    speedups = valid(lambda r: r.get("speedup"))
    invalid = sum(1 for r in results if not r.get("passed") or r.get("solution_time") is None)
    metrics: Dict[str, Any] = {
        "performance_analysis": {
            "invalid_skipped": invalid,
            "avg_solution_time_ms": sum(times) / len(times) if times else 0.0,
            "avg_sm_throughput_pct": sum(sm) / len(sm) if sm else 0.0,
            "avg_dram_throughput_pct": sum(dram) / len(dram) if dram else 0.0,
        }
    }
    if speedups:
        metrics["baseline_comparison"] = {
            "baseline_available_count": len(speedups),
            "baseline_coverage_pct": len(speedups) / len(results) * 100 if results else 0.0,
            "avg_speedup": geometric_mean(speedups),
            "median_speedup": percentile(speedups, 50),
            "min_speedup": min(speedups),
            "max_speedup": max(speedups),
            "regressions_count": sum(1 for s in speedups if s < 1.0),
            "improvements_count": sum(1 for s in speedups if s > 1.0),
            "speedup_p25": percentile(speedups, 25),
            "speedup_p75": percentile(speedups, 75),
        }
    return metrics


def summarize(results: Sequence[Mapping[str, Any]], k_vals: Sequence[int],
              groups: Optional[Sequence[str]] = None,
              performance: bool = False) -> Dict[str, Any]:
    """The metrics JSON of a run, in ComputeEval's shape plus ``metrics_by_difficulty``:

    ``{"pass_at_k": {"skipped", "pass@k"...}, "total_problem_count", "evaluated_problem_count",
    "groups", "metrics_by_group", "metrics_by_difficulty"}``, and with ``performance`` ComputeEval's
    ``performance_analysis`` / ``baseline_comparison``. ``groups`` defaults to the groups of the
    problems graded, sorted.
    """
    overall = estimate_metrics(results, k_vals)
    evaluated = overall.pop("evaluated_problem_count")
    if groups is None:
        groups = sorted({group_of(r) for r in results})
    out: Dict[str, Any] = {
        "pass_at_k": {name: float(value) for name, value in overall.items()},
        "total_problem_count": len({_task_id(r) for r in results}),
        "evaluated_problem_count": evaluated,
        "groups": list(groups),
        "metrics_by_group": _sorted(estimate_metrics_by(results, k_vals, group_of)),
        "metrics_by_difficulty": _sorted(estimate_metrics_by(results, k_vals, difficulty_of),
                                         first=_DIFFICULTY_ORDER),
    }
    if performance:
        out.update(estimate_performance_metrics(results))
    return out


_DIFFICULTY_ORDER = ("easy", "medium", "hard")


def _sorted(d: Dict[str, Any], first: Sequence[str] = ()) -> Dict[str, Any]:
    rank = {name: i for i, name in enumerate(first)}
    return {key: d[key] for key in sorted(d, key=lambda k: (rank.get(k, len(rank)), k))}
