"""Helpers the tests share: the CLI in a child process, the one-line-error contract, and a bench run as a dict."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT

from edge_runtime.measure.bench import run_bench
from edge_runtime.measure.request import BenchRequest


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`edge-runtime ARGS` in a child process, from the checkout, with a deadline."""
    return subprocess.run(
        [sys.executable, "-m", "edge_runtime.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=180,
        env={**os.environ, **(env or {})},
    )


def assert_one_line_error(proc, *needles: str, code: int = 2) -> None:
    """The error contract: exit `code`, one line on stderr starting `edge-runtime: error: `, no traceback."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("edge-runtime: error: ")
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def request(model: str, **kw) -> BenchRequest:
    """A BenchRequest from test-friendly arguments (lists for CPU lists and stress specs; no crash-check child)."""
    if kw.get("cpus") is not None:
        kw["cpus"] = tuple(kw["cpus"])
    if "stress" in kw:
        kw["stress"] = tuple(kw["stress"])
    kw.setdefault("sandbox", False)
    return BenchRequest(model=str(model), **kw)


def bench(req: BenchRequest, root, progress=None) -> dict:
    """run_bench, its result as the JSON dict `edge-runtime bench --json` writes."""
    return run_bench(req, root, progress=progress).result.to_dict()
