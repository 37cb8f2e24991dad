"""keval kernelbench run: a tiny fake KernelBench tree (tests/python/fixtures/kernelbench).

The fake tree is ours, not KernelBench's: four tiny level-1 problems (add, ReLU, a small matmul,
tanh) and a run with a correct generation (1), a wrong one (2), one with a syntax error (3) and
none for 4. The unit tests need no daemon (a stand-in submit function plays keval); the
end-to-end tests run a real daemon on the CPU (KEVAL_BIN; skipped without it) and keep the
number of real jobs small: 3 for the generations, 1 retried on resume, 3 for the baseline.
"""

from __future__ import annotations

import _thread
import io
import json
import math
import os
import shutil
import threading

import pytest

from keval.kernelbench import dataset
from keval.kernelbench.__main__ import main
from keval.kernelbench.progress import Progress
from keval.kernelbench.results import (classify, entry_from_response, excerpt, summarize)
from keval.kernelbench.runner import RunOptions, Runner, SubmitOutcome

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "fixtures", "kernelbench")
FAKE_RUN = os.path.join(FAKE, "runs", "fake_run")
KEVAL_BIN = os.environ.get("KEVAL_BIN")

# KernelBench's own keys, then keval's: the report and KernelBench's scripts read these.
KERNELBENCH_KEYS = {"sample_id", "compiled", "correctness", "metadata", "runtime",
                    "runtime_stats"}
KEVAL_KEYS = {"problem_name", "level", "kernel_type", "job_id", "status", "speedup",
              "speedup_floor", "ref_runtime", "ref_runtime_stats", "methods", "flags", "failure_class", "error",
              "response_file"}
RUN_KEYS = {"format", "mode", "run_name", "level", "kernelbench", "generations", "problems",
            "started", "finished", "wall_seconds", "hardware", "keval_version", "counts"}


# -- parsing, detection, layout (no daemon) ------------------------------------------------------

@pytest.mark.parametrize("text,ids", [
    ("1-3", [1, 2, 3]), ("5", [5]), ("1,3,5-7", [1, 3, 5, 6, 7]), (" 2 , 1-2 ", [1, 2]),
    ("10-10", [10]),
])
def test_problem_spec(text, ids):
    assert dataset.parse_problem_spec(text) == ids


@pytest.mark.parametrize("text,words", [
    ("", "expected ids"), ("1,,2", "expected ids"), ("a-3", "'a-3'"), ("3-1", "ends before"),
    ("0-2", "start at 1"), ("1-2-3", "'1-2-3'"),
])
def test_problem_spec_errors_name_the_option_and_part(text, words):
    with pytest.raises(dataset.DatasetError) as e:
        dataset.parse_problem_spec(text)
    assert "--problems" in str(e.value) and words in str(e.value)


def test_problem_spec_error_from_the_cli_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "--kernelbench", FAKE, "--level", "1", "--baseline", "--problems", "3-1"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--problems" in err and "ends before" in err


def test_generations_and_baseline_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "--kernelbench", FAKE, "--level", "1", "--baseline",
              "--generations", FAKE_RUN])
    assert e.value.code == 2
    assert "not allowed with" in capsys.readouterr().err


def test_missing_level_exits_2_naming_the_folder(capsys):
    rc = main(["run", "--kernelbench", FAKE, "--level", "7", "--baseline"])
    assert rc == 2
    assert os.path.join("KernelBench", "level7") in capsys.readouterr().err


def test_not_a_kernelbench_checkout_exits_2(tmp_path, capsys):
    rc = main(["run", "--kernelbench", str(tmp_path), "--level", "1", "--baseline"])
    assert rc == 2
    assert "no level folders" in capsys.readouterr().err


def test_selection_outside_the_level_exits_2(capsys):
    rc = main(["run", "--kernelbench", FAKE, "--level", "1", "--baseline", "--problems", "50-60"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "50-60" in err and "1-4" in err


def test_bad_request_extra_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "--kernelbench", FAKE, "--level", "1", "--baseline",
              "--request-extra", "[1]"])
    assert e.value.code == 2
    assert "--request-extra" in capsys.readouterr().err


def test_root_or_its_kernelbench_folder():
    inner = os.path.join(FAKE, "KernelBench")
    assert dataset.resolve_kernelbench_root(FAKE) == inner
    assert dataset.resolve_kernelbench_root(inner) == inner


def test_problems_found_as_kernelbench_finds_them():
    problems = dataset.load_problems(os.path.join(FAKE, "KernelBench"), 1)
    assert sorted(problems) == [1, 2, 3, 4]  # README.txt is no problem
    assert problems[3].name == "3_Small_matmul.py"
    assert dataset.generation_path("/r", 1, 3, 0) == "/r/level_1_problem_3_sample_0_kernel.py"


@pytest.mark.parametrize("source,kernel_type", [
    ("from torch.utils.cpp_extension import load_inline\nclass ModelNew: pass\n", "torch_cuda"),
    ("import torch.utils.cpp_extension\nm = torch.utils.cpp_extension.load_inline(name='x')\n",
     "torch_cuda"),
    ("import triton\nimport triton.language as tl\n@triton.jit\ndef k(x): pass\n"
     "class ModelNew(torch.nn.Module): pass\n", "torch"),
    ("import triton\n@triton.jit\ndef add_kernel(x_ptr): pass\n", "triton"),
    ("import torch\nclass ModelNew(torch.nn.Module): pass\n", "torch"),
    ("# mentions triton only in a comment\nclass ModelNew: pass\n", "torch"),
])
def test_kernel_type_detection(source, kernel_type):
    assert dataset.detect_kernel_type(source) == kernel_type


def test_baseline_source_names_the_model_as_candidate():
    src = dataset.baseline_source("class Model:\n    pass\n")
    assert src.endswith("\nModelNew = Model\n") and src.startswith("class Model:")


# -- classification of keval's answers (shapes as the daemon sends them) -------------------------

def _response(compiled=True, correct=True, **extra):
    body = {"job_id": "j", "status": "success", "compilation_error": None,
            "validation_error": None,
            "kernel_exec_result": {"compiled": compiled, "correctness": correct,
                                   "runtime": 1.5 if correct else -1.0,
                                   "runtime_stats": {"mean": 1.5, "method": "cuda_graph"}
                                   if correct else {},
                                   "metadata": {"flags": [], "device": {
                                       "type": "cuda", "index": 0, "name": "NVIDIA H100"}}}}
    if correct:
        body["ref_runtime"] = {"mean": 3.0, "method": "cuda_graph", "count": 5}
        body["speedup"] = 2.0
        body["kernel_exec_result"]["metadata"]["profiling"] = {"speedup": 2.0,
                                                               "speedup_floor": 1.25}
    body.update(extra)
    return body


def test_classify_verdicts_and_failures():
    assert classify(_response()) is None
    assert classify(_response(compiled=False, correct=False,
                              compilation_error="SyntaxError")) == "compile"
    wrong = _response(correct=False)
    wrong["kernel_exec_result"]["metadata"]["validation"] = {
        "ok": False, "error": {"type": "mismatch", "message": "trial 0: ..."}}
    assert classify(wrong) == "correctness"
    crash = _response(correct=False)
    crash["kernel_exec_result"]["metadata"]["validation"] = {
        "ok": False, "error": {"type": "runtime_error", "message": "forward raised"}}
    assert classify(crash) == "runtime"
    cheat = _response(correct=False, validation_error="timed sample 3 of 100: output 0: ...")
    cheat["kernel_exec_result"]["metadata"]["profiling"] = {"error": {"type": "mismatch"}}
    assert classify(cheat) == "correctness"
    timeout = {"job_id": "j", "status": "failed", "error": {
        "class": "infrastructure",
        "message": "job exceeded its timeout of 3.000000 s while validating; worker killed"}}
    assert classify(timeout, 500) == "timeout"
    assert classify({"status": "failed", "error": {"class": "infrastructure",
                                                   "message": "worker died"}}, 500) \
        == "infrastructure"
    assert classify({"status": "failed", "error": {"class": "bad_request", "path": "num_trials",
                                                   "message": "must be an integer"}}, 400) \
        == "bad_request"


def test_entry_shape_and_small_metadata():
    long = "x" * 10000
    entry = entry_from_response(sample_id=0, problem_name="1_A.py", level=1, kernel_type="torch",
                                response=_response(validation_error=long, flags_ignored=1),
                                response_file="responses/r.json")
    assert set(entry) == KERNELBENCH_KEYS | KEVAL_KEYS
    assert entry["metadata"]["hardware"] == "NVIDIA H100"
    assert entry["metadata"]["device"] == "cuda:0"
    assert len(entry["metadata"]["validation_error"].encode()) <= 2048
    assert entry["runtime"] == 1.5 and entry["ref_runtime"] == 3.0 and entry["speedup"] == 2.0
    assert entry["speedup_floor"] == 1.25
    assert entry["methods"] == {"custom": "cuda_graph", "ref": "cuda_graph"}
    assert excerpt("é" * 5000).endswith("[truncated]")


def test_summary_fast_p_and_geomean():
    results = {
        "1": [{"sample_id": 0, "compiled": True, "correctness": True, "speedup": 2.0},
              {"sample_id": 1, "compiled": True, "correctness": True, "speedup": 0.5}],
        "2": [{"sample_id": 0, "compiled": True, "correctness": True, "speedup": 0.5}],
        "3": [{"sample_id": 0, "compiled": False, "correctness": False, "speedup": None,
               "failure_class": "compile"}],
        "4": [{"sample_id": 0, "compiled": False, "correctness": False,
               "failure_class": "missing_generation"}],
    }
    s = summarize(results)
    assert s["problems"] == 4
    assert s["fast_0"] == pytest.approx(0.5) and s["fast_1"] == pytest.approx(0.25)
    assert s["geomean_speedup"] == pytest.approx(math.exp((math.log(2) + 2 * math.log(.5)) / 3))
    assert s["counts"]["failed_by_class"] == {"compile": 1, "missing_generation": 1}
    assert summarize(results, [2])["counts"]["total"] == 1


# -- the runner with a stand-in for keval (no daemon) --------------------------------------------

def _options(tmp_path, **kw):
    run_dir = tmp_path / "run"
    if not run_dir.exists():
        shutil.copytree(FAKE_RUN, run_dir)
    base = dict(kernelbench=os.path.join(FAKE, "KernelBench"), level=1, problems=None,
                generations=str(run_dir), out=str(run_dir), num_trials=5, jobs=2)
    base.update(kw)
    return RunOptions(**base)


def _ok(request):
    return SubmitOutcome(response=_response(), http_status=200)


def test_runner_resume_retries_keval_failures_only(tmp_path):
    opts = _options(tmp_path)
    calls = []

    def flaky(request):
        calls.append(request)
        if "torch.relu" in request["ref_kernel"]["source_code"]:
            return SubmitOutcome(response={"job_id": "t", "status": "failed", "error": {
                "class": "infrastructure", "message": "job exceeded its timeout of 1 s"}},
                http_status=500)
        return _ok(request)

    runner = Runner(opts, flaky, progress_stream=io.StringIO(), tty=False)
    runner.plan()
    assert runner.run() == 0
    assert len(calls) == 3  # problem 4 has no generation: not submitted
    with open(runner.results_path) as f:
        results = json.load(f)
    assert list(results) == ["1", "2", "3", "4"]
    assert results["2"][0]["failure_class"] == "timeout"
    assert results["4"][0]["failure_class"] == "missing_generation"

    # The rerun: only the timed-out sample, and problem 4 once its generation appears.
    shutil.copy(os.path.join(FAKE_RUN, "level_1_problem_1_sample_0_kernel.py"),
                os.path.join(opts.generations, "level_1_problem_4_sample_0_kernel.py"))
    calls.clear()
    again = Runner(opts, _ok, progress_stream=io.StringIO(), tty=False)
    again.plan()
    assert sorted(w.problem.problem_id for w in again.work) == [2, 4]
    assert again.run() == 0
    with open(again.results_path) as f:
        results = json.load(f)
    assert [len(v) for v in results.values()] == [1, 1, 1, 1]
    assert all(v[0]["failure_class"] is None for v in results.values())

    forced = Runner(_options(tmp_path, force=True), _ok, progress_stream=io.StringIO())
    forced.plan()
    assert len(forced.work) == 4


def test_requests_baseline_generation_and_extra(tmp_path):
    extra = {"atol": 0.001, "custom_kernel": {"metadata": {"class_name": "ModelNew"}}}
    runner = Runner(_options(tmp_path, problems=[1], timeout=30.0, request_extra=extra,
                             kernel_type="torch_cuda"), _ok)
    runner.plan()
    request = runner.request_for(runner.work[0])
    assert request["ref_kernel"]["kernel_type"] == "torch"
    assert "class Model(nn.Module)" in request["ref_kernel"]["source_code"]
    assert request["custom_kernel"]["kernel_type"] == "torch_cuda"  # --kernel-type wins
    assert "torch.add(a, b)" in request["custom_kernel"]["source_code"]
    assert request["custom_kernel"]["metadata"] == {"class_name": "ModelNew"}
    assert request["num_trials"] == 5 and request["timeout"] == 30.0 and request["atol"] == 0.001
    baseline = Runner(_options(tmp_path, problems=[2], generations=None,
                               out=str(tmp_path / "b")), _ok)
    baseline.plan()
    request = baseline.request_for(baseline.work[0])
    assert request["custom_kernel"] == {
        "kernel_type": "torch",
        "source_code": dataset.baseline_source(request["ref_kernel"]["source_code"])}


def test_runner_keeps_levels_apart_and_survives_a_broken_submit(tmp_path):
    opts = _options(tmp_path, problems=[1, 2])

    def broken(request):
        raise RuntimeError("client bug")

    runner = Runner(opts, broken, progress_stream=io.StringIO())
    runner.plan()
    assert runner.run() == 0
    assert [v[0]["failure_class"] for v in runner.results.values()] == ["infrastructure"] * 2
    assert "client bug" in runner.results["1"][0]["error"]["message"]
    tree = tmp_path / "kb"
    shutil.copytree(os.path.join(FAKE, "KernelBench"), tree)
    shutil.copytree(tree / "level1", tree / "level2")
    other = Runner(_options(tmp_path, kernelbench=str(tree), level=2, problems=[1]), _ok)
    with pytest.raises(dataset.DatasetError, match="holds level 1 results"):
        other.plan()


def test_runner_waits_out_a_full_queue(tmp_path):
    answers = [SubmitOutcome(response={"retry_after": 0.01}, http_status=503,
                             failure_class="busy")]

    def busy_once(request):
        return answers.pop() if answers else _ok(request)

    runner = Runner(_options(tmp_path, problems=[1]), busy_once, progress_stream=io.StringIO())
    runner.plan()
    assert runner.run() == 0
    assert runner.results["1"][0]["failure_class"] is None
    assert runner.submitted == 1


def test_runner_stops_when_the_daemon_is_gone(tmp_path):
    def gone(request):
        return SubmitOutcome(failure_class="infrastructure", error_class="daemon_unavailable",
                             message="no keval daemon answered", daemon_gone=True)

    runner = Runner(_options(tmp_path, generations=None, out=str(tmp_path / "b"),
                             jobs=1), gone, progress_stream=io.StringIO())
    runner.plan()
    assert runner.run() == 3
    classes = [e[0]["failure_class"] for e in runner.results.values()]
    assert classes == ["infrastructure"]  # one submission, then no more
    assert "stopped" in runner.summary_text()
    with open(runner.run_path) as f:
        assert json.load(f)["aborted"]


def test_runner_ctrl_c_keeps_what_finished(tmp_path):
    release = threading.Event()
    seen = []

    def interrupt_on_second(request):
        seen.append(request)
        if len(seen) == 2:
            _thread.interrupt_main()   # as Ctrl-C at the terminal
            release.wait(10)
            return _ok(request)
        return _ok(request)

    runner = Runner(_options(tmp_path, generations=None, out=str(tmp_path / "b"), jobs=1),
                    interrupt_on_second, progress_stream=io.StringIO())
    runner.plan()
    assert runner.run() == 130
    release.set()
    with open(runner.results_path) as f:
        results = json.load(f)
    assert list(results) == ["1"]
    with open(runner.run_path) as f:
        assert json.load(f)["interrupted"] is True


def test_progress_bar_on_a_terminal_and_lines_elsewhere():
    tty = io.StringIO()
    p = Progress(2, stream=tty, tty=True)
    p.start()
    p.update(1, 0, {"failure_class": None, "correctness": True, "speedup": 1.0})
    p.update(2, 0, {"failure_class": "compile"})
    p.finish()
    text = tty.getvalue()
    assert text.count("\r") >= 3 and text.endswith("\n") and text.count("\n") == 1
    assert "2/2 done, 1 correct, 1 compile failed, 0 errors" in text
    lines = io.StringIO()
    p = Progress(2, stream=lines, tty=False)
    p.update(1, 0, {"failure_class": None, "correctness": True, "speedup": 1.25})
    p.update(2, 0, {"failure_class": "timeout"})
    out = lines.getvalue().splitlines()
    assert out[0].startswith("[1/2] problem 1 sample 0: correct speedup 1.25x")
    assert out[1].startswith("[2/2] problem 2 sample 0: timeout") and "1 errors" in out[1]


# -- end to end, through a real daemon on the CPU ------------------------------------------------

needs_daemon = pytest.mark.skipif(not KEVAL_BIN, reason="KEVAL_BIN is not set (CTest sets it)")


@pytest.fixture(scope="module")
def daemon():
    from keval._daemon import LocalDaemon
    # CPU kernel types only, as the tests assert, also on a machine with a GPU.
    with LocalDaemon(keval_bin=KEVAL_BIN, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}) as d:
        assert "torch" in (d.health.get("plugins") or [])
        yield d


def _submitted(daemon) -> int:
    status, body, _ = daemon.client().get_json("/stats")
    assert status == 200
    return body["jobs"]["submitted_total"]


def _run(capsys, daemon, *args):
    rc = main(["run", "--socket", daemon.socket_path, "--num-trials", "5", "--jobs", "3",
               "--progress", "lines", *args])
    out, err = capsys.readouterr()
    return rc, out, err


@needs_daemon
def test_generations_end_to_end_and_resume(tmp_path, capsys, daemon):
    run_dir = tmp_path / "fake_run"
    shutil.copytree(FAKE_RUN, run_dir)
    before = _submitted(daemon)
    rc, out, err = _run(capsys, daemon, "--kernelbench", FAKE, "--level", "1",
                        "--generations", str(run_dir))
    assert rc == 0, err
    assert _submitted(daemon) - before == 3
    with open(run_dir / "eval_results.json") as f:
        results = json.load(f)
    assert list(results) == ["1", "2", "3", "4"]
    entries = {int(k): v[0] for k, v in results.items()}
    for pid, e in entries.items():
        assert set(e) == KERNELBENCH_KEYS | KEVAL_KEYS, pid
        assert e["level"] == 1 and e["sample_id"] == 0
    assert {pid: e["failure_class"] for pid, e in entries.items()} == {
        1: None, 2: "correctness", 3: "compile", 4: "missing_generation"}
    good = entries[1]
    assert good["compiled"] and good["correctness"] and good["status"] == "success"
    assert good["problem_name"] == "1_Elementwise_add.py" and good["kernel_type"] == "torch"
    assert good["runtime"] > 0 and good["ref_runtime"] > 0
    assert math.isfinite(good["speedup"]) and good["speedup"] > 0
    assert good["methods"] == {"custom": "cpu_wall_clock", "ref": "cpu_wall_clock"}
    assert good["metadata"] == {"hardware": "host CPU", "device": "cpu"}
    assert good["runtime_stats"]["count"] == 5 and good["flags"] == []
    assert "elements differ" in entries[2]["metadata"]["validation_error"]
    assert entries[2]["error"]["class"] == "correctness"
    assert "SyntaxError" in entries[3]["metadata"]["compilation_error"]
    assert not entries[3]["compiled"]
    assert entries[4]["job_id"] is None and entries[4]["response_file"] is None
    for pid in (1, 2, 3):
        path = run_dir / entries[pid]["response_file"]
        assert entries[pid]["response_file"] == \
            f"responses/level_1_problem_{pid}_sample_0.json"
        with open(path) as f:
            assert json.load(f)["job_id"] == entries[pid]["job_id"]

    with open(run_dir / "keval_run.json") as f:
        record = json.load(f)
    assert RUN_KEYS <= set(record)
    assert record["format"] == "keval-kernelbench-run/1" and record["mode"] == "generations"
    assert record["run_name"] == "fake_run" and record["problems"] == [1, 2, 3, 4]
    assert record["generations"] == str(run_dir) and record["hardware"] == "host CPU"
    assert record["counts"]["total"] == 4 and record["counts"]["correct"] == 1
    assert record["counts"]["failed_by_class"] == {"compile": 1, "correctness": 1,
                                                   "missing_generation": 1}

    progress = [line for line in err.splitlines() if line.startswith("[")]
    assert len(progress) == 4 and progress[-1].startswith("[4/4] problem ")
    assert f"keval report {run_dir / 'eval_results.json'}" in out
    assert "fast_0 0.250" in out

    # Rerun: nothing is submitted (the daemon's job count stays).
    submitted = _submitted(daemon)
    rc, out, err = _run(capsys, daemon, "--kernelbench", FAKE, "--level", "1",
                        "--generations", str(run_dir))
    assert rc == 0 and "nothing to evaluate" in err
    assert _submitted(daemon) == submitted
    with open(run_dir / "eval_results.json") as f:
        assert json.load(f) == results

    # keval's own failure is evaluated again by the rerun, and only it.
    results["1"][0].update(failure_class="infrastructure", correctness=False)
    with open(run_dir / "eval_results.json", "w") as f:
        json.dump(results, f)
    rc, out, err = _run(capsys, daemon, "--kernelbench", FAKE, "--level", "1",
                        "--generations", str(run_dir))
    assert rc == 0, err
    assert _submitted(daemon) == submitted + 1
    with open(run_dir / "eval_results.json") as f:
        again = json.load(f)
    assert again["1"][0]["failure_class"] is None and again["1"][0]["job_id"] != good["job_id"]
    assert again["2"] == results["2"]


@needs_daemon
def test_baseline_end_to_end(tmp_path, capsys, daemon):
    out_dir = tmp_path / "baseline"
    before = _submitted(daemon)
    rc, out, err = _run(capsys, daemon, "--kernelbench", os.path.join(FAKE, "KernelBench"),
                        "--level", "1", "--problems", "1-3", "--baseline", "--out", str(out_dir))
    assert rc == 0, err
    assert _submitted(daemon) - before == 3
    with open(out_dir / "eval_results.json") as f:
        results = json.load(f)
    assert list(results) == ["1", "2", "3"]
    for entries in results.values():
        e = entries[0]
        assert e["failure_class"] is None and e["compiled"] and e["correctness"]
        assert e["kernel_type"] == "torch"
        assert math.isfinite(e["speedup"]) and e["speedup"] > 0
    with open(out_dir / "baseline_time_torch.json") as f:
        timing = json.load(f)
    assert list(timing) == ["level1"]
    assert list(timing["level1"]) == ["1_Elementwise_add.py", "2_ReLU.py", "3_Small_matmul.py"]
    for row in timing["level1"].values():
        assert set(row) == {"mean", "std", "min", "max", "num_trials", "hardware", "device"}
        assert row["mean"] > 0 and row["num_trials"] == 5
        assert row["hardware"] == "host CPU" and row["device"] == "cpu"
    with open(out_dir / "keval_run.json") as f:
        record = json.load(f)
    assert record["mode"] == "baseline" and record["generations"] is None
    assert record["problems"] == [1, 2, 3] and record["counts"]["correct"] == 3
    assert "baseline_time_torch.json" in out


@needs_daemon
def test_refused_request_is_recorded_as_bad_request(tmp_path, capsys, daemon):
    out_dir = tmp_path / "refused"
    before = _submitted(daemon)
    rc, out, err = _run(capsys, daemon, "--kernelbench", FAKE, "--level", "1", "--problems", "4",
                        "--baseline", "--out", str(out_dir),
                        "--request-extra", '{"num_trials": "many"}')
    assert rc == 0, err
    with open(out_dir / "eval_results.json") as f:
        entry = json.load(f)["4"][0]
    assert entry["failure_class"] == "bad_request" and entry["status"] == "failed"
    assert entry["error"]["class"] == "bad_request" and "integer" in entry["error"]["message"]
    with open(out_dir / entry["response_file"]) as f:
        assert json.load(f)["error"]["path"] == "num_trials"
    assert _submitted(daemon) == before  # refused before it became a job
