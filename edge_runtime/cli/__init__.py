"""`edge-runtime`: the board-side command line (one module per command; `main` maps errors to a line and a code)."""

from edge_runtime.cli.main import main

__all__ = ["main"]
