"""python -m keval.compute_eval against a fake daemon: requests, the GradedSolution mapping,
retries, infrastructure failures, resume, metrics, exit codes; LocalDaemon with a fake binary;
the pack commands."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading

import pytest

from compute_eval_support import PROBLEMS_DIR, PYTHON_DIR, make_problem, make_solution
from keval._daemon import DaemonStartError, LocalDaemon, UnixClient
from keval.compute_eval.__main__ import main
from keval.compute_eval.datapack import read_problems, read_solutions, write_problems, \
    write_solutions
from keval.compute_eval.evaluate import default_timeout


def datapacks(tmp_path, problems, solutions, name="model", release="internal", groups=None):
    p = str(tmp_path / f"{release}-problems.tar.gz")
    s = str(tmp_path / f"{name}-solutions.tar.gz")
    write_problems(p, problems, release=release)
    write_solutions(s, solutions, release=release, groups=groups)
    return p, s


def run(capsys, *args):
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def by_verdict(entries):
    out = {}
    for e in entries:
        verdict = e["solution"]["files"][0]["content"].split("\n")[0].split(": ")[1]
        out.setdefault(verdict, []).append(e)
    return out


@pytest.fixture
def mixed(tmp_path):
    problems = [make_problem("T/0", group="cuda-kernels", difficulty="easy"),
                make_problem("T/1", group="cccl", difficulty="medium"),
                make_problem("T/2", group="cublas", difficulty="hard")]
    solutions = [make_solution("T/0", "pass"), make_solution("T/0", "wrong"),
                 make_solution("T/0", "timeout"),
                 make_solution("T/1", "build_error"), make_solution("T/1", "refs"),
                 make_solution("T/1", "crash"),
                 # Distinct contents: a test that tells solutions apart by what they hold
                 # (resume) must not take one skipped solution for another.
                 make_solution("T/2", "skip", "a"), make_solution("T/2", "skip", "b"),
                 make_solution("T/2", "skip", "c")]
    p, s = datapacks(tmp_path, problems, solutions)
    return problems, solutions, p, s


def test_evaluate_maps_every_verdict(tmp_path, capsys, fake_daemon, mixed):
    problems, solutions, p, s = mixed
    out_path = str(tmp_path / "graded.jsonl")
    rc, out, err = run(capsys, "evaluate", "--problems", p, "--solutions", s, "--k", "1,3",
                       "--jobs", "3", "--daemon", fake_daemon.socket_path, "--output", out_path)
    assert rc == 0, err
    entries = read_jsonl(out_path)
    assert len(entries) == 9 and len(fake_daemon.requests) == 9
    # Each is a GradedSolution, in its field order, with keval's extras last.
    assert list(entries[0]) == ["task_id", "passed", "skipped", "solution", "problem",
                                "build_output", "test_output", "benchmark_output",
                                "solution_metrics", "solution_time", "baseline_metrics",
                                "baseline_time", "speedup", "keval"]
    assert sorted(e["keval"]["solution_index"] for e in entries) == list(range(9))
    for e in entries:
        assert e["keval"]["datapack"] == "model"
        assert e["solution"] == solutions[e["keval"]["solution_index"]]
        assert e["problem"] == read_problems(p).problems[int(e["task_id"][-1])]
        assert e["keval"]["job_id"].startswith("job-")
        assert "error" not in e["keval"]
    v = by_verdict(entries)
    [ok] = v["pass"]
    assert ok["passed"] is True and ok["skipped"] is False
    assert ok["build_output"] == "" and ok["test_output"] == "all checks passed\n"
    assert ok["keval"]["status"] == "success"
    [wrong] = v["wrong"]
    assert wrong["passed"] is False
    assert "FAIL c[3]" in wrong["test_output"]
    assert "[keval] the test exited with code 1" in wrong["test_output"]
    [timeout] = v["timeout"]
    assert not timeout["passed"] and "timed out after 5.0 s" in timeout["test_output"]
    [crash] = v["crash"]
    assert not crash["passed"] and "killed by signal 11 (SIGSEGV)" in crash["test_output"]
    [build] = v["build_error"]
    assert not build["passed"] and "expected a \";\"" in build["build_output"]
    assert build["test_output"] is None
    [refs] = v["refs"]
    assert not refs["passed"]
    assert refs["test_output"] == (
        "[VALIDATION ERROR] Solution does not include required source references: missing "
        "std::transform\nthe solution does not use what the problem requires: std::transform")
    assert refs["build_output"] is None
    for skip in v["skip"]:
        assert skip["skipped"] is True and skip["passed"] is False
        assert skip["build_output"] is None and skip["test_output"] is None
        assert "compute capability" in skip["keval"]["skip_reason"]

    metrics = json.loads(out)
    assert metrics == json.load(open(out_path + ".metrics.json"))
    assert metrics["total_problem_count"] == 3
    assert metrics["evaluated_problem_count"] == 2
    assert metrics["pass_at_k"] == {"skipped": 1.0, "pass@1": pytest.approx((1 / 3 + 0) / 2),
                                    "pass@3": pytest.approx((1 + 0) / 2)}
    assert metrics["groups"] == ["cccl", "cublas", "cuda-kernels"]
    assert metrics["metrics_by_group"]["cuda-kernels"]["pass@1"] == pytest.approx(1 / 3)
    assert metrics["metrics_by_group"]["cublas"] == {"skipped": 1.0,
                                                     "evaluated_problem_count": 0}
    assert list(metrics["metrics_by_difficulty"]) == ["easy", "medium", "hard"]
    assert metrics["metrics_by_difficulty"]["medium"]["pass@1"] == 0.0
    k = metrics["keval"]
    assert (k["solutions"], k["passed"], k["failed"], k["skipped"]) == (9, 1, 5, 3)
    assert k["infrastructure_failures"] == 0 and k["resumed"] == 0
    assert "performance_analysis" not in metrics
    assert "9 graded solutions (0 resumed): 1 passed, 5 failed, 3 skipped" in err


def test_request_shape(tmp_path, capsys, fake_daemon):
    problem = make_problem("T/0", timeout_seconds=None)
    p, s = datapacks(tmp_path, [problem], [make_solution("T/0", "pass")])
    rc, _, err = run(capsys, "evaluate", "--problems", p, "--solutions", s,
                     "--daemon", fake_daemon.socket_path, "--output", str(tmp_path / "o.jsonl"))
    assert rc == 0, err
    [request] = fake_daemon.requests
    assert request == {
        "kernel": {"kernel_type": "cuda_program", "source_code": "",
                   "metadata": {"problem": read_problems(p).problems[0],
                                "solution": read_solutions(s).solutions[0],
                                "benchmark": False, "harness_reuse": True}},
        "timeout": 180.0,  # build and test at ComputeEval's default 60 s each, and a margin
    }
    assert default_timeout(problem, benchmark=True) == 180.0 + 60 + 6 * 300
    assert default_timeout(dict(problem, timeout_seconds=10), benchmark=False) == 80.0

    rc, _, err = run(capsys, "evaluate", "--problems", p, "--solutions", s, "--timeout", "42",
                     "--daemon", fake_daemon.socket_path, "--output", str(tmp_path / "p.jsonl"))
    assert rc == 0, err
    assert fake_daemon.requests[-1]["timeout"] == 42.0


def test_benchmark_mode(tmp_path, capsys, fake_daemon):
    p, s = datapacks(tmp_path, [make_problem("T/0")],
                     [make_solution("T/0", "pass"), make_solution("T/0", "wrong")])
    out_path = str(tmp_path / "o.jsonl")
    rc, out, err = run(capsys, "evaluate", "--problems", p, "--solutions", s, "--benchmark",
                       "--daemon", fake_daemon.socket_path, "--output", out_path)
    assert rc == 0, err
    assert all(r["kernel"]["metadata"]["benchmark"] is True for r in fake_daemon.requests)
    v = by_verdict(read_jsonl(out_path))
    [ok] = v["pass"]
    assert (ok["solution_time"], ok["baseline_time"], ok["speedup"]) == (1.0, 2.0, 2.0)
    assert ok["solution_metrics"]["summary"]["total_kernel_time_ms"] == 0.5
    assert ok["baseline_metrics"]["summary"]["total_kernel_time_ms"] == 1.5
    assert ok["benchmark_output"] is None and ok["keval"]["benchmark"] is True
    metrics = json.loads(out)
    assert metrics["performance_analysis"]["invalid_skipped"] == 1
    assert metrics["performance_analysis"]["avg_solution_time_ms"] == 1.0
    assert metrics["baseline_comparison"]["avg_speedup"] == pytest.approx(2.0)


def test_busy_and_one_infrastructure_failure_are_retried(tmp_path, capsys, fake_daemon):
    p, s = datapacks(tmp_path, [make_problem("T/0")],
                     [make_solution("T/0", "busy_once"), make_solution("T/0", "infra_once")])
    out_path = str(tmp_path / "o.jsonl")
    rc, out, err = run(capsys, "evaluate", "--problems", p, "--solutions", s,
                       "--daemon", fake_daemon.socket_path, "--output", out_path)
    assert rc == 0, err
    assert len(fake_daemon.requests) == 4
    v = by_verdict(read_jsonl(out_path))
    assert v["busy_once"][0]["passed"] and v["busy_once"][0]["keval"]["attempts"] == 1
    assert v["infra_once"][0]["passed"] and v["infra_once"][0]["keval"]["attempts"] == 2
    assert json.loads(out)["keval"]["infrastructure_failures"] == 0


def test_infrastructure_failure_is_recorded_and_counted(tmp_path, capsys, fake_daemon):
    p, s = datapacks(tmp_path, [make_problem("T/0")],
                     [make_solution("T/0", "infra"), make_solution("T/0", "pass")])
    out_path = str(tmp_path / "o.jsonl")
    rc, out, err = run(capsys, "evaluate", "--problems", p, "--solutions", s,
                       "--daemon", fake_daemon.socket_path, "--output", out_path)
    assert rc == 3
    assert len(fake_daemon.requests) == 3  # the failing one twice: one retry
    v = by_verdict(read_jsonl(out_path))
    [infra] = v["infra"]
    assert infra["passed"] is False and infra["skipped"] is False
    assert infra["keval"]["error"] == {"class": "infrastructure",
                                       "message": "HTTP 500: the worker died"}
    assert infra["keval"]["http_status"] == 500 and infra["keval"]["attempts"] == 2
    metrics = json.loads(out)
    assert metrics["keval"]["infrastructure_failures"] == 1
    assert metrics["keval"]["failed"] == 0  # not counted as a wrong answer
    assert "1 infrastructure failures" in err
    assert "keval failed on T/0 (solution 0): HTTP 500: the worker died" in err

    # Resumed: the failure is run again (now it passes), the passing one is kept.
    fake_daemon.requests.clear()
    fake_daemon.answer = lambda request, attempt: fake_daemon.default_answer(
        json.loads(json.dumps(request).replace("VERDICT: infra", "VERDICT: pass")), attempt)
    rc, out, err = run(capsys, "evaluate", "--problems", p, "--solutions", s,
                       "--daemon", fake_daemon.socket_path, "--output", out_path)
    assert rc == 0, err
    assert len(fake_daemon.requests) == 1
    assert fake_daemon.requests[0]["kernel"]["metadata"]["solution"] == \
        read_solutions(s).solutions[0]
    assert "resumed 1 of 2" in err and "1 that recorded an error of keval's are run again" in err
    entries = read_jsonl(out_path)
    assert len(entries) == 2 and all(e["passed"] for e in entries)
    assert json.loads(out)["keval"]["resumed"] == 1


def test_daemon_unreachable_mid_run_is_an_infrastructure_failure(tmp_path, capsys, fake_daemon):
    p, s = datapacks(tmp_path, [make_problem("T/0")], [make_solution("T/0", "pass")])

    def vanish(request, attempt):
        raise ConnectionError("gone")  # the handler dies: the connection closes unanswered
    fake_daemon.answer = vanish
    out_path = str(tmp_path / "o.jsonl")
    rc, out, err = run(capsys, "evaluate", "--problems", p, "--solutions", s,
                       "--daemon", fake_daemon.socket_path, "--output", out_path)
    assert rc == 3
    [entry] = read_jsonl(out_path)
    assert entry["keval"]["error"]["class"] == "connection"
    assert entry["keval"]["attempts"] == 2


def test_resume_skips_what_is_done(tmp_path, capsys, fake_daemon, mixed):
    _, _, p, s = mixed
    out_path = str(tmp_path / "o.jsonl")
    args = ["evaluate", "--problems", p, "--solutions", s, "--daemon", fake_daemon.socket_path,
            "--output", out_path, "--progress", "lines"]
    rc, first, err = run(capsys, *args)
    assert rc == 0, err
    assert len(fake_daemon.requests) == 9

    # Everything done: nothing is submitted, the metrics are the same.
    fake_daemon.requests.clear()
    rc, again, err = run(capsys, *args)
    assert rc == 0, err
    assert fake_daemon.requests == []
    assert "resumed 9 of 9" in err
    a, b = json.loads(first), json.loads(again)
    for m in (a, b):
        del m["keval"]["seconds"], m["keval"]["resumed"]
    assert a == b

    # Four lines kept, the fifth cut short by an interrupted write: five solutions run again.
    with open(out_path, encoding="utf-8") as f:
        lines = f.readlines()
    with open(out_path, "w", encoding="utf-8") as f:
        f.writelines(lines[:4])
        f.write(lines[4][:50])
    kept = {(e["keval"]["solution_index"]) for e in map(json.loads, lines[:4])}
    rc, _, err = run(capsys, *args)
    assert rc == 0, err
    assert "resumed 4 of 9" in err and "1 unreadable or repeated lines dropped" in err
    indexes = sorted(int(e["keval"]["solution_index"]) for e in read_jsonl(out_path))
    assert indexes == list(range(9))
    submitted = {json.dumps(r["kernel"]["metadata"]["solution"]) for r in fake_daemon.requests}
    assert len(fake_daemon.requests) == 5
    solutions = read_solutions(s).solutions
    assert not any(json.dumps(solutions[i]) in submitted for i in kept)


@pytest.mark.parametrize("tamper,message", [
    (lambda e: e["keval"].update(datapack="other"), "which this run does not evaluate"),
    (lambda e: e["solution"]["files"][0].update(content="x"), "differs from this run's"),
    (lambda e: e["keval"].update(benchmark=True), "evaluated with --benchmark"),
    (lambda e: e.pop("keval"), "has no keval key"),
])
def test_resume_refuses_another_runs_output(tmp_path, capsys, fake_daemon, tamper, message):
    p, s = datapacks(tmp_path, [make_problem("T/0")], [make_solution("T/0", "pass")])
    out_path = str(tmp_path / "o.jsonl")
    args = ["evaluate", "--problems", p, "--solutions", s, "--daemon", fake_daemon.socket_path,
            "--output", out_path]
    assert run(capsys, *args)[0] == 0
    [entry] = read_jsonl(out_path)
    tamper(entry)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
    fake_daemon.requests.clear()
    rc, _, err = run(capsys, *args)
    assert rc == 2
    assert message in err
    assert fake_daemon.requests == []


def test_rejected_solution_fails_and_bad_problem_is_bad_input(tmp_path, capsys, fake_daemon):
    p, s = datapacks(tmp_path, [make_problem("T/0")],
                     [make_solution("T/0", "reject"), make_solution("T/0", "pass")])
    out_path = str(tmp_path / "o.jsonl")
    rc, out, err = run(capsys, "evaluate", "--problems", p, "--solutions", s,
                       "--daemon", fake_daemon.socket_path, "--output", out_path)
    assert rc == 0, err
    [rejected] = by_verdict(read_jsonl(out_path))["reject"]
    assert rejected["passed"] is False and rejected["skipped"] is False
    assert rejected["build_output"] == ("[VALIDATION ERROR] kernel.metadata.solution.files[0]"
                                        ".path: must be relative (got \"/etc/passwd\")")
    assert "error" not in rejected["keval"]
    assert len(fake_daemon.requests) == 2  # a 400 is not retried

    p, s = datapacks(tmp_path, [make_problem("T/0")], [make_solution("T/0", "bad_problem")],
                     name="other")
    rc, out, err = run(capsys, "evaluate", "--problems", p, "--solutions", s,
                       "--daemon", fake_daemon.socket_path, "--output", str(tmp_path / "b.jsonl"))
    assert rc == 2
    [entry] = read_jsonl(str(tmp_path / "b.jsonl"))
    assert entry["keval"]["error"]["class"] == "bad_request"
    assert "kernel.metadata.problem.test_files[0].path" in err
    assert json.loads(out)["keval"]["request_errors"] == 1


def test_missing_solutions_are_listed(tmp_path, capsys, fake_daemon):
    p, s = datapacks(tmp_path, [make_problem("T/0"), make_problem("T/1"), make_problem("T/2")],
                     [make_solution("T/1", "pass")])
    rc, _, err = run(capsys, "evaluate", "--problems", p, "--solutions", s,
                     "--daemon", fake_daemon.socket_path, "--output", str(tmp_path / "o.jsonl"))
    assert rc == 2
    assert "task_ids are missing in the solutions datapack model: T/0, T/2" in err
    assert fake_daemon.requests == []
    assert not os.path.exists(tmp_path / "o.jsonl")


def test_input_errors(tmp_path, capsys, fake_daemon):
    p, s = datapacks(tmp_path, [make_problem("T/0")],
                     [make_solution("T/0", "pass"), make_solution("T/9", "pass")])
    sock = fake_daemon.socket_path
    rc, _, err = run(capsys, "evaluate", "--problems", p, "--solutions", s, "--daemon", sock)
    assert rc == 2 and "does not hold: T/9" in err
    other = str(tmp_path / "x-solutions.tar.gz")
    write_solutions(other, [make_solution("T/0", "pass")], release="2025-1")
    rc, _, err = run(capsys, "evaluate", "--problems", p, "--solutions", other, "--daemon", sock)
    assert rc == 2 and "release '2025-1'" in err
    rc, _, err = run(capsys, "evaluate", "--problems", str(tmp_path / "none.tar.gz"),
                     "--solutions", s, "--daemon", sock)
    assert rc == 2 and "no such file" in err
    rc, _, err = run(capsys, "evaluate", "--problems", p, "--daemon", sock)
    assert rc == 2 and "--solutions is required" in err
    rc, _, err = run(capsys, "evaluate", "--problems", p, "--solutions", s, "--baseline")
    assert rc == 2
    assert fake_daemon.requests == []


def test_groups_of_the_solutions_datapack_select_problems(tmp_path, capsys, fake_daemon):
    p, s = datapacks(tmp_path, [make_problem("T/0", group="cccl"),
                                make_problem("T/1", group="cublas")],
                     [make_solution("T/1", "pass")], groups=["cublas"])
    rc, out, err = run(capsys, "evaluate", "--problems", p, "--solutions", s,
                       "--daemon", fake_daemon.socket_path, "--output", str(tmp_path / "o.jsonl"))
    assert rc == 0, err
    metrics = json.loads(out)
    assert metrics["groups"] == ["cublas"] and metrics["total_problem_count"] == 1


def test_default_output_names(tmp_path, capsys, fake_daemon, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    problems = [make_problem("T/0"), make_problem("T/1", baseline=None)]
    p, s = datapacks(tmp_path, problems, [make_solution("T/0", "pass"),
                                          make_solution("T/1", "pass")], name="gpt-x")
    rc, _, err = run(capsys, "evaluate", "--problems", p, "--solutions", s,
                     "--daemon", fake_daemon.socket_path)
    assert rc == 0, err
    assert sorted(os.listdir(work)) == ["gpt-x-graded-solutions.jsonl",
                                        "gpt-x-graded-solutions.jsonl.metrics.json"]

    # --baseline: each problem's own baseline_solution; one without is left out, with a warning.
    fake_daemon.requests.clear()
    rc, out, err = run(capsys, "evaluate", "--problems", p, "--baseline",
                       "--daemon", fake_daemon.socket_path)
    assert rc == 0, err
    assert "1 problems have no baseline_solution and are not evaluated: T/1" in err
    baseline_out = work / "internal-baseline-graded-solutions.jsonl"
    [entry] = read_jsonl(str(baseline_out))
    assert entry["passed"] and entry["keval"]["datapack"] == "internal-baseline"
    assert entry["solution"] == read_problems(p).problems[0]["baseline_solution"]
    [request] = fake_daemon.requests
    assert request["kernel"]["metadata"]["solution"] == entry["solution"]
    assert json.loads(out)["pass_at_k"]["pass@1"] == 1.0


def test_progress_lines_every_ten_percent(tmp_path, capsys, fake_daemon):
    solutions = [make_solution("T/0", "pass", note=str(i)) for i in range(20)]
    p, s = datapacks(tmp_path, [make_problem("T/0")], solutions)
    rc, _, err = run(capsys, "evaluate", "--problems", p, "--solutions", s, "--jobs", "4",
                     "--daemon", fake_daemon.socket_path, "--output", str(tmp_path / "o.jsonl"),
                     "--progress", "lines")
    assert rc == 0, err
    lines = [line for line in err.splitlines() if "%" in line]
    assert [line.split()[1] for line in lines] == [f"{10 * i}%" for i in range(1, 11)]
    assert "20/20  passed 20  failed 0  skipped 0" in lines[-1]


@pytest.mark.parametrize("max_active, expected", [(6, 6), (None, 4)])
def test_default_jobs_keep_the_daemons_workers_busy(tmp_path, capsys, fake_daemon, max_active,
                                                    expected):
    # Without --jobs, as many requests at once as /health's jobs.max_active (the daemon builds
    # them in parallel while the GPU tests); ComputeEval's 4 for a daemon that does not say.
    if max_active is not None:
        fake_daemon.health["jobs"] = {"active": 0, "max_active": max_active, "queued": 0}
    together = threading.Barrier(expected, timeout=30)  # fails unless `expected` arrive at once
    lock = threading.Lock()
    in_flight = [0, 0]  # now, most

    def answer(request, attempt):
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
        together.wait()
        with lock:
            in_flight[0] -= 1
        return fake_daemon.default_answer(request, attempt)

    fake_daemon.answer = answer
    solutions = [make_solution("T/0", "pass", note=str(i)) for i in range(2 * expected)]
    p, s = datapacks(tmp_path, [make_problem("T/0")], solutions)
    rc, _, err = run(capsys, "evaluate", "--problems", p, "--solutions", s,
                     "--daemon", fake_daemon.socket_path, "--output", str(tmp_path / "o.jsonl"),
                     "--progress", "lines")
    assert rc == 0, err
    assert f"{2 * expected} solutions of model to evaluate, {expected} at a time" in err
    assert in_flight[1] == expected
    assert len(read_jsonl(str(tmp_path / "o.jsonl"))) == 2 * expected


def test_progress_bar(tmp_path, capsys, fake_daemon):
    p, s = datapacks(tmp_path, [make_problem("T/0")],
                     [make_solution("T/0", "pass"), make_solution("T/0", "wrong")])
    rc, _, err = run(capsys, "evaluate", "--problems", p, "--solutions", s,
                     "--daemon", fake_daemon.socket_path, "--output", str(tmp_path / "o.jsonl"),
                     "--progress", "bar")
    assert rc == 0, err
    assert "\r[" in err and "2/2  passed 1  failed 1  skipped 0" in err


def test_daemon_without_cuda_program(tmp_path, capsys, fake_daemon):
    fake_daemon.health["plugins"] = ["cuda", "torch"]
    p, s = datapacks(tmp_path, [make_problem("T/0")], [make_solution("T/0", "pass")])
    rc, _, err = run(capsys, "evaluate", "--problems", p, "--solutions", s,
                     "--daemon", fake_daemon.socket_path, "--output", str(tmp_path / "o.jsonl"))
    assert rc == 3
    assert "has no cuda_program kernel type (it has: cuda, torch)" in err


def test_no_daemon_at_the_socket(tmp_path, capsys, short_tmp):
    p, s = datapacks(tmp_path, [make_problem("T/0")], [make_solution("T/0", "pass")])
    rc, _, err = run(capsys, "evaluate", "--problems", p, "--solutions", s,
                     "--daemon", os.path.join(short_tmp, "nobody.sock"),
                     "--output", str(tmp_path / "o.jsonl"))
    assert rc == 3 and "no keval daemon answers" in err


# -- the transport and LocalDaemon ---------------------------------------------------------------

def test_unix_client(fake_daemon):
    client = UnixClient(fake_daemon.socket_path)
    status, body, headers = client.get_json("/health")
    assert status == 200 and body["status"] == "ok"
    assert headers["content-type"] == "application/json"
    status, body, _ = client.get_json("/nowhere")
    assert status == 404
    request = {"kernel": {"metadata": {"problem": make_problem("T/0"),
                                       "solution": make_solution("T/0", "busy_once")}}}
    status, body, headers = client.post_json("/evaluate", request)
    assert status == 503 and headers["retry-after"] == "0"
    status, body, _ = client.post_json("/evaluate", request, timeout=5)
    assert status == 200 and body["kernel_exec_result"]["correctness"] is True


FAKE_KEVAL = """\
#!{python}
# A stand-in for `keval serve`: serves the fake daemon on --socket until SIGTERM.
import os, signal, sys, time
sys.path[:0] = [{tests!r}, {python_dir!r}]
from compute_eval_support import FakeDaemon
args = sys.argv[1:]
assert args[0] == "serve", args
if os.environ.get("FAKE_KEVAL_FAIL"):
    sys.stderr.write("keval: cannot bind: the fake was told to fail\\n")
    sys.exit(7)
socket_path = args[args.index("--socket") + 1]
assert os.path.isdir(args[args.index("--state-dir") + 1])
with open(os.path.join(os.path.dirname(socket_path), "argv"), "w") as f:
    f.write(" ".join(args))
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
time.sleep(0.2)
FakeDaemon(socket_path).start()
sys.stderr.write("fake keval serving\\n")
while True:
    time.sleep(1)
"""


@pytest.fixture
def fake_keval(tmp_path):
    path = tmp_path / "keval"
    path.write_text(FAKE_KEVAL.format(python=sys.executable,
                                      tests=os.path.dirname(os.path.abspath(__file__)),
                                      python_dir=PYTHON_DIR))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_local_daemon_starts_answers_and_stops(fake_keval):
    with LocalDaemon(keval_bin=fake_keval, extra_args=["--sandbox", "off"]) as daemon:
        assert daemon.running
        assert daemon.health["plugins"] == ["cuda", "cuda_program"]
        status, body, _ = daemon.client().get_json("/health")
        assert status == 200
        with open(os.path.join(daemon.state_dir, "argv")) as f:
            argv = f.read().split()
        assert argv == ["serve", "--state-dir", daemon.state_dir, "--socket",
                        daemon.socket_path, "--sandbox", "off"]
        state_dir = daemon.state_dir
    assert not daemon.running
    assert not os.path.exists(state_dir)


def test_local_daemon_that_dies_reports_its_stderr(fake_keval, monkeypatch):
    monkeypatch.setenv("FAKE_KEVAL_FAIL", "1")
    with pytest.raises(DaemonStartError) as e:
        with LocalDaemon(keval_bin=fake_keval):
            pass
    assert "exited with exit code 7" in str(e.value)
    assert "the fake was told to fail" in str(e.value)


def test_local_daemon_binary_from_environment(fake_keval, monkeypatch, tmp_path):
    monkeypatch.setenv("KEVAL_BIN", fake_keval)
    with LocalDaemon() as daemon:
        assert daemon.running
    monkeypatch.setenv("KEVAL_BIN", str(tmp_path / "absent"))
    with pytest.raises(DaemonStartError, match="is not an executable file"):
        LocalDaemon().start()


def test_evaluate_with_a_started_daemon(tmp_path, capsys, fake_keval):
    p, s = datapacks(tmp_path, [make_problem("T/0")], [make_solution("T/0", "pass")])
    rc, out, err = run(capsys, "evaluate", "--problems", p, "--solutions", s,
                       "--keval-bin", fake_keval, "--output", str(tmp_path / "o.jsonl"))
    assert rc == 0, err
    assert "started keval serve on" in err
    assert json.loads(out)["pass_at_k"]["pass@1"] == 1.0


# -- the command line as a process -----------------------------------------------------------------

def test_pack_commands(tmp_path):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    problems = str(tmp_path / "keval-problems.tar.gz")
    dirs = [os.path.join(PROBLEMS_DIR, d) for d in sorted(os.listdir(PROBLEMS_DIR))]
    res = subprocess.run([sys.executable, "-m", "keval.compute_eval", "pack-problems", *dirs,
                          "--release", "internal", "-o", problems], env=env,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert f"wrote {problems} ({len(dirs)} problems)" in res.stderr
    assert len(read_problems(problems).problems) == len(dirs)

    solutions = str(tmp_path / "v-solutions.tar.gz")
    saxpy = os.path.join(PROBLEMS_DIR, "host_saxpy")
    res = subprocess.run([sys.executable, "-m", "keval.compute_eval", "pack-solutions", saxpy,
                          os.path.join(saxpy, "variants", "wrong"), "--variant", "pass",
                          "--groups", "cuda-runtime", "--release", "internal", "-o", solutions],
                         env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    pack = read_solutions(solutions)
    assert len(pack.solutions) == 2 and pack.groups == ["cuda-runtime"]

    res = subprocess.run([sys.executable, "-m", "keval.compute_eval", "pack-problems",
                          str(tmp_path), "--release", "internal", "-o", problems],
                         env=env, capture_output=True, text=True)
    assert res.returncode == 2 and "not a problem directory" in res.stderr


def test_help_mentions_every_command():
    res = subprocess.run([sys.executable, "-m", "keval.compute_eval", "--help"],
                         env=dict(os.environ, PYTHONPATH=PYTHON_DIR),
                         capture_output=True, text=True)
    assert res.returncode == 0
    for command in ("evaluate", "pack-problems", "pack-solutions"):
        assert command in res.stdout
    res = subprocess.run([sys.executable, "-m", "keval.compute_eval", "evaluate", "--help"],
                         env=dict(os.environ, PYTHONPATH=PYTHON_DIR),
                         capture_output=True, text=True)
    for option in ("--problems", "--solutions", "--k", "--jobs", "--daemon", "--baseline",
                   "--benchmark", "--output", "--timeout"):
        assert option in res.stdout

