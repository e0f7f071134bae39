"""`edge-bench`: the host-side command line. One module per command (`add_arguments`, `run`) in a table with its help
line; `main` hands the table to edge_runtime/program/main.py's `run_program`, as `edge-runtime` does: only the command
asked for is imported (`edge-bench report` loads no target), and errors become one line and an exit code (0 ok,
1 failed check or unreachable target, 2 user error, 3 internal error, 128+N after signal N)."""

from __future__ import annotations

import sys

from bench import __version__
from edge_runtime.program.main import run_program

PROG = "edge-bench"
# The order `--help` lists them in: module, help line.
COMMANDS = {
    "run": (
        "bench.cli.run",
        "run a campaign (CAMPAIGN.toml), or one bench on a target: --target URL --model PATH [bench options]",
    ),
    "targets": (
        "bench.cli.targets",
        "reachable? what board, CPUs, backends and versions, link quality; exit 1 if one is not reachable, 2 if one "
        "refused the token or cannot be used here",
    ),
    "compare": (
        "bench.cli.compare",
        "runs (several a side, pooled) or a baseline: changes against the spread between runs, exit 1 on regression",
    ),
    "report": (
        "bench.cli.report",
        "stored runs as a table, HTML with plots, Markdown, CSV or JSON (the latest when no RUN is given)",
    ),
    "baseline": (
        "bench.cli.baseline",
        "name a run as a baseline (set NAME RUN; --replace to move a name), list them, or show one",
    ),
}
DESCRIPTION = (
    "Host harness: drive boards (the agent over serial or TCP) and this machine (local:) through campaigns, keep every "
    "run in a store, check SLOs, compare runs and baselines, and report."
)


def main(argv: list[str] | None = None) -> int:
    return run_program(PROG, COMMANDS, argv, version=f"{PROG} {__version__}", description=DESCRIPTION, bare_ok=True)


if __name__ == "__main__":
    sys.exit(main())
