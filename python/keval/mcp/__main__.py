"""``python -m keval.mcp``: keval's MCP server (``keval mcp`` runs this)."""

import sys

from keval.mcp.cli import main

if __name__ == "__main__":
    sys.exit(main())
