"""pass@k and the metrics JSON, against numbers computed by hand."""

from __future__ import annotations

import math

import pytest

from keval.compute_eval.passk import (
    estimate_metrics,
    estimate_pass_at_k,
    estimate_performance_metrics,
    geometric_mean,
    percentile,
    summarize,
)


def graded(task_id, passed, skipped=False, group="cuda-kernels", difficulty="easy", **extra):
    entry = {"task_id": task_id, "passed": passed, "skipped": skipped,
             "solution": {"task_id": task_id},
             "problem": {"task_id": task_id, "group": group,
                         "metadata": {"difficulty": difficulty}}}
    entry.update(extra)
    return entry


def problem_results(task_id, n, c, **kw):
    return [graded(task_id, i < c, **kw) for i in range(n)]


@pytest.mark.parametrize("n,c,k,expected", [
    (5, 2, 1, 0.4),                          # c/n
    (5, 2, 3, 0.9),                          # 1 - C(3,3)/C(5,3) = 1 - 1/10
    (5, 2, 2, 0.7),                          # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (3, 0, 1, 0.0),
    (3, 0, 3, 0.0),
    (3, 3, 3, 1.0),
    (4, 1, 4, 1.0),                          # n - c < k: every draw of 4 holds the one
    (10, 3, 5, 1 - math.comb(7, 5) / math.comb(10, 5)),  # 1 - 21/252
    (1, 1, 1, 1.0),
    (1, 0, 1, 0.0),
])
def test_estimator_table(n, c, k, expected):
    assert estimate_pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_estimator_matches_computeevals_product_form():
    def product_form(n, c, k):  # compute_eval/evaluation.py's estimator, without numpy
        if n - c < k:
            return 1.0
        p = 1.0
        for i in range(n - c + 1, n + 1):
            p *= 1.0 - k / i
        return 1.0 - p
    for n in range(1, 25):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert estimate_pass_at_k(n, c, k) == pytest.approx(product_form(n, c, k),
                                                                    abs=1e-12)


@pytest.mark.parametrize("args", [(5, 2, 0), (5, 2, -1), (3, 4, 1), (-1, 0, 1)])
def test_estimator_rejects_nonsense(args):
    with pytest.raises(ValueError):
        estimate_pass_at_k(*args)


def test_mixed_problems_are_averaged():
    results = problem_results("A", 5, 2) + problem_results("B", 5, 0) + problem_results("C", 5, 5)
    m = estimate_metrics(results, [1, 3])
    assert m["evaluated_problem_count"] == 3
    assert m["skipped"] == 0.0
    assert m["pass@1"] == pytest.approx((0.4 + 0.0 + 1.0) / 3)
    assert m["pass@3"] == pytest.approx((0.9 + 0.0 + 1.0) / 3)


def test_problems_all_skipped_are_excluded_and_counted():
    results = (problem_results("A", 2, 1)
               + [graded("S", False, skipped=True), graded("S", False, skipped=True)]
               # partly skipped: evaluated, the skipped one counts as not passed
               + [graded("P", True), graded("P", False, skipped=True)])
    m = estimate_metrics(results, [1])
    assert m["skipped"] == 1.0
    assert m["evaluated_problem_count"] == 2
    assert m["pass@1"] == pytest.approx((0.5 + 0.5) / 2)


def test_k_larger_than_some_n_is_omitted():
    results = problem_results("A", 5, 2) + problem_results("B", 2, 1)
    m = estimate_metrics(results, [1, 2, 3])
    assert set(m) == {"skipped", "evaluated_problem_count", "pass@1", "pass@2"}
    assert m["pass@2"] == pytest.approx((0.7 + 1.0) / 2)


def test_nothing_evaluated_reports_no_pass_at_k():
    m = estimate_metrics([graded("S", False, skipped=True)], [1])
    assert m == {"skipped": 1.0, "evaluated_problem_count": 0}


def test_task_id_taken_from_the_solution():
    # ComputeEval groups by solution.task_id
    results = [{"task_id": "X", "passed": True, "skipped": False, "solution": {"task_id": "A"}},
               {"task_id": "Y", "passed": False, "skipped": False, "solution": {"task_id": "A"}}]
    assert estimate_metrics(results, [1])["evaluated_problem_count"] == 1


def test_summarize_by_group_and_difficulty():
    results = (problem_results("A", 4, 1, group="cccl", difficulty="easy")
               + problem_results("B", 4, 4, group="cccl", difficulty="hard")
               + problem_results("C", 4, 0, group="cublas", difficulty="easy")
               + [graded("D", False, skipped=True, group="cudnn", difficulty="medium")] * 4)
    out = summarize(results, [1, 2])
    assert out["total_problem_count"] == 4
    assert out["evaluated_problem_count"] == 3
    assert out["pass_at_k"]["skipped"] == 1.0
    assert out["pass_at_k"]["pass@1"] == pytest.approx((0.25 + 1.0 + 0.0) / 3)
    assert out["pass_at_k"]["pass@2"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert out["groups"] == ["cccl", "cublas", "cudnn"]
    by_group = out["metrics_by_group"]
    assert list(by_group) == ["cccl", "cublas", "cudnn"]
    assert by_group["cccl"]["pass@1"] == pytest.approx((0.25 + 1.0) / 2)
    assert by_group["cccl"]["evaluated_problem_count"] == 2
    assert by_group["cublas"]["pass@1"] == 0.0
    assert by_group["cudnn"] == {"skipped": 1.0, "evaluated_problem_count": 0}
    by_difficulty = out["metrics_by_difficulty"]
    assert list(by_difficulty) == ["easy", "medium", "hard"]
    assert by_difficulty["easy"]["pass@1"] == pytest.approx((0.25 + 0.0) / 2)
    assert by_difficulty["hard"]["pass@2"] == 1.0
    assert by_difficulty["medium"]["skipped"] == 1.0
    assert "performance_analysis" not in out


def test_summarize_keeps_the_datapacks_groups_and_names_missing_difficulty():
    results = problem_results("A", 1, 1, difficulty=None)
    out = summarize(results, [1], groups=["cccl", "cuda-kernels"])
    assert out["groups"] == ["cccl", "cuda-kernels"]
    assert list(out["metrics_by_difficulty"]) == ["unknown"]


def test_performance_summary():
    def perf(task_id, passed, time_ms, speedup, sm=None):
        kernels = [{"name": "k", "sm_throughput_avg": sm}] if sm is not None else []
        return graded(task_id, passed, solution_time=time_ms, speedup=speedup,
                      solution_metrics={"kernels": kernels})
    results = [perf("A", True, 2.0, 2.0, sm=50.0), perf("B", True, 4.0, 0.5, sm=70.0),
               perf("C", True, 1.0, 8.0), perf("D", False, None, None),
               perf("E", True, None, None)]
    out = estimate_performance_metrics(results)
    analysis = out["performance_analysis"]
    assert analysis["invalid_skipped"] == 2  # D failed, E has no time
    assert analysis["avg_solution_time_ms"] == pytest.approx(7.0 / 3)
    assert analysis["avg_sm_throughput_pct"] == pytest.approx(60.0)
    assert analysis["avg_dram_throughput_pct"] == 0.0
    comparison = out["baseline_comparison"]
    assert comparison["baseline_available_count"] == 3
    assert comparison["baseline_coverage_pct"] == pytest.approx(60.0)
    assert comparison["avg_speedup"] == pytest.approx(2.0)  # (2 * 0.5 * 8) ** (1/3)
    assert comparison["median_speedup"] == 2.0
    assert comparison["min_speedup"] == 0.5 and comparison["max_speedup"] == 8.0
    assert comparison["regressions_count"] == 1 and comparison["improvements_count"] == 2
    assert comparison["speedup_p25"] == pytest.approx(1.25)  # numpy.percentile, linear
    assert comparison["speedup_p75"] == pytest.approx(5.0)


def test_performance_summary_without_speedups_has_no_comparison():
    out = estimate_performance_metrics([graded("A", True, solution_time=1.0)])
    assert "baseline_comparison" not in out


def test_helpers():
    assert geometric_mean([]) == 0.0
    assert geometric_mean([4.0, 1.0]) == pytest.approx(2.0)
    assert percentile([1.0], 75) == 1.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
