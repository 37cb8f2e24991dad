"""A small client of keval's daemon over its Unix socket, and a daemon started for one run.

Standard library only. ``UnixClient`` speaks HTTP/1.1 with JSON bodies to ``keval serve``;
``LocalDaemon`` starts ``keval serve`` in a temporary directory, waits until it answers
``GET /health`` and stops it again. The general client of keval's API is to come; this module is
the transport ``keval.compute_eval`` uses meanwhile, and is private.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

__all__ = [
    "DaemonError",
    "DaemonStartError",
    "LocalDaemon",
    "UnixClient",
    "UnixHTTPConnection",
    "find_keval_binary",
]

# AF_UNIX paths are limited to 108 bytes on Linux (sun_path), the terminating NUL included.
_MAX_SOCKET_PATH = 107


class DaemonError(RuntimeError):
    """The daemon could not be reached, or answered something that is not HTTP/JSON."""


class DaemonStartError(DaemonError):
    """``keval serve`` did not start: it exited, or did not answer ``GET /health`` in time."""


class UnixHTTPConnection(http.client.HTTPConnection):
    """``http.client.HTTPConnection`` over an ``AF_UNIX`` stream socket."""

    def __init__(self, socket_path: str, timeout: Optional[float] = None):
        # The host only fills the Host header; the daemon serves one host on its socket.
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if self.timeout is not None:
                sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


Response = Tuple[int, Dict[str, Any], Dict[str, str]]


class UnixClient:
    """HTTP/JSON requests to a daemon's Unix socket, one connection per request (thread-safe).

    Each method returns ``(status, body, headers)``: the HTTP status, the body parsed as a JSON
    object (a body that is not one is wrapped as ``{"raw": text}``) and the response headers with
    lower-case names. A socket that cannot be reached, a connection that breaks or times out
    raises ``DaemonError``.
    """

    def __init__(self, socket_path: str, timeout: Optional[float] = 30.0):
        self.socket_path = str(socket_path)
        self.timeout = timeout

    def post_json(self, path: str, body: Any, timeout: Optional[float] = None) -> Response:
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return self._request("POST", path, data, timeout)

    def get_json(self, path: str, timeout: Optional[float] = None) -> Response:
        return self._request("GET", path, None, timeout)

    def _request(self, method: str, path: str, data: Optional[bytes],
                 timeout: Optional[float]) -> Response:
        conn = UnixHTTPConnection(self.socket_path, timeout if timeout is not None else self.timeout)
        headers = {"Accept": "application/json", "Connection": "close"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=headers)
            res = conn.getresponse()
            raw = res.read()
            status = res.status
            res_headers = {k.lower(): v for k, v in res.getheaders()}
        except (OSError, http.client.HTTPException) as e:
            raise DaemonError(f"{method} {path} on {self.socket_path}: "
                              f"{type(e).__name__}: {e}") from e
        finally:
            conn.close()
        text = raw.decode("utf-8", errors="replace")
        try:
            body = json.loads(text) if text.strip() else {}
        except ValueError:
            body = {"raw": text}
        if not isinstance(body, dict):
            body = {"raw": text}
        return status, body, res_headers


def find_keval_binary(keval_bin: Optional[str] = None) -> str:
    """The ``keval`` executable: ``keval_bin``, else ``$KEVAL_BIN``, else ``keval`` on PATH."""
    candidate = keval_bin or os.environ.get("KEVAL_BIN") or shutil.which("keval")
    if not candidate:
        raise DaemonStartError("no keval binary: set KEVAL_BIN, or put keval on PATH "
                               "(a build has it in build/bin/keval)")
    if os.sep not in candidate:
        found = shutil.which(candidate)
        if found:
            candidate = found
    if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
        raise DaemonStartError(f"keval binary {candidate!r} is not an executable file")
    return candidate


def _tail(path: str, limit: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    if size > limit:
        text = "..." + text[text.find("\n") + 1:] if "\n" in text else "..." + text
    return text.strip()


class LocalDaemon:
    """``keval serve`` in a temporary state directory, for the length of a ``with`` block.

    >>> with LocalDaemon() as daemon:
    ...     status, body, _ = daemon.client().get_json("/health")

    The daemon runs as ``KEVAL serve --state-dir TMP --socket TMP/keval.sock [extra_args...]``
    (``KEVAL``: ``keval_bin``, else ``$KEVAL_BIN``, else ``keval`` on PATH); its stderr goes to
    ``TMP/daemon.log``. Entering waits, at most ``start_timeout`` seconds, for ``GET /health`` to
    answer 200; a daemon that exits first, or does not answer in time, raises
    ``DaemonStartError`` with the tail of its log. Leaving sends SIGTERM, then SIGKILL after
    ``stop_timeout`` seconds, and removes TMP unless ``keep_state``. The daemon is also sent
    SIGTERM when the thread that started it ends (Linux's PDEATHSIG), so start it from the main
    thread, or from one that outlives it.
    """

    def __init__(self, keval_bin: Optional[str] = None, extra_args: Iterable[str] = (),
                 start_timeout: float = 60.0, stop_timeout: float = 10.0,
                 keep_state: bool = False, env: Optional[Dict[str, str]] = None):
        self.keval_bin = keval_bin
        self.extra_args: List[str] = list(extra_args)
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.keep_state = keep_state
        self.env = env
        self.state_dir: Optional[str] = None
        self.socket_path: Optional[str] = None
        self.log_path: Optional[str] = None
        self.health: Dict[str, Any] = {}
        self._proc: Optional[subprocess.Popen] = None
        self._log = None

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> "LocalDaemon":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        binary = find_keval_binary(self.keval_bin)
        self.state_dir = _make_state_dir()
        self.socket_path = os.path.join(self.state_dir, "keval.sock")
        self.log_path = os.path.join(self.state_dir, "daemon.log")
        argv = [binary, "serve", "--state-dir", self.state_dir, "--socket", self.socket_path,
                *self.extra_args]
        self._log = open(self.log_path, "wb")
        try:
            # Its own session, so that a Ctrl-C at the terminal reaches this process, which then
            # stops the daemon in order; it dies with this process all the same (PDEATHSIG).
            self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                          stdout=self._log, stderr=self._log,
                                          env=self.env, start_new_session=True,
                                          preexec_fn=_die_with_parent())
        except OSError as e:
            self._cleanup()
            raise DaemonStartError(f"cannot start {binary}: {e}") from e
        try:
            self._wait_healthy(argv)
        except BaseException:
            self.stop()
            raise

    def _wait_healthy(self, argv: List[str]) -> None:
        assert self._proc is not None and self.socket_path is not None
        client = UnixClient(self.socket_path, timeout=5.0)
        deadline = time.monotonic() + self.start_timeout
        last_error = "no answer yet"
        while True:
            code = self._proc.poll()
            if code is not None:
                raise DaemonStartError(
                    f"keval serve exited with {_describe_exit(code)} before answering "
                    f"GET /health\ncommand: {' '.join(argv)}\n{self.log_tail() or '(no output)'}")
            if os.path.exists(self.socket_path):
                try:
                    status, body, _ = client.get_json("/health")
                    if status == 200:
                        self.health = body
                        return
                    last_error = f"GET /health answered {status}: {body}"
                except DaemonError as e:
                    last_error = str(e)
            if time.monotonic() >= deadline:
                raise DaemonStartError(
                    f"keval serve did not answer GET /health within {self.start_timeout:g} s "
                    f"({last_error})\ncommand: {' '.join(argv)}\n"
                    f"{self.log_tail() or '(no output)'}")
            time.sleep(0.1)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            except ProcessLookupError:
                pass
        self._cleanup()

    def _cleanup(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.state_dir and not self.keep_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    # -- use ---------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def client(self, timeout: Optional[float] = 30.0) -> UnixClient:
        if self.socket_path is None:
            raise DaemonError("the daemon is not started")
        return UnixClient(self.socket_path, timeout=timeout)

    def log_tail(self, limit: int = 4000) -> str:
        return _tail(self.log_path, limit) if self.log_path else ""


def _die_with_parent():
    """A preexec_fn that asks Linux to SIGTERM the child when this process dies, or None."""
    try:
        import ctypes
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)

    return preexec


def _make_state_dir() -> str:
    base = tempfile.gettempdir()
    # The socket must fit sun_path: fall back to /tmp when TMPDIR is deep.
    if len(os.path.join(base, "keval-daemon-xxxxxxxx", "keval.sock")) > _MAX_SOCKET_PATH:
        base = "/tmp"
    return tempfile.mkdtemp(prefix="keval-daemon-", dir=base)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
