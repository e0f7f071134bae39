"""Issue 26: perf_analyzer (tritonclient 2.41.0's C++ binary, through tests/servers/perf_analyzer.sh) drives the gRPC
face the way it drives Triton: it reads the model's metadata, config and statistics over gRPC, then sends requests at
a fixed concurrency. Against a dynamic-batch copy of resnet8 at concurrency 1 and 8, it must finish (rc 0) and report
a throughput above 0; short windows and loose stability, since only that it works is checked here, not a speed.
Skipped when .venv-perf or the libraries perf_analyzer loads are missing (the skip says how to build them)."""

from __future__ import annotations

import csv
import subprocess

import pytest
from batchmodels import dynamic_batch
from conftest import MODELS, need
from serverkit import perf_analyzer_path

from edge_runtime.serve.app import Settings, build_core

pytest.importorskip("grpc", reason="grpcio not installed: pip install 'edge-runtime[serve]'")
pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] not installed: pip install tritonclient[grpc]")
from edge_runtime.serve.grpc_server import start_grpc

DYN = "resnet8_int8_dynamic"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    need("onnxruntime")
    path = dynamic_batch(MODELS / "resnet8" / "resnet8_int8.onnx", tmp_path_factory.mktemp("models") / f"{DYN}.onnx")
    core = build_core([str(path)], Settings(max_batch=4, max_delay_us=2000, queue=64), {"backend": "onnxruntime"})
    lines: list[str] = []
    srv = start_grpc(core, log=lines.append)
    yield srv, core, lines
    srv.close(grace_s=5)
    core.close(timeout_s=10)


@pytest.mark.parametrize("concurrency", [1, 8])
def test_perf_analyzer_measures_the_grpc_face(server, tmp_path, concurrency):
    exe = perf_analyzer_path()
    srv, core, lines = server
    out = tmp_path / "pa.csv"
    args = ["-m", DYN, "-u", srv.address, "-i", "grpc", "--concurrency-range", f"{concurrency}:{concurrency}",
            "-p", "500", "-s", "80", "--max-trials", "6", "-f", str(out)]  # fmt: skip
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    with open(out, newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert int(row["Concurrency"]) == concurrency and float(row["Inferences/Second"]) > 0
    assert "Server:" in proc.stdout  # it read the server's statistics over gRPC, as it does Triton's
    stats = core.statistics(DYN)["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] > 0 and max(b["batch_size"] for b in stats["batch_stats"]) <= 4
    assert lines == []  # nothing it sent was refused
