"""Issue 26: perf_analyzer (tritonclient 2.41.0's C++ binary, tests/servers/perf_analyzer.sh) drives the REST face as
it drives Triton: it reads the server's and the model's metadata, the model's config and its statistics, then sends
binary tensors at concurrency 1 and 8. Short windows and a loose stability rule: this checks that it completes and
measures something, not how fast.
"""

from __future__ import annotations

import csv
import subprocess

import pytest
from batchmodels import dynamic_batch
from conftest import MODELS, need

DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    need("onnxruntime")
    pytest.importorskip("onnx")
    from edge_runtime.serve.app import Settings, build_core
    from edge_runtime.serve.http_server import start_http

    model = dynamic_batch(DIGITS, tmp_path_factory.mktemp("models") / "digits_dyn.onnx")
    core = build_core([str(model)], Settings(max_batch=4, max_delay_us=500, queue=64), {"backend": "onnxruntime"})
    lines: list[str] = []
    srv = start_http(core, log=lines.append)
    yield srv, lines
    srv.close()
    core.close()


@pytest.mark.parametrize("concurrency", [1, 8])
def test_perf_analyzer_over_http_completes_with_a_throughput(server, tmp_path, concurrency):
    from serverkit import perf_analyzer_path

    exe = perf_analyzer_path()  # skips, in one line, when .venv-perf or libb64 is missing
    srv, lines = server
    out = tmp_path / "pa.csv"
    args = ["-m", "digits_dyn", "-u", f"127.0.0.1:{srv.port}", "-i", "http", "-f", str(out),
            "--concurrency-range", f"{concurrency}:{concurrency}", "-p", "500", "-r", "5", "-s", "80"]  # fmt: skip
    run = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    with open(out, newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert float(row["Inferences/Second"]) > 0
    assert "Throughput:" in run.stdout
    assert lines == []  # nothing perf_analyzer asked for was refused
