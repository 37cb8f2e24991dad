"""keval's MCP server (python -m keval.mcp), driven by the MCP Python SDK's own client.

The server runs as a subprocess against a real daemon (this build's keval: KEVAL_BIN, else
build/bin/keval), over stdio (mcp.client.stdio.stdio_client + ClientSession) and over
streamable HTTP (mcp.client.streamable_http.streamable_http_client). Real jobs run on the CPU
with kernel type torch; there are two of them (a compare, and one that is cancelled).
Skipped, with the reason, when the `mcp` package is missing (python/requirements-test.txt pins
it; scripts/setup installs it into .venv).
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

mcp = pytest.importorskip("mcp", reason="the MCP Python SDK is not installed "
                                        "(pip install -r python/requirements-test.txt)")

import anyio  # noqa: E402  (mcp's dependency)
import httpx2  # noqa: E402  (mcp's HTTP client)
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from keval._daemon import LocalDaemon  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PYTHON_DIR = ROOT / "python"
KEVAL_BIN = os.environ.get("KEVAL_BIN") or str(ROOT / "build" / "bin" / "keval")
EXAMPLE = json.loads((ROOT / "examples" / "torch_kernelbench_compare.json").read_text())

TOOLS = {"evaluate_kernel", "compare_kernels", "get_job", "cancel_job", "list_kernel_types",
         "health"}
REQUIRED = {"evaluate_kernel": {"source_code", "kernel_type"},
            "compare_kernels": {"reference", "candidate"},
            "get_job": {"job_id"}, "cancel_job": {"job_id"}}
# Bounds on waits that only a broken server would reach; never timing assertions.
CALL_TIMEOUT = 300.0
START_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def daemon():
    if not (os.path.isfile(KEVAL_BIN) and os.access(KEVAL_BIN, os.X_OK)):
        pytest.skip(f"no keval binary at {KEVAL_BIN} (build it, or set KEVAL_BIN)")
    # CPU kernel types only, as the tests assert, also on a machine with a GPU.
    with LocalDaemon(keval_bin=KEVAL_BIN, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}) as d:
        assert len(d.socket_path) <= 107
        yield d


def server_env(**extra: str) -> dict:
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(PYTHON_DIR),
                                                       os.environ.get("PYTHONPATH")])),
           "PYTHONDONTWRITEBYTECODE": "1", "KEVAL_BIN": KEVAL_BIN}
    for key in ("TMPDIR", "LANG", "LC_ALL"):
        if os.environ.get(key):
            env[key] = os.environ[key]
    env.update(extra)
    return env


def stdio_params(*args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "keval.mcp", *args],
                                 env=server_env(), cwd=str(ROOT))


def run(coro_fn):
    """Run an async test body under anyio, bounded so that a hung server fails the test."""
    async def bounded():
        with anyio.fail_after(CALL_TIMEOUT * 2):
            return await coro_fn()
    return anyio.run(bounded)


def text_of(result) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def call(session: ClientSession, name: str, args=None):
    return await session.call_tool(name, args or {}, read_timeout_seconds=CALL_TIMEOUT)


def check_tools(listing) -> None:
    tools = {t.name: t for t in listing.tools}
    assert set(tools) == TOOLS
    for name, tool in tools.items():
        assert tool.description and len(tool.description) > 80, name
        schema = tool.input_schema
        assert schema.get("type") == "object", name
        assert set(schema.get("required") or []) == REQUIRED.get(name, set()), name
        assert tool.output_schema and tool.output_schema.get("type") == "object", name
    # What an agent reads to write a request: the IOContract and the kernel spec.
    evaluate = tools["evaluate_kernel"].input_schema["properties"]
    assert "tensor_spec" in json.dumps(evaluate["io"])
    assert {"num_trials", "timeout", "atol", "rtol", "wait", "detail"} <= set(evaluate)
    compare = tools["compare_kernels"].input_schema["properties"]
    assert set(compare["candidate"]["required"]) == {"source_code", "kernel_type"}
    assert "speedup" in tools["compare_kernels"].description


def sleeper_source() -> str:
    return textwrap.dedent("""\
        import time
        import torch


        class Model(torch.nn.Module):
            def forward(self, x):
                time.sleep(3600)
                return x


        def get_inputs():
            return [torch.randn(4)]


        def get_init_inputs():
            return []
        """)


def test_stdio_tools_compare_job_and_errors(daemon):
    async def body():
        async with stdio_client(stdio_params("--socket", daemon.socket_path)) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                check_tools(await session.list_tools())

                health = await call(session, "health")
                assert not health.is_error, text_of(health)
                assert health.structured_content["status"] == "ok"
                assert "torch" in health.structured_content["kernel_types"]
                assert health.structured_content["daemon"] == daemon.socket_path
                assert health.structured_content["jobs"]["queue_capacity"] > 0

                types = await call(session, "list_kernel_types")
                assert not types.is_error, text_of(types)
                by_name = {t["kernel_type"]: t for t in types.structured_content["kernel_types"]}
                assert "cpu" in by_name["torch"]["capabilities"]
                assert by_name["torch"]["description"] and by_name["torch"]["source"]
                assert "required" in by_name["cuda"]["io"]

                # One real compare on the CPU: KernelBench's Model against a ModelNew.
                compared = await call(session, "compare_kernels", {
                    "reference": EXAMPLE["ref_kernel"], "candidate": EXAMPLE["custom_kernel"],
                    "num_trials": 3, "timeout": 120})
                assert not compared.is_error, text_of(compared)
                result = compared.structured_content
                assert result["verdict"] == "correct", result
                assert result["compiled"] is True and result["correctness"] is True
                assert result["speedup"] > 0
                assert result["runtime_ms"]["method"] == "cpu_wall_clock"
                assert result["runtime_ms"]["samples"] == 3
                assert result["ref_runtime_ms"]["median"] > 0
                assert result["headline"].startswith("correct")
                assert json.loads(text_of(compared)) == result
                job_id = result["job_id"]

                # The job again, summarised and whole.
                job = await call(session, "get_job", {"job_id": job_id})
                assert not job.is_error, text_of(job)
                assert job.structured_content["verdict"] == "correct"
                assert job.structured_content["speedup"] == result["speedup"]
                full = await call(session, "get_job", {"job_id": job_id, "detail": "full"})
                record = full.structured_content["job"]
                assert record["status"] == "completed"
                assert record["result"]["kernel_exec_result"]["correctness"] is True

                # A malformed request: a tool error naming the field, as the tool calls it.
                bad = await call(session, "evaluate_kernel", {
                    "source_code": "extern \"C\" __global__ void k(float* a) {}",
                    "kernel_type": "cuda",
                    "io": {"args": [{"name": "a", "type": "tensor", "role": "output",
                                     "tensor_spec": {"shape": [4, 0], "dtype": "float32"}}],
                           "launch": {"grid": 1, "block": 1}}})
                assert bad.is_error
                error = bad.structured_content["error"]
                assert error["path"] == "io.args[0].tensor_spec.shape[1]", error
                assert error["api_path"] == "kernel.io.args[0].tensor_spec.shape[1]"
                assert "io.args[0].tensor_spec.shape[1]" in text_of(bad)

                bad = await call(session, "compare_kernels", {
                    "reference": EXAMPLE["ref_kernel"],
                    "candidate": {"source_code": "x", "kernel_type": "no_such_type"}})
                assert bad.is_error
                assert bad.structured_content["error"]["path"] == "candidate.kernel_type"
                assert "no_such_type" in text_of(bad)

                # Arguments that do not fit the input schema never reach the daemon.
                bad = await call(session, "compare_kernels", {"reference": EXAMPLE["ref_kernel"]})
                assert bad.is_error and "candidate" in text_of(bad)
                bad = await call(session, "evaluate_kernel", {
                    "source_code": "x", "kernel_type": "torch", "options": {"kernel": {}}})
                assert bad.is_error and "options" in text_of(bad)

                unknown = await call(session, "get_job", {"job_id": "no-such-job"})
                assert unknown.is_error and "no-such-job" in text_of(unknown)

                # wait=false answers with the job id at once; cancel_job ends the job.
                started = await call(session, "compare_kernels", {
                    "reference": {"source_code": sleeper_source(), "kernel_type": "torch"},
                    "candidate": {"source_code": sleeper_source(), "kernel_type": "torch"},
                    "num_trials": 1, "timeout": 600, "wait": False})
                assert not started.is_error, text_of(started)
                assert started.structured_content["finished"] is False
                sleeper = started.structured_content["job_id"]
                cancelled = await call(session, "cancel_job", {"job_id": sleeper})
                assert not cancelled.is_error, text_of(cancelled)
                assert cancelled.structured_content["cancelled"] is True
                assert cancelled.structured_content["verdict"] == "error"
                assert "cancelled" in cancelled.structured_content["error"]["message"]
                again = await call(session, "cancel_job", {"job_id": sleeper})
                assert not again.is_error and again.structured_content["cancelled"] is False
                final = await call(session, "get_job", {"job_id": sleeper, "wait": True})
                assert final.structured_content["finished"] is True
                assert final.structured_content["job_status"] == "failed"

                # Stages arrive as progress; abandoning the call cancels the job it started.
                seen = []
                with anyio.CancelScope() as scope:
                    async def progress(value, total, message):
                        seen.append(message)
                        scope.cancel()

                    await session.call_tool(
                        "evaluate_kernel",
                        {"source_code": sleeper_source(), "kernel_type": "torch",
                         "num_trials": 1, "timeout": 600},
                        read_timeout_seconds=CALL_TIMEOUT, progress_callback=progress)
                assert scope.cancelled_caught and seen, seen
                abandoned = seen[0].split()[1].rstrip(":")
                final = await call(session, "get_job", {"job_id": abandoned, "wait": True})
                assert final.structured_content["finished"] is True, final.structured_content
                assert "cancelled" in final.structured_content["error"]["message"]

    run(body)


def test_stdio_daemon_unreachable(short_tmp):
    missing = os.path.join(short_tmp, "nobody.sock")

    async def body():
        async with stdio_client(stdio_params("--socket", missing)) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                assert {t.name for t in (await session.list_tools()).tools} == TOOLS
                for name, args in (("health", {}), ("get_job", {"job_id": "x"}),
                                   ("evaluate_kernel", {"source_code": "x",
                                                        "kernel_type": "torch"})):
                    result = await call(session, name, args)
                    assert result.is_error, name
                    assert "unreachable" in text_of(result) and missing in text_of(result)
                    assert result.structured_content["error"]["class"] == "daemon_unavailable"

    run(body)


def answers(socket_path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(socket_path)
            return True
        except OSError:
            return False


def test_local_starts_and_stops_a_daemon(short_tmp):
    if not (os.path.isfile(KEVAL_BIN) and os.access(KEVAL_BIN, os.X_OK)):
        pytest.skip(f"no keval binary at {KEVAL_BIN} (build it, or set KEVAL_BIN)")
    sock = os.path.join(short_tmp, "local.sock")

    async def body():
        async with stdio_client(stdio_params("--local", "--socket", sock)) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                health = await call(session, "health")
                assert not health.is_error, text_of(health)
                assert health.structured_content["status"] == "ok"
                assert health.structured_content["daemon"] == sock

    run(body)
    # The server stops the daemon it started when its client goes (bounded poll).
    deadline = time.monotonic() + START_TIMEOUT
    while answers(sock) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not answers(sock)


def test_keval_mcp_command(daemon):
    """`keval mcp` runs this server (python3 -m keval.mcp, KEVAL_CLIENT_PYTHON)."""
    params = StdioServerParameters(
        command=KEVAL_BIN, args=["mcp", "--socket", daemon.socket_path],
        env={**server_env(), "KEVAL_CLIENT_PYTHON": sys.executable}, cwd=str(ROOT))

    async def body():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                assert {t.name for t in (await session.list_tools()).tools} == TOOLS
                health = await call(session, "health")
                assert not health.is_error, text_of(health)
                assert health.structured_content["daemon"] == daemon.socket_path

    run(body)


def read_banner(proc: subprocess.Popen) -> str:
    """The server's 'listening on URL' line from its stderr; what came before, on failure."""
    lines: "queue.Queue[str]" = queue.Queue()

    def pump() -> None:
        for line in proc.stderr:
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    seen = []
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if not line:
            break
        seen.append(line)
        if "listening on http://" in line:
            return line.split("listening on ", 1)[1].split()[0]
    proc.kill()
    pytest.fail("the MCP server did not start listening:\n" + "".join(seen))


def test_streamable_http_with_token(daemon, short_tmp):
    token_file = os.path.join(short_tmp, "mcp.token")
    proc = subprocess.Popen(
        [sys.executable, "-m", "keval.mcp", "--socket", daemon.socket_path,
         "--transport", "streamable-http", "--port", "0", "--http-token-file", token_file],
        cwd=str(ROOT), env={**os.environ, **server_env()}, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = read_banner(proc)
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
        token = Path(token_file).read_text().strip()
        assert len(token) == 64
        assert os.stat(token_file).st_mode & 0o077 == 0

        # Without the token: 401, before anything MCP.
        request = urllib.request.Request(url, data=b"{}", method="POST",
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 401

        async def body():
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx2.AsyncClient(headers=headers,
                                          timeout=httpx2.Timeout(30, read=300)) as http:
                async with streamable_http_client(url, http_client=http) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        check_tools(await session.list_tools())
                        health = await call(session, "health")
                        assert not health.is_error, text_of(health)
                        assert health.structured_content["status"] == "ok"
                        assert health.structured_content["daemon"] == daemon.socket_path

        run(body)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


def test_without_the_sdk_exits_3(short_tmp):
    # A `mcp` package that cannot be imported, first on the path.
    fake = Path(short_tmp) / "fake" / "mcp"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no mcp here')\n")
    env = {**os.environ, **server_env()}
    env["PYTHONPATH"] = os.pathsep.join([str(fake.parent), str(PYTHON_DIR)])
    done = subprocess.run([sys.executable, "-m", "keval.mcp"], cwd=str(ROOT), env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert "pip install 'keval[mcp]'" in done.stderr


def test_usage_errors():
    env = {**os.environ, **server_env()}
    for args in (["--socket", "/x", "--url", "http://127.0.0.1:1"],
                 ["--transport", "streamable-http", "--host", "0.0.0.0"],
                 ["--token-file", "/nonexistent"]):
        done = subprocess.run([sys.executable, "-m", "keval.mcp", *args], cwd=str(ROOT), env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("keval mcp: "), done.stderr


def test_summary_paths_and_excerpts():
    from keval.mcp.summary import excerpt, summarize_response, translate_path

    assert translate_path("kernel.io.args[2].tensor_spec.shape[0]", "evaluate") == \
        "io.args[2].tensor_spec.shape[0]"
    assert translate_path("ref_kernel.source_code", "compare") == "reference.source_code"
    assert translate_path("custom_kernel", "compare") == "candidate"
    assert translate_path("num_trials", "compare") == "num_trials"
    long = "first error\n" + "x" * 10000 + "\nlast line"
    cut = excerpt(long, 1000)
    assert cut.startswith("first error") and cut.endswith("last line") and len(cut) < 1100
    failed = summarize_response({"job_id": "j", "status": "failed",
                                 "error": {"class": "infrastructure",
                                           "message": "job exceeded its timeout"},
                                 "kernel_exec_result": {"compiled": True,
                                                        "correctness": False}}, "compare")
    assert failed["verdict"] == "error" and "timeout" in failed["headline"]
    wrong = summarize_response({"status": "success", "validation_error": "trial 0: output 0",
                                "kernel_exec_result": {"compiled": True, "correctness": False,
                                                       "runtime": -1}}, "compare")
    assert wrong["verdict"] == "incorrect" and "trial 0" in wrong["headline"]
    assert "runtime_ms" not in wrong


def test_summary_carries_the_speedup_floor_from_keval_s_own_wall_times():
    from keval.mcp.summary import summarize_response

    response = {"status": "success", "speedup": 1.734,
                "ref_runtime": {"median": 0.0209},
                "kernel_exec_result": {"compiled": True, "correctness": True,
                                       "runtime_stats": {"median": 0.0121},
                                       "metadata": {"profiling": {"speedup_floor": 0.912}}}}
    summary = summarize_response(response, "compare")
    assert summary["speedup_floor"] == 0.912
    assert "speedup 1.73x" in summary["headline"]
    assert "at least 0.912x" in summary["headline"]
    del response["kernel_exec_result"]["metadata"]["profiling"]["speedup_floor"]
    summary = summarize_response(response, "compare")
    assert "speedup_floor" not in summary and "at least" not in summary["headline"]


def test_summary_cuts_device_metrics_to_what_an_agent_acts_on():
    from keval.mcp.summary import summarize_response

    def kernel(name, duration, bound):
        return {"name": name,
                "speed_of_light": {"duration": {"value": duration, "unit": "us"},
                                   "sm_throughput": {"value": 18.0, "unit": "%"},
                                   "dram_throughput": {"value": 81.5, "unit": "%"}},
                "occupancy": {"achieved_occupancy": {"value": 76.0, "unit": "%"},
                              "limiters": ["warps"]},
                "memory": {"dram_bytes_read": {"value": 2.7e8, "unit": "bytes"}},
                "roofline": {"available": True, "bound": bound, "fraction_of_roof": 0.81234}}

    metrics = {"available": True, "kernel_count": 10,
               "kernels": [kernel(f"k{i}", float(i), "memory") for i in range(10)]}
    out = summarize_response({"status": "success", "kernel_exec_result": {
        "compiled": True, "correctness": True, "runtime": 1.0,
        "metadata": {"device_metrics": metrics,
                     "ref_device_metrics": {"available": False,
                                            "reason": "device metrics need a CUDA device"}}}},
        "compare")
    summary = out["device_metrics"]
    assert summary["available"] and summary["kernel_count"] == 10
    assert [k["name"] for k in summary["kernels"]] == [f"k{i}" for i in range(9, 1, -1)], \
        "the eight longest, longest first"
    first = summary["kernels"][0]
    assert first["duration_us"] == 9.0 and first["dram_throughput_pct"] == 81.5
    assert first["bound"] == "memory" and first["fraction_of_roof"] == 0.812
    assert first["occupancy_limiters"] == ["warps"]
    assert "dram_bytes_read_bytes" not in first, "the summary keeps the headline numbers only"
    assert out["ref_device_metrics"] == {"available": False,
                                         "reason": "device metrics need a CUDA device"}
    plain = summarize_response({"status": "success", "kernel_exec_result": {
        "compiled": True, "correctness": True, "metadata": {}}}, "evaluate")
    assert "device_metrics" not in plain
