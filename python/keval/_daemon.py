"""The transport under ``keval.Client``: HTTP/JSON to ``keval serve``, and a daemon of our own.

Standard library only. ``UnixClient`` speaks HTTP/1.1 with JSON bodies to ``keval serve`` over
its Unix socket, ``TcpClient`` over TCP with the bearer token; ``LocalDaemon`` starts
``keval serve`` in a temporary directory, waits until it answers ``GET /health`` and stops it
again. Private: ``keval.Client`` is the public face; ``keval.compute_eval`` uses these directly.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
from typing import Any, Dict, Iterable, List, Optional, Tuple

__all__ = [
    "DaemonError",
    "DaemonStartError",
    "LocalDaemon",
    "TcpClient",
    "UnixClient",
    "UnixHTTPConnection",
    "WAIT_FOREVER",
    "default_socket_path",
    "find_keval_binary",
    "read_token_file",
]

# A per-request timeout meaning "no limit" (None means "the client's default" below): a
# synchronous /evaluate lasts as long as the job, queueing included, which has no bound.
WAIT_FOREVER = float("inf")

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


class _JsonHTTPClient:
    """HTTP/JSON requests, one connection per request (so one object serves many threads).

    Each method returns ``(status, body, headers)``: the HTTP status, the body parsed as a JSON
    object (a body that is not one is wrapped as ``{"raw": text}``) and the response headers with
    lower-case names. A daemon that cannot be reached, a connection that breaks or times out
    raises ``DaemonError``. ``timeout`` per call: None for the client's, ``WAIT_FOREVER`` for none.
    """

    timeout: Optional[float]

    def post_json(self, path: str, body: Any, timeout: Optional[float] = None,
                  headers: Optional[Dict[str, str]] = None) -> Response:
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return self._request("POST", path, data, timeout, headers)

    def get_json(self, path: str, timeout: Optional[float] = None,
                 headers: Optional[Dict[str, str]] = None) -> Response:
        return self._request("GET", path, None, timeout, headers)

    def delete_json(self, path: str, timeout: Optional[float] = None,
                    headers: Optional[Dict[str, str]] = None) -> Response:
        return self._request("DELETE", path, None, timeout, headers)

    # -- to override -------------------------------------------------------------------------
    def _connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        raise NotImplementedError

    def _extra_headers(self) -> Dict[str, str]:
        return {}

    def describe(self) -> str:
        raise NotImplementedError

    def _request(self, method: str, path: str, data: Optional[bytes],
                 timeout: Optional[float], extra: Optional[Dict[str, str]] = None) -> Response:
        if timeout is None:
            timeout = self.timeout
        if timeout is not None and timeout == WAIT_FOREVER:
            timeout = None
        conn = self._connection(timeout)
        headers = {"Accept": "application/json", "Connection": "close"}
        headers.update(self._extra_headers())
        if data is not None:
            # Over TCP the daemon refuses any other type (a browser's cross-site POST guard).
            headers["Content-Type"] = "application/json"
        if extra:
            headers.update(extra)
        try:
            conn.request(method, path, body=data, headers=headers)
            res = conn.getresponse()
            raw = res.read()
            status = res.status
            res_headers = {k.lower(): v for k, v in res.getheaders()}
        except (OSError, http.client.HTTPException) as e:
            raise DaemonError(f"{method} {path} on {self.describe()}: "
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


class UnixClient(_JsonHTTPClient):
    """HTTP/JSON requests to a daemon's Unix socket (see ``_JsonHTTPClient``)."""

    def __init__(self, socket_path: str, timeout: Optional[float] = 30.0):
        self.socket_path = str(socket_path)
        self.timeout = timeout

    def _connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        return UnixHTTPConnection(self.socket_path, timeout)

    def describe(self) -> str:
        return self.socket_path


class TcpClient(_JsonHTTPClient):
    """HTTP/JSON requests to a daemon's ``--listen`` address, with ``Authorization: Bearer``.

    ``url`` is ``http://HOST:PORT`` (``https://`` works too, for a daemon behind a TLS proxy).
    """

    def __init__(self, url: str, token: Optional[str] = None, timeout: Optional[float] = 30.0):
        parsed = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"url: want http://HOST:PORT, got {url!r}")
        self.url = url
        self.scheme = parsed.scheme
        self.host = parsed.hostname
        self.port = parsed.port
        # A path prefix, for a daemon mounted under one behind a proxy.
        self.prefix = parsed.path.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)

    def _extra_headers(self) -> Dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _request(self, method, path, data, timeout, extra=None):
        return super()._request(method, self.prefix + path, data, timeout, extra)

    def describe(self) -> str:
        return self.url


def retry_after_seconds(headers: Dict[str, str]) -> Optional[float]:
    """A ``Retry-After`` header (lower-case key, as the clients keep headers) in seconds from now:
    delay-seconds or an HTTP date; None when absent or unreadable."""
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return email.utils.parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError, IndexError):
        return None


def read_token_file(path: str) -> str:
    """The bearer token in ``path`` (``keval serve --token-file``), surrounding blanks dropped."""
    with open(path, "r", encoding="ascii", errors="replace") as f:
        token = f.read().strip()
    if not token:
        raise ValueError(f"token file {path} is empty")
    return token


def default_socket_path() -> str:
    """Where a plain ``keval serve`` listens, found as it finds it: ``$KEVAL_SOCKET``, else
    ``STATE/daemon/keval.sock`` with STATE ``$KEVAL_STATE_DIR``, else ``${TMPDIR:-/tmp}/keval-<uid>``."""
    env = os.environ.get("KEVAL_SOCKET")
    if env:
        return env
    state = os.environ.get("KEVAL_STATE_DIR") or os.path.join(
        os.environ.get("TMPDIR") or "/tmp", f"keval-{os.getuid()}")
    return os.path.join(state, "daemon", "keval.sock")


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

    ``state_dir`` runs it in that directory instead (created if missing, never removed), and
    ``socket_path`` serves that socket. With ``--listen HOST:PORT`` among ``extra_args`` (port 0:
    any free one), ``tcp_url`` is the address it reported and ``token_file`` its bearer token's.
    """

    def __init__(self, keval_bin: Optional[str] = None, extra_args: Iterable[str] = (),
                 start_timeout: float = 60.0, stop_timeout: float = 10.0,
                 keep_state: bool = False, env: Optional[Dict[str, str]] = None,
                 state_dir: Optional[str] = None, socket_path: Optional[str] = None):
        self.keval_bin = keval_bin
        self.extra_args: List[str] = list(extra_args)
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.keep_state = keep_state or state_dir is not None
        self.env = env
        self._given_state_dir = state_dir
        self._given_socket_path = socket_path
        self.state_dir: Optional[str] = None
        self.socket_path: Optional[str] = None
        self.log_path: Optional[str] = None
        self.tcp_url: Optional[str] = None
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
        if self._given_state_dir:
            self.state_dir = os.path.abspath(self._given_state_dir)
            os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        else:
            self.state_dir = _make_state_dir()
        self.socket_path = self._given_socket_path or os.path.join(self.state_dir, "keval.sock")
        if len(os.fsencode(self.socket_path)) > _MAX_SOCKET_PATH:
            self._cleanup()
            raise DaemonStartError(f"socket path {self.socket_path!r} is longer than the "
                                   f"{_MAX_SOCKET_PATH} bytes a Unix socket's name may have")
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
                        self.tcp_url = self._reported_tcp_url()
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

    @property
    def token_file(self) -> Optional[str]:
        """The TCP bearer token's file: ``--token-file`` if given, else ``STATE/keys/tcp.token``."""
        args = self.extra_args
        for i, arg in enumerate(args):
            if arg == "--token-file" and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith("--token-file="):
                return arg.split("=", 1)[1]
        return os.path.join(self.state_dir, "keys", "tcp.token") if self.state_dir else None

    def _reported_tcp_url(self) -> Optional[str]:
        # The daemon logs "serving on unix:PATH and tcp:HOST:PORT" before it answers /health;
        # the log is the only place that says which port --listen HOST:0 got.
        if not self.log_path or not any(a == "--listen" or a.startswith("--listen=")
                                        for a in self.extra_args):
            return None
        match = re.search(r" and tcp:(\S+):(\d+) ", _tail(self.log_path, 1 << 16))
        if not match:
            return None
        host = match.group(1)
        return f"http://[{host}]:{match.group(2)}" if ":" in host else \
            f"http://{host}:{match.group(2)}"


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
