"""Co-runners (edge_runtime/measure/corunners.py): stress that leaves nothing to measure, a stress tool that
never starts."""

from __future__ import annotations

import os

from conftest import artifact, need
from helpers import assert_one_line_error, cli

MODEL = artifact("digits_cnn", "_int8.onnx")


def test_stress_on_every_cpu_leaves_nothing_to_measure():
    need("onnxruntime")
    every = f"0-{os.cpu_count() - 1}"
    assert_one_line_error(
        cli("bench", MODEL, "--stress", f"cpu:{every}", "--iterations", "5"), "none is left to measure"
    )


def test_a_stress_tool_that_never_starts_fails_the_run():
    need("onnxruntime")
    env = {**os.environ, "EDGE_RUNTIME_STRESS_TOOL": "stress-ng", "PATH": "/nonexistent"}
    proc = cli("bench", MODEL, "--cpus", "1", "--stress", "cpu:0", "--iterations", "10", env=env)
    assert_one_line_error(proc, "--stress: the stress-ng co-runner exited at once")
