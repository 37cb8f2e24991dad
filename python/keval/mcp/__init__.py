"""keval's MCP server: evaluate and compare GPU kernels from an agent, through a keval daemon.

``python -m keval.mcp`` (or ``keval mcp``) runs it over stdio or streamable HTTP; see
docs/mcp.md. ``create_server(client)`` builds the server around a ``keval.Client``. The MCP
Python SDK (``pip install 'keval[mcp]'``) is imported only when a server is built, so this
package imports without it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_server", "main"]


def create_server(client: Any, **kwargs: Any) -> Any:
    """An ``mcp.server.mcpserver.MCPServer`` with keval's tools (see ``keval.mcp.server``)."""
    from .server import create_server as _create
    return _create(client, **kwargs)


def main(argv: Any = None) -> int:
    """``python -m keval.mcp``'s entry point; returns the exit code."""
    from .cli import main as _main
    return _main(argv)
