"""Helpers of the Python tests: paths, a fake keval daemon, synthetic problems.

The fake daemon is a threaded HTTP/1.1 server on a Unix socket that records every request and
answers canned keval responses. A solution chooses its own verdict: its first file's content is
``VERDICT: <name>`` (see ``FakeDaemon.answer``).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import socketserver
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(REPO, "python")
PROBLEMS_DIR = os.path.join(REPO, "tests", "compute_eval", "problems")

if PYTHON_DIR not in sys.path:  # PYTHONPATH has it under CTest; not when pytest runs by hand
    sys.path.insert(0, PYTHON_DIR)


# -- synthetic problems and solutions ----------------------------------------------------------

def make_problem(task_id: str, group: str = "cuda-kernels", difficulty: Optional[str] = "easy",
                 baseline: Optional[str] = "pass", **fields: Any) -> Dict[str, Any]:
    problem: Dict[str, Any] = {
        "type": "cuda_cpp",
        "schema_version": 2,
        "task_id": task_id,
        "date": "2026-01-15",
        "prompt": f"Solve {task_id}.",
        "metadata": {"difficulty": difficulty, "tags": [], "releases": [],
                     "do_not_release": False},
        "group": group,
        "context_files": [{"path": "include/p.h", "content": "void f();\n"}],
        "test_files": [{"path": "test/test_main.cu", "content": "int main() { return 0; }\n"}],
        "source_references": None,
        "build_command": "nvcc -I include -o test.out solution.cu test/*.cu",
        "test_command": "./test.out",
        "benchmark_command": "./test.out --perf",
        "timing_mode": {"type": "process"},
        "min_cuda_toolkit": None,
        "compute_capability": "8.0",
        "requires_datacenter_gpu": False,
        "timeout_seconds": 30.0,
        "baseline_solution": (make_solution(task_id, baseline) if baseline is not None else None),
    }
    problem.update(fields)
    return problem


def make_solution(task_id: str, verdict: str, note: str = "") -> Dict[str, Any]:
    return {"schema_version": 1, "type": "file", "task_id": task_id,
            "files": [{"path": "solution.cu", "content": f"VERDICT: {verdict}\n{note}"}]}


# -- the fake daemon ---------------------------------------------------------------------------

Answer = Tuple[int, Dict[str, Any], Dict[str, str]]


def _program(task_id: str, **parts: Any) -> Dict[str, Any]:
    program = {
        "task_id": task_id,
        "skipped": None,
        "source_references": {"passed": True, "missing": []},
        "build": {"command": "nvcc ...", "exit_code": 0, "seconds": 1.0, "timed_out": False,
                  "output": "", "harness": {"reused": True, "key": "k"}},
        "test": {"command": "./test.out", "exit_code": 0, "signal": None, "timed_out": False,
                 "seconds": 0.1, "stdout": "all checks passed\n", "stderr": ""},
    }
    program.update(parts)
    return program


def _response(job_id: str, compiled: bool, correct: bool, program: Dict[str, Any],
              status: str = "success", **top: Any) -> Dict[str, Any]:
    body = {
        "job_id": job_id,
        "status": status,
        "kernel_exec_result": {"compiled": compiled, "correctness": correct,
                               "metadata": {"program": program}},
        "speedup": None,
        "compilation_error": None,
        "validation_error": None,
    }
    body.update(top)
    return body


def metrics_block(kernel_ms: float) -> Dict[str, Any]:
    return {"kernels": [{"name": "k", "invocations": 1, "total_duration_ms": kernel_ms,
                         "avg_duration_ms": kernel_ms}],
            "memory_transfers": {}, "nvtx_ranges": {},
            "summary": {"total_kernel_time_ms": kernel_ms, "total_kernels": 1,
                        "total_kernel_invocations": 1, "total_memory_transfers": 0,
                        "application_duration_ms": kernel_ms + 1}}


class FakeDaemon:
    """``POST /evaluate`` and ``GET /health`` on a Unix socket, with canned answers.

    ``requests``: every ``/evaluate`` body received, in order. ``answer`` may be replaced by a
    function ``(request, attempt) -> (status, body, headers)``.
    """

    def __init__(self, socket_path: str):
        self.socket_path = socket_path
        self.requests: List[Dict[str, Any]] = []
        self.health: Dict[str, Any] = {"status": "ok", "plugins": ["cuda", "cuda_program"],
                                       "gpus": []}
        self.answer: Callable[[Dict[str, Any], int], Answer] = self.default_answer
        self._attempts: Dict[str, int] = {}
        self._lock = threading.Lock()
        self._server: Optional[socketserver.BaseServer] = None
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "FakeDaemon":
        daemon = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # AF_UNIX has no client address
                pass

            def _send(self, status: int, body: Dict[str, Any],
                      headers: Optional[Dict[str, str]] = None) -> None:
                data = json.dumps(body).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/health":
                    self._send(200, daemon.health)
                else:
                    self._send(404, {"status": "failed", "error": {"class": "not_found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}")
                if self.path != "/evaluate":
                    self._send(404, {"status": "failed", "error": {"class": "not_found"}})
                    return
                key = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
                with daemon._lock:
                    daemon.requests.append(request)
                    daemon._attempts[key] = daemon._attempts.get(key, 0) + 1
                    attempt = daemon._attempts[key]
                status, body, headers = daemon.answer(request, attempt)
                self._send(status, body, headers)

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a test's answer that raises closes the connection unanswered, quietly

        self._server = Server(self.socket_path, Handler)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # Canned verdicts, chosen by the solution's first file: "VERDICT: <name>".
    def default_answer(self, request: Dict[str, Any], attempt: int) -> Answer:
        meta = request["kernel"]["metadata"]
        task_id = meta["problem"]["task_id"]
        content = meta["solution"]["files"][0]["content"]
        verdict = content.split("\n", 1)[0].replace("VERDICT:", "").strip()
        with self._lock:
            job_id = f"job-{len(self.requests)}"
        ok = _program(task_id)
        if verdict == "pass":
            top: Dict[str, Any] = {}
            if meta.get("benchmark"):
                ok["benchmark"] = {"timing_mode": {"type": "process"},
                                   "solution": {"time_ms": 1.0, "metrics": metrics_block(0.5)},
                                   "baseline": {"time_ms": 2.0, "metrics": metrics_block(1.5)},
                                   "speedup": 2.0, "error": None}
                top["speedup"] = 2.0
            return 200, _response(job_id, True, True, ok, **top), {}
        if verdict == "wrong":
            ok["test"].update(exit_code=1, stdout="FAIL c[3] = 1, expected 2\n")
            return 200, _response(job_id, True, False, ok), {}
        if verdict == "build_error":
            ok["build"].update(exit_code=1, output="solution.cu(5): error: expected a \";\"\n")
            del ok["test"]
            return 200, _response(job_id, False, False, ok,
                                  compilation_error="solution.cu(5): error: expected a \";\"\n"), {}
        if verdict == "timeout":
            ok["test"].update(exit_code=None, timed_out=True, seconds=5.0, stdout="")
            return 200, _response(job_id, True, False, ok), {}
        if verdict == "crash":
            ok["test"].update(exit_code=None, signal=11, stdout="", stderr="")
            return 200, _response(job_id, True, False, ok), {}
        if verdict == "refs":
            ok["source_references"] = {"passed": False, "missing": ["std::transform"]}
            del ok["build"], ok["test"]
            return 200, _response(job_id, False, False, ok, compilation_error=(
                "the solution does not use what the problem requires: std::transform")), {}
        if verdict == "skip":
            ok = _program(task_id, skipped="requires compute capability 8.0; this machine has "
                                           "no GPU")
            del ok["build"], ok["test"]
            return 200, _response(job_id, False, False, ok, status="skipped",
                                  compilation_error=ok["skipped"]), {}
        if verdict == "infra" or (verdict == "infra_once" and attempt == 1):
            return 500, {"job_id": job_id, "status": "failed",
                         "error": {"class": "infrastructure", "message": "the worker died"}}, {}
        if verdict == "busy_once" and attempt == 1:
            return 503, {"status": "failed", "error": {"class": "unavailable",
                                                       "message": "queue full"}}, \
                {"Retry-After": "0"}
        if verdict in ("infra_once", "busy_once"):
            return 200, _response(job_id, True, True, ok), {}
        if verdict == "reject":
            return 400, {"status": "failed", "error": {
                "class": "bad_request", "path": "kernel.metadata.solution.files[0].path",
                "message": "must be relative (got \"/etc/passwd\")"}}, {}
        if verdict == "bad_problem":
            return 400, {"status": "failed", "error": {
                "class": "bad_request", "path": "kernel.metadata.problem.test_files[0].path",
                "message": "must not contain '..'"}}, {}
        raise AssertionError(f"unknown verdict {verdict!r}")
