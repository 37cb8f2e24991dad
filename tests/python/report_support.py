"""Synthetic results for keval report's tests, with the expected metrics worked out by hand.

Three results files:

* ``runs/a``: keval's fields, levels 1 and 2 in one file (level 2's ids collide with level 1's,
  so entries of both levels share a list), one sample per problem, every failure class, flags,
  an error message holding ``<script>``, response files (one with a space in its name).
* ``runs/b``: keval's fields, two samples for some problems, a correct kernel without a speedup,
  a speedup of exactly 1 (fast_1 is strict), keval_run.json planning 11 problems of which one is
  absent from the results (counted as failed).
* ``plain/kb``: a plain KernelBench eval_results.json (no keval fields, no keval_run.json).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, List, Optional

from compute_eval_support import PYTHON_DIR, REPO  # noqa: F401  (puts python/ on sys.path)

SCRIPT_MESSAGE = "nvcc: error <script>alert('x')</script> & done"
FLAG_REASON = "speedup <b>10x</b> over the median"


def _stats(mean: Optional[float], method: str) -> Dict[str, Any]:
    if mean is None:
        return {}
    return {"mean": mean, "std": mean / 50, "min": mean * 0.97, "max": mean * 1.05,
            "median": mean * 0.99, "percentile_95": mean * 1.04, "percentile_99": mean * 1.05,
            "count": 100, "method": method}


def keval_entry(level: int, name: str, job: str, failure: Optional[str] = None,
                speedup: Optional[float] = None, sample_id: int = 0,
                flags: Optional[List[Dict[str, str]]] = None, message: Optional[str] = None,
                response: Optional[str] = "auto", measured: bool = True) -> Dict[str, Any]:
    """An entry as keval's ``kernelbench run`` writes it."""
    correct = failure is None
    compiled = failure in (None, "correctness", "runtime", "timeout")
    ref = 2.0
    custom = ref / speedup if (correct and speedup) else (1.0 if compiled and measured else None)
    return {
        "sample_id": sample_id, "compiled": compiled, "correctness": correct,
        "metadata": {"hardware": "H100", "device": "cuda:0"},
        "runtime": custom if custom is not None else -1.0,
        "runtime_stats": _stats(custom, "cuda_event"),
        "problem_name": name, "level": level, "kernel_type": "cuda", "job_id": job,
        "status": "done" if failure not in ("infrastructure", "bad_request") else "error",
        "speedup": speedup if correct else None,
        "ref_runtime": ref, "ref_runtime_stats": _stats(ref, "cuda_event"),
        "methods": {"custom": "cuda_event", "ref": "cuda_event"},
        "flags": flags or [],
        "failure_class": failure,
        "error": ({"class": failure, "message": message or f"{failure} failed"}
                  if failure else None),
        "response_file": (f"responses/{job}.json" if response == "auto" else response),
    }


def _write(path: str, data: Any) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)


def _add(results: Dict[str, List[Dict[str, Any]]], pid: str, entry: Dict[str, Any]) -> None:
    results.setdefault(pid, []).append(entry)


def run_a() -> Dict[str, List[Dict[str, Any]]]:
    r: Dict[str, List[Dict[str, Any]]] = {}
    flag = [{"name": "suspicious_speedup", "reason": FLAG_REASON}]
    _add(r, "1", keval_entry(1, "1_Square_matrix_multiplication_.py", "a-1-1", speedup=2.0))
    _add(r, "2", keval_entry(1, "2_Standard_matrix_multiplication_.py", "a-1-2", speedup=0.5))
    _add(r, "3", keval_entry(1, "3_Batched_matrix_multiplication.py", "a-1-3", speedup=1.5,
                             flags=[{"name": "no_sync", "reason": "no stream sync"}]))
    _add(r, "4", keval_entry(1, "4_Matrix_vector_multiplication_.py", "a-1-4", "compile",
                             message=SCRIPT_MESSAGE))
    _add(r, "5", keval_entry(1, "5_Matrix_scalar_multiplication.py", "a-1-5", "correctness"))
    _add(r, "6", keval_entry(1, "6_Matmul_with_large_K_dimension_.py", "a-1-6", "runtime",
                             response="responses/job 6.json"))
    _add(r, "7", keval_entry(1, "7_Matmul_with_small_K_dimension_.py", "a-1-7", "timeout"))
    _add(r, "1", keval_entry(2, "1_Conv2D_ReLU_BiasAdd.py", "a-2-1", speedup=4.0, flags=flag))
    _add(r, "2", keval_entry(2, "2_ConvTranspose2d_BiasAdd.py", "a-2-2", "infrastructure"))
    _add(r, "3", keval_entry(2, "3_ConvTranspose3d_Sum.py", "a-2-3", "bad_request"))
    _add(r, "4", keval_entry(2, "4_Conv2d_Mish_Mish.py", "a-2-4", "missing_generation",
                             response=None))
    return r


def run_b() -> Dict[str, List[Dict[str, Any]]]:
    r: Dict[str, List[Dict[str, Any]]] = {}
    flag = [{"name": "suspicious_speedup", "reason": "10x"}]
    _add(r, "1", keval_entry(1, "1_Square_matrix_multiplication_.py", "b-1-1-0", speedup=1.2))
    _add(r, "1", keval_entry(1, "1_Square_matrix_multiplication_.py", "b-1-1-1", speedup=3.0,
                             sample_id=1, flags=flag))
    _add(r, "2", keval_entry(1, "2_Standard_matrix_multiplication_.py", "b-1-2-0", "compile"))
    _add(r, "2", keval_entry(1, "2_Standard_matrix_multiplication_.py", "b-1-2-1",
                             speedup=0.8, sample_id=1))
    _add(r, "3", keval_entry(1, "3_Batched_matrix_multiplication.py", "b-1-3", speedup=1.0))
    _add(r, "4", keval_entry(1, "4_Matrix_vector_multiplication_.py", "b-1-4", speedup=1.1))
    _add(r, "5", keval_entry(1, "5_Matrix_scalar_multiplication.py", "b-1-5", "correctness"))
    _add(r, "6", keval_entry(1, "6_Matmul_with_large_K_dimension_.py", "b-1-6", speedup=None))
    _add(r, "7", keval_entry(1, "7_Matmul_with_small_K_dimension_.py", "b-1-7", "timeout"))
    _add(r, "1", keval_entry(2, "1_Conv2D_ReLU_BiasAdd.py", "b-2-1", speedup=10.0, flags=flag))
    _add(r, "2", keval_entry(2, "2_ConvTranspose2d_BiasAdd.py", "b-2-2", "correctness"))
    _add(r, "3", keval_entry(2, "3_ConvTranspose3d_Sum.py", "b-2-3", speedup=0.25))
    return r


def plain_kernelbench() -> Dict[str, List[Dict[str, Any]]]:
    """KernelBench's own eval_results.json: no speedup, no failure_class, no level."""
    def entry(compiled: bool, correct: bool, runtime: float, meta: Dict[str, Any]) -> Dict:
        return {"sample_id": 0, "compiled": compiled, "correctness": correct, "metadata": meta,
                "runtime": runtime,
                "runtime_stats": _stats(runtime, "cuda_event") if runtime > 0 else {}}
    return {
        "1": [entry(True, True, 0.5, {"hardware": "H100"})],
        "2": [entry(True, False, -1.0, {"correctness_issue": "Output mismatch"})],
        "3": [entry(False, False, -1.0, {"compilation_error": "error: <iostream> missing"})],
        "4": [entry(True, True, 0.7, {})],
    }


def run_meta(run_name: str, problems: Any, level: Any) -> Dict[str, Any]:
    return {"format": "keval-kernelbench-run/1", "mode": "generations", "run_name": run_name,
            "level": level, "kernelbench": {"commit": "abc123"}, "generations": "gens/",
            "problems": problems, "started": "2026-11-24T10:00:00Z",
            "finished": "2026-11-24T11:02:03Z", "wall_seconds": 3723.0,
            "hardware": {"gpu": "NVIDIA H100 80GB HBM3", "driver": "580.1"},
            "keval_version": "0.1.0", "counts": {}}


def write_fixture(root: str) -> Dict[str, str]:
    """Write the three results trees under root; returns their results paths by name."""
    paths = {
        "a": os.path.join(root, "runs", "a", "eval_results.json"),
        "b": os.path.join(root, "runs", "b", "eval_results.json"),
        "plain": os.path.join(root, "plain", "kb", "eval_results.json"),
    }
    a, b = run_a(), run_b()
    _write(paths["a"], a)
    # keval writes the selected ids; a count is tolerated (run b), absent ids count as failed.
    _write(os.path.join(root, "runs", "a", "keval_run.json"),
           run_meta("gen-a", list(range(1, 8)), [1, 2]))
    _write(paths["b"], b)
    _write(os.path.join(root, "runs", "b", "keval_run.json"),
           run_meta("gen-b & <co>", 11, [1, 2]))
    _write(paths["plain"], plain_kernelbench())
    for name, results in (("a", a), ("b", b)):
        for entries in results.values():
            for entry in entries:
                if entry.get("response_file"):
                    _write(os.path.join(root, "runs", name, entry["response_file"]),
                           {"job_id": entry["job_id"], "status": entry["status"]})
    return paths


# Expected metrics, worked out by hand from the entries above (n = problems attempted).
EXPECTED_A = {
    "n": 11, "compiled": 7, "correct": 4,
    "fast": {0.0: 4 / 11, 1.0: 3 / 11, 1.5: 2 / 11, 2.0: 1 / 11, 4.0: 0.0},
    "geomean": (2.0 * 0.5 * 1.5 * 4.0) ** (1 / 4),
}
EXPECTED_B_BEST = {
    "n": 11, "missing": 1, "compiled": 10, "correct": 7,
    "fast": {0.0: 6 / 11, 1.0: 3 / 11, 1.5: 2 / 11, 2.0: 2 / 11, 3.0: 1 / 11},
    "geomean": (3.0 * 0.8 * 1.0 * 1.1 * 10.0 * 0.25) ** (1 / 6),
}
EXPECTED_B_FIRST = {
    "n": 11, "compiled": 9, "correct": 6,
    "fast": {0.0: 5 / 11, 1.0: 3 / 11, 1.5: 1 / 11, 2.0: 1 / 11},
    "geomean": math.exp((math.log(1.2) + math.log(1.0) + math.log(1.1) + math.log(10.0)
                         + math.log(0.25)) / 5),
}
