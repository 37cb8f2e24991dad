"""``keval mcp`` / ``python -m keval.mcp``: run keval's MCP server against a daemon.

    python -m keval.mcp [--socket PATH | --url URL [--token-file F]] [--local]
                        [--transport stdio|streamable-http] [--host 127.0.0.1] [--port 8765]
                        [--http-token-file F | --no-http-auth] [--allow-remote]

stdio (the default) is what a desktop MCP client launches; streamable HTTP serves
``http://HOST:PORT/mcp``, on loopback unless ``--allow-remote``, and asks every request for
``Authorization: Bearer <token>`` (the token is in ``--http-token-file``, made on first use).
Exit codes: 0 done, 2 usage, 3 the ``mcp`` package or the daemon is missing.
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import os
import secrets
import socket
import sys
from typing import Any, Awaitable, Callable, Dict, List, Optional

__all__ = ["main"]

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3

_INSTALL_HINT = ("the MCP Python SDK is not installed: pip install 'keval[mcp]' "
                 "(or pip install 'mcp>=2,<3')")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="keval mcp",
        description="An MCP server whose tools evaluate and compare GPU kernels through a keval "
                    "daemon (evaluate_kernel, compare_kernels, get_job, cancel_job, "
                    "list_kernel_types, health). See docs/mcp.md.")
    where = p.add_argument_group("the daemon")
    where.add_argument("--socket", metavar="PATH",
                       help="the daemon's Unix socket (default: $KEVAL_SOCKET, else the socket a "
                            "plain `keval serve` uses)")
    where.add_argument("--url", metavar="URL",
                       help="a daemon's TCP address (keval serve --listen), http://HOST:PORT")
    where.add_argument("--token-file", metavar="F",
                       help="with --url: the daemon's bearer token file (keval serve "
                            "--token-file)")
    where.add_argument("--local", action="store_true",
                       help="start a daemon (KEVAL_BIN, else keval on PATH) when none answers on "
                            "the socket; it is stopped when this server exits")
    serve = p.add_argument_group("the MCP server")
    serve.add_argument("--transport", choices=("stdio", "streamable-http"), default="stdio",
                       help="stdio (default: for a client that launches this command) or "
                            "streamable-http (serves http://HOST:PORT/mcp)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="streamable-http: address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765,
                       help="streamable-http: port (default 8765; 0: a free one, named on "
                            "stderr)")
    serve.add_argument("--http-token-file", metavar="F",
                       help="streamable-http: the bearer token clients must send (made, mode "
                            "0600, when missing; default $TMPDIR/keval-<uid>/mcp/http.token)")
    serve.add_argument("--no-http-auth", action="store_true",
                       help="streamable-http: no bearer token (loopback only; any local user "
                            "can then reach the daemon through this server)")
    serve.add_argument("--allow-remote", action="store_true",
                       help="streamable-http: allow a --host that is not loopback")
    serve.add_argument("--max-wait", type=float, default=None, metavar="S",
                       help="seconds one tool call waits for its job before answering with the "
                            "job id to poll (default 600)")
    serve.add_argument("--log-level", default="WARNING",
                       choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
                       help="the server's log level, on stderr (default WARNING)")
    return p


def _fail(message: str, code: int) -> int:
    print(f"keval mcp: {message}", file=sys.stderr)
    return code


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def default_http_token_file() -> str:
    base = os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(base, f"keval-{os.getuid()}", "mcp", "http.token")


def load_or_create_token(path: str) -> str:
    """The token in ``path``; a missing file is made (32 random bytes as hex, mode 0600).

    An existing file must be this user's and private (no group or other bits), as the daemon
    requires of its own token file, and hold one token of 32 to 1024 visible ASCII characters.
    """
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(path):
        os.makedirs(directory, mode=0o700, exist_ok=True)
        token = secrets.token_hex(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(token + "\n")
        return token
    st = os.stat(path)
    if st.st_uid != os.getuid():
        raise ValueError(f"{path} belongs to uid {st.st_uid}, not to this user")
    if st.st_mode & 0o077:
        raise ValueError(f"{path} is readable by others (mode {st.st_mode & 0o777:o}); "
                         f"chmod 600 it")
    with open(path, "r", encoding="ascii", errors="replace") as f:
        token = f.read().strip()
    if not (32 <= len(token) <= 1024) or any(not (33 <= ord(c) <= 126) for c in token):
        raise ValueError(f"{path} must hold one token of 32 to 1024 visible ASCII characters")
    return token


ASGIApp = Callable[[Dict[str, Any], Callable[[], Awaitable[Dict[str, Any]]],
                    Callable[[Dict[str, Any]], Awaitable[None]]], Awaitable[None]]


class BearerTokenMiddleware:
    """ASGI: every HTTP request must carry ``Authorization: Bearer <token>``, else 401."""

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self.token = token.encode("ascii")

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            given = b""
            for name, value in scope.get("headers") or []:
                if name.lower() == b"authorization":
                    given = value
                    break
            scheme, _, credential = given.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(credential.strip(),
                                                                      self.token):
                body = (b'{"error": "unauthorized", "message": "send Authorization: Bearer '
                        b'<token> (keval mcp --http-token-file)"}')
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b"Bearer"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def _connect(args: argparse.Namespace):
    """The ``keval.Client`` the options name."""
    import keval
    if args.url:
        if args.local:
            raise ValueError("--local starts a daemon on a Unix socket: not with --url")
        return keval.Client(url=args.url, token_file=args.token_file)
    if args.local:
        return keval.Client.local(socket_path=args.socket)
    return keval.Client(socket_path=args.socket)


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def _serve_http(server: Any, args: argparse.Namespace, token: Optional[str],
                sock: socket.socket, banner: str) -> None:
    import anyio
    import uvicorn

    app = server.streamable_http_app(host=args.host)
    if token is not None:
        app = BearerTokenMiddleware(app, token)
    config = uvicorn.Config(app, log_level=args.log_level.lower(), lifespan="on")
    # The socket already listens, so a client that read the banner can connect at once.
    print(banner, file=sys.stderr, flush=True)
    anyio.run(lambda: uvicorn.Server(config).serve(sockets=[sock]))


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.url and args.socket:
        return _fail("give --socket or --url, not both", EXIT_USAGE)
    if args.token_file and not args.url:
        return _fail("--token-file is for a daemon's TCP address: give --url too", EXIT_USAGE)
    http = args.transport == "streamable-http"
    if http and not _is_loopback(args.host) and not args.allow_remote:
        return _fail(f"--host {args.host} is not loopback: anyone who can reach it could run "
                     f"code through the daemon; add --allow-remote to mean it", EXIT_USAGE)
    if http and args.no_http_auth and not _is_loopback(args.host):
        return _fail("--no-http-auth is for loopback only", EXIT_USAGE)
    if not (0 <= args.port < 65536):
        return _fail(f"--port {args.port}: want 0 (any free port) to 65535", EXIT_USAGE)

    try:
        import mcp  # noqa: F401
        from mcp.server.mcpserver import MCPServer  # noqa: F401
    except ImportError as e:
        return _fail(f"{_INSTALL_HINT} ({e})", EXIT_UNAVAILABLE)
    import keval
    from .server import DEFAULT_MAX_WAIT, create_server

    token = None
    if http and not args.no_http_auth:
        token_file = args.http_token_file or default_http_token_file()
        try:
            token = load_or_create_token(token_file)
        except (OSError, ValueError) as e:
            return _fail(f"--http-token-file: {e}", EXIT_USAGE)

    try:
        client = _connect(args)
    except keval.DaemonUnavailable as e:
        return _fail(f"cannot start a daemon: {e}", EXIT_UNAVAILABLE)
    except (keval.KevalError, ValueError) as e:
        return _fail(str(e), EXIT_USAGE)
    try:
        server = create_server(client, where=client.address,
                               max_wait=args.max_wait or DEFAULT_MAX_WAIT,
                               version=getattr(keval, "__version__", ""),
                               log_level=args.log_level)
        if http:
            try:
                sock = _listen(args.host, args.port)
            except OSError as e:
                return _fail(f"cannot listen on {args.host}:{args.port}: {e}", EXIT_USAGE)
            port = sock.getsockname()[1]
            host = f"[{args.host}]" if ":" in args.host else args.host
            auth = (f"bearer token in {token_file}" if token is not None else
                    "no authentication")
            banner = (f"keval mcp: listening on http://{host}:{port}/mcp ({auth}); daemon "
                      f"{client.address}")
            with sock:
                _serve_http(server, args, token, sock, banner)
        else:
            server.run("stdio")
    except KeyboardInterrupt:
        pass
    finally:
        client.close()
    return 0
