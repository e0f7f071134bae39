"""Signals to a command (SIGTERM, SIGINT): what it keeps and what it writes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, artifact, need
from helpers import cli_child, read_until, strict_json

MODEL = artifact("digits_cnn", "_int8.onnx")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_run_writes_its_partial_result(tmp_path, sig, code):
    need("onnxruntime")
    out = tmp_path / "r.json"
    proc = cli_child("bench", str(MODEL), "--duration", "60", "--json", str(out))
    try:
        deadline = time.monotonic() + 60
        line = ""
        while "measuring" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
        assert "measuring" in line
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    r = strict_json(out.read_text())
    name = signal.Signals(sig).name
    assert r["aborted"] == {
        "kind": "interrupted",
        "reason": f"interrupted by {name}",
        "signal": name,
        "at_s": r["aborted"]["at_s"],
        "partial": True,
    }
    assert r["latency_us"]["count"] > 0 and 0.5 < r["wall_s"] < 30
    assert f"interrupted by {name}: partial result written" in err


def test_an_interrupt_before_measuring_writes_nothing(tmp_path):
    need("openvino")
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edge_runtime.cli",
            "bench",
            str(artifact("mobilenet_v1_025_vww", "_int8.xml")),
            "--warmup-time",
            "30",
            "--iterations",
            "10",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    read_until(proc, "warming up")  # "warming up: 30 s": the session is loaded, nothing measured yet
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert not out.exists() and "interrupted (SIGTERM)" in err
