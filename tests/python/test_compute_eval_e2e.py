"""End to end: our test problems (tests/compute_eval/problems) through a real keval daemon.

KEVAL_BIN names the keval binary (CTest sets it); without it these tests are skipped. The CPU
problems (compute_capability null: host code, built with g++ or nvcc) run everywhere; the GPU
problems are graded on a machine with a GPU and must come back skipped on one without.
"""

from __future__ import annotations

import json
import os

import pytest

from compute_eval_support import PROBLEMS_DIR
from keval._daemon import LocalDaemon
from keval.compute_eval.__main__ import main
from keval.compute_eval.pack import load_problem_dir, load_solution_dir
from keval.compute_eval.datapack import write_problems, write_solutions

KEVAL_BIN = os.environ.get("KEVAL_BIN")
pytestmark = pytest.mark.skipif(not KEVAL_BIN, reason="KEVAL_BIN is not set (CTest sets it to "
                                                      "the keval binary it built)")

CPU_VARIANTS = {
    "host_saxpy": ["pass", "wrong", "build_error", "timeout", "crash", "exit_early",
                   "refs_comment_only"],
    "nvcc_host_sum": ["pass", "wrong", "build_error"],
}
GPU_VARIANTS = {
    "vector_add_kernel": ["pass", "wrong", "crash", "timeout"],
    "thrust_sort": ["pass", "cub", "refs_comment_only"],
    "cublas_sgemm": ["pass", "wrong"],
}


@pytest.fixture(scope="module")
def daemon():
    with LocalDaemon(keval_bin=KEVAL_BIN) as d:
        plugins = d.health.get("plugins") or []
        assert "cuda_program" in plugins, \
            f"this keval has no cuda_program kernel type (plugins: {plugins})"
        yield d


@pytest.fixture(scope="module")
def has_gpu(daemon):
    return bool(daemon.health.get("gpus"))


def problem_dir(name):
    return os.path.join(PROBLEMS_DIR, name)


def evaluate(tmp_path, capsys, daemon, variants, extra=(), name="e2e"):
    """Pack the problems and their chosen variants, evaluate; (exit code, metrics, entries by
    (problem directory, variant))."""
    problems = [load_problem_dir(problem_dir(p)) for p in variants]
    solutions, labels = [], []
    for p, names in variants.items():
        for v in names:
            solutions.append(load_solution_dir(problem_dir(p), v))
            labels.append((p, v))
    ppath = str(tmp_path / "internal-problems.tar.gz")
    spath = str(tmp_path / f"{name}-solutions.tar.gz")
    write_problems(ppath, problems, release="internal")
    write_solutions(spath, solutions, release="internal")
    out = str(tmp_path / f"{name}.jsonl")
    rc = main(["evaluate", "--problems", ppath, "--solutions", spath, "--jobs", "4",
               "--daemon", daemon.socket_path, "--output", out, "--progress", "lines", *extra])
    stdout, stderr = capsys.readouterr()
    with open(out, encoding="utf-8") as f:
        entries = [json.loads(line) for line in f if line.strip()]
    by_label = {labels[e["keval"]["solution_index"]]: e for e in entries}
    assert len(by_label) == len(labels), stderr
    return rc, json.loads(stdout) if stdout.strip() else None, by_label, stderr


def describe(entry):
    keep = ("passed", "skipped", "build_output", "test_output", "benchmark_output", "keval")
    return json.dumps({k: entry.get(k) for k in keep}, indent=1)[:4000]


def assert_graded(entry):
    """Graded by the solution's merits: no error of keval's."""
    assert "error" not in entry["keval"], describe(entry)
    assert entry["skipped"] is False, describe(entry)


def test_cpu_problems(tmp_path, capsys, daemon):
    rc, metrics, got, stderr = evaluate(tmp_path, capsys, daemon, CPU_VARIANTS)
    assert rc == 0, stderr
    for entry in got.values():
        assert_graded(entry)

    for p in CPU_VARIANTS:
        ok = got[(p, "pass")]
        assert ok["passed"] is True, describe(ok)
        assert "all checks passed" in ok["test_output"], describe(ok)
        assert isinstance(ok["build_output"], str)

        wrong = got[(p, "wrong")]
        assert wrong["passed"] is False, describe(wrong)
        assert "FAIL" in wrong["test_output"], describe(wrong)

        build = got[(p, "build_error")]
        assert build["passed"] is False, describe(build)
        assert "error" in build["build_output"], describe(build)
        assert not build["test_output"], describe(build)

    timeout = got[("host_saxpy", "timeout")]
    assert timeout["passed"] is False, describe(timeout)
    assert "timed out" in timeout["test_output"], describe(timeout)
    assert timeout["keval"]["seconds"] < 60, describe(timeout)  # the problem's 5 s, not more

    crash = got[("host_saxpy", "crash")]
    assert crash["passed"] is False, describe(crash)
    assert "signal" in crash["test_output"], describe(crash)

    refs = got[("host_saxpy", "refs_comment_only")]
    assert refs["passed"] is False, describe(refs)
    assert "std::transform" in refs["test_output"] or "std::for_each" in refs["test_output"], \
        describe(refs)

    # exit(0) from inside the solution: keval's verdict (docs/cuda_program.md), graded either way.
    assert isinstance(got[("host_saxpy", "exit_early")]["passed"], bool)

    assert metrics["evaluated_problem_count"] == 2
    assert metrics["pass_at_k"]["skipped"] == 0.0
    assert 0.0 < metrics["pass_at_k"]["pass@1"] < 1.0
    assert metrics["keval"]["infrastructure_failures"] == 0


def test_cpu_baselines_pass(tmp_path, capsys, daemon):
    problems = [load_problem_dir(problem_dir(p)) for p in CPU_VARIANTS]
    ppath = str(tmp_path / "cpu-problems.tar.gz")
    write_problems(ppath, problems, release="internal")
    out = str(tmp_path / "baseline.jsonl")
    rc = main(["evaluate", "--problems", ppath, "--baseline", "--daemon", daemon.socket_path,
               "--output", out])
    stdout, stderr = capsys.readouterr()
    assert rc == 0, stderr
    metrics = json.loads(stdout)
    assert metrics["pass_at_k"]["pass@1"] == 1.0, open(out).read()[:4000]


def test_solution_may_not_replace_the_harness(tmp_path, capsys, daemon):
    saxpy = load_problem_dir(problem_dir("host_saxpy"))
    solution = load_solution_dir(problem_dir("host_saxpy"), "wrong")
    solution["files"].append({"path": "test/test_main.cpp",
                              "content": "int main() { return 0; }\n"})
    ppath = str(tmp_path / "internal-problems.tar.gz")
    spath = str(tmp_path / "cheat-solutions.tar.gz")
    write_problems(ppath, [saxpy], release="internal")
    write_solutions(spath, [solution], release="internal")
    out = str(tmp_path / "cheat.jsonl")
    rc = main(["evaluate", "--problems", ppath, "--solutions", spath,
               "--daemon", daemon.socket_path, "--output", out])
    _, stderr = capsys.readouterr()
    assert rc == 0, stderr
    with open(out, encoding="utf-8") as f:
        [entry] = [json.loads(line) for line in f]
    assert entry["passed"] is False, describe(entry)
    assert "error" not in entry["keval"], describe(entry)


@pytest.mark.parametrize("path", ["../evil.cpp", "/etc/passwd", "include/../../x.cpp",
                                  ".keval/x.cpp"])
def test_bad_paths_are_refused_with_the_field(daemon, path):
    problem = load_problem_dir(problem_dir("host_saxpy"))
    solution = load_solution_dir(problem_dir("host_saxpy"), "pass")
    solution["files"].insert(0, {"path": path, "content": "int x;\n"})
    request = {"kernel": {"kernel_type": "cuda_program", "source_code": "",
                          "metadata": {"problem": problem, "solution": solution,
                                       "benchmark": False}},
               "timeout": 60}
    status, body, _ = daemon.client(timeout=120).post_json("/evaluate", request)
    assert status == 400, body
    assert body["error"]["class"] == "bad_request"
    assert body["error"]["path"] == "kernel.metadata.solution.files[0].path", body


def test_gpu_problems(tmp_path, capsys, daemon, has_gpu):
    rc, metrics, got, stderr = evaluate(tmp_path, capsys, daemon, GPU_VARIANTS)
    assert rc == 0, stderr
    if not has_gpu:
        # compute_capability "8.0" and no GPU: skipped with the reason, never failed.
        for entry in got.values():
            assert entry["skipped"] is True, describe(entry)
            assert entry["passed"] is False and "error" not in entry["keval"], describe(entry)
            assert entry["keval"].get("skip_reason"), describe(entry)
        assert metrics["pass_at_k"]["skipped"] == float(len(GPU_VARIANTS))
        assert metrics["evaluated_problem_count"] == 0
        return
    for entry in got.values():
        assert_graded(entry)
    for label in [("vector_add_kernel", "pass"), ("thrust_sort", "pass"), ("thrust_sort", "cub"),
                  ("cublas_sgemm", "pass")]:
        assert got[label]["passed"] is True, describe(got[label])
    for label in [("vector_add_kernel", "wrong"), ("vector_add_kernel", "crash"),
                  ("vector_add_kernel", "timeout"), ("thrust_sort", "refs_comment_only"),
                  ("cublas_sgemm", "wrong")]:
        assert got[label]["passed"] is False, describe(got[label])
    assert "timed out" in got[("vector_add_kernel", "timeout")]["test_output"]
    assert "cudaErrorIllegalAddress" in got[("vector_add_kernel", "crash")]["test_output"]
    refs = got[("thrust_sort", "refs_comment_only")]["test_output"]
    assert "thrust::sort" in refs or "cub::DeviceRadixSort::SortKeys" in refs


def test_gpu_benchmark(tmp_path, capsys, daemon, has_gpu):
    if not has_gpu:
        pytest.skip("the daemon has no GPU")
    variants = {p: ["pass"] for p in GPU_VARIANTS}
    rc, metrics, got, stderr = evaluate(tmp_path, capsys, daemon, variants,
                                        extra=["--benchmark"], name="bench")
    assert rc == 0, stderr
    for entry in got.values():
        assert_graded(entry)
        assert entry["passed"] is True, describe(entry)
        assert entry["benchmark_output"] is None, describe(entry)
        assert entry["solution_time"] > 0 and entry["baseline_time"] > 0, describe(entry)
        assert entry["speedup"] > 0, describe(entry)
    # Timed through CUPTI (region, kernels) or by the program (custom).
    assert got[("vector_add_kernel", "pass")]["solution_metrics"]["nvtx_ranges"]["benchmark"]
    assert got[("thrust_sort", "pass")]["solution_metrics"]["kernels"]
    assert metrics["baseline_comparison"]["baseline_available_count"] == 3
