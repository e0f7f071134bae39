"""The Prometheus textfile output (edge_runtime/files/prom.py)."""

from __future__ import annotations

import signal
import subprocess

from conftest import artifact, need
from helpers import cli, cli_child, end, read_until

MODEL = artifact("digits_cnn", "_int8.onnx")


def test_a_partial_run_is_marked_in_the_prometheus_file(tmp_path):
    need("onnxruntime")
    prom = tmp_path / "r.prom"
    proc = cli_child("bench", str(MODEL), "--duration", "30", "--prom", str(prom), stdout=subprocess.DEVNULL)
    try:
        read_until(proc, "measuring")
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        end(proc)
    text = prom.read_text()
    assert "edge_runtime_run_complete{" in text and text.split("edge_runtime_run_complete{")[1].split()[1] == "0.0"
    assert 'kind="interrupted"' in text
    full = tmp_path / "full.prom"
    assert cli("bench", MODEL, "--iterations", "50", "--prom", full).returncode == 0
    assert full.read_text().split("edge_runtime_run_complete{")[1].split()[1] == "1.0"
