"""`edge-runtime`: the board-side command line. Each command is a module (`add_arguments`, `run`) in a table with its
help line; `main()` hands the table to edge_runtime/program/main.py's `run_program`, which imports only the command
asked for (a one-shot `run` pays for no other command's imports, numpy included, before its work starts), turns
errors into one line and an exit code (0 ok, 1 failed check, 2 user error, 3 internal error, 4 the agent's state
directory deleted under it, 128+N after signal N), installs the signal handlers and guards the standard streams.
"""

from __future__ import annotations

import sys

from edge_runtime import __version__
from edge_runtime.program import main as program
from edge_runtime.program.args import PROG

# The order `--help` lists them in: module, help line.
COMMANDS = {
    "info": (
        "edge_runtime.cli.info",
        "backends, devices and delegates installed; CPUs and isolation; the board",
    ),
    "run": (
        "edge_runtime.cli.run",
        "load a model and run one inference (random inputs unless given)",
    ),
    "bench": (
        "edge_runtime.cli.bench",
        "measure latency and jitter on pinned CPUs, with the interference that caused them",
    ),
    "ops": (
        "edge_runtime.cli.ops",
        "per-op placement and time: where each op ran, its kernel and precision, its share; the verdict",
    ),
    "quantize": (
        "edge_runtime.cli.quantize",
        "FP32 ONNX -> INT8 with calibration data, checked against FP32, mixed precision",
    ),
    "thermal": (
        "edge_runtime.cli.thermal",
        "thermal zones, sensors, trip points, frequencies, power rails and headroom",
    ),
    "tune": (
        "edge_runtime.cli.tune",
        "audit CPU isolation (show), or apply/reset it with the system_tuning scripts (files: where they are)",
    ),
    "agent": (
        "edge_runtime.cli.agent",
        "serve a host over a serial port or TCP (models by hash, benches, results kept until acknowledged)",
    ),
    "serve": (
        "edge_runtime.cli.serve",
        "serve models over KServe v2 (REST and gRPC, as Triton), with a dynamic batcher and a thermal limit",
    ),
}


TEXTS = {
    "version": f"{PROG} {__version__}",
    "description": "On-device inference runtime: load, run and measure INT8 models.",
}


def build_parser(command: str | None = None):
    """edge-runtime's parser: every command with its flags (None), or only `command` (program.main.build_parser)."""
    return program.build_parser(PROG, COMMANDS, command, **TEXTS)


def main(argv: list[str] | None = None) -> int:
    return program.run_program(PROG, COMMANDS, argv, **TEXTS)


if __name__ == "__main__":
    sys.exit(main())
