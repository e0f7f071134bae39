"""The measurement engine against OpenVINO's own benchmark_app, and pinning under load, as interleaved ratios.

1. `edge-runtime bench` and `benchmark_app` (-hint none -nthreads 1 -nstreams 1 -api sync, f32 precision as ours) on
   the same model, interleaved A B A B: ratio of their median latencies. Goal: within 5%.
2. p99.9 with and without `--cpus 1` while `--stress cpu:0` loads the other CPU, interleaved: ratio pinned /
   unpinned, reported (on a 2-CPU machine the scheduler already keeps an unpinned run off the loaded CPU).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, artifact, need

from .conftest import report_ratio

ROUNDS = 4


def edge_bench(*args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "edge_runtime.cli", "bench", *args, "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def benchmark_app_median_us(model: str, iterations: int) -> float:
    exe = shutil.which("benchmark_app") or str(ROOT / ".venv" / "bin" / "benchmark_app")
    proc = subprocess.run(
        [
            exe,
            "-m",
            model,
            "-d",
            "CPU",
            "-hint",
            "none",
            "-nthreads",
            "1",
            "-nstreams",
            "1",
            "-api",
            "sync",
            "-niter",
            str(iterations),
            "-infer_precision",
            "f32",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    m = re.search(r"Median:\s*([\d.]+)\s*(us|ms)", proc.stdout)
    assert m, proc.stdout[-2000:]
    return float(m.group(1)) * (1000.0 if m.group(2) == "ms" else 1.0)


@pytest.mark.parametrize("name", ["resnet8", "mobilenet_v1_025_vww"])
def test_edge_bench_vs_benchmark_app(benchmark, name):
    """benchmark_app reports InferRequest.latency, timed inside the runtime; edge-runtime times the call as the
    application makes it, so the Python/pybind boundary (~3 us here) is in ours and not in theirs: it shows on the
    ~50 us resnet8 and fades on the larger MobileNet."""
    need("openvino")
    model = str(artifact(name, "_int8.xml"))
    n = 3000 if name == "resnet8" else 1000
    ours, theirs = [], []

    def one_round():
        k = len(ours)
        order = (0, 1) if k % 2 == 0 else (1, 0)  # A B, B A, ...
        for side in order:
            if side == 0:
                ours.append(edge_bench(model, "--threads", "1", "--iterations", str(n))["latency_us"]["p50"])
            else:
                theirs.append(benchmark_app_median_us(model, n))

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    report_ratio(
        benchmark,
        f"{name} int8 openvino: edge-runtime bench / benchmark_app (p50)",
        theirs,
        ours,
        goal=1.05,
        goal_low=0.95,
    )
    assert len(ours) == len(theirs) == ROUNDS


def test_p999_pinned_vs_unpinned_under_stress(benchmark):
    need("onnxruntime")
    if not shutil.which("stress-ng"):
        pytest.skip("stress-ng not installed (the built-in hog would do, but results are only comparable with one)")
    model = str(artifact("resnet8", "_int8.onnx"))
    common = ["--threads", "1", "--iterations", "5000", "--stress", "cpu:0"]
    pinned, unpinned = [], []

    def one_round():
        k = len(pinned)
        runs = [("pinned", ["--cpus", "1"]), ("unpinned", [])]
        for label, extra in runs if k % 2 == 0 else runs[::-1]:
            p999 = edge_bench(model, *common, *extra)["latency_us"]["p999"]
            (pinned if label == "pinned" else unpinned).append(p999)

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    # the issue asks for the figures; on an isolated core pinned should be lower
    report_ratio(benchmark, "resnet8 int8 ort p99.9 under cpu stress: --cpus 1 / unpinned", unpinned, pinned, None)
    assert len(pinned) == len(unpinned) == ROUNDS
