"""On a machine with an NVIDIA GPU (`make gpu-check`; every test here skips elsewhere, saying why): NVML's figures, the
local GPU target through ONNX Runtime's CUDA provider with NVML sampled during the run, and the edge-versus-GPU report
of this host's CPU (the board's stand-in, pinned) against its GPU on the same model. With GPU_CHECK_OUT=DIR the
reports are kept there (the device machine's $OUT)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MODELS, ROOT

RESNET = MODELS / "resnet8" / "resnet8_int8.onnx"


@pytest.fixture(scope="module")
def gpu():
    from bench.metrics import nvml
    from edge_runtime.errors import UserError

    try:
        nvml.check()
    except UserError as err:
        pytest.skip(f"{err.one_line()}: these checks need an NVIDIA GPU")
    return nvml


def cuda_provider() -> None:
    try:
        import onnxruntime as ort
    except ImportError:
        pytest.skip("onnxruntime is not installed (make gpu-check installs onnxruntime-gpu)")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        why = "make gpu-check installs onnxruntime-gpu"
        pytest.skip(f"onnxruntime {ort.__version__} has no CUDAExecutionProvider ({why})")


def out_dir(tmp_path: Path) -> Path:
    d = Path(os.environ.get("GPU_CHECK_OUT") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


def edge_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=900)  # fmt: skip


def test_nvml_reads_the_gpu(gpu):
    s = gpu.GpuSampler()
    s.start()
    import time

    time.sleep(1.2)
    s.stop()
    summary = s.summary(inferences=100)
    assert summary["samples"] >= 3 and summary["name"] and summary["memory_total_bytes"] > 0
    assert "utilization_pct" in summary and "memory_used_bytes" in summary and "temperature_c" in summary
    print(json.dumps({k: v for k, v in summary.items() if k != "timeline"}, indent=1))


def test_the_local_gpu_target_runs_on_cuda_with_nvml_sampled(gpu, tmp_path):
    cuda_provider()
    d = out_dir(tmp_path)
    proc = edge_bench("run", "--target", "local:?device=cuda", "--model", str(RESNET), "--iterations", "3000",
                      "--json", str(d / "cuda.json"), "--store", str(d / "gpu.sqlite"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((d / "cuda.json").read_text())
    assert doc["backend"]["device"] == "cuda" and not doc["backend"]["fallback"]
    g = doc["gpu"]
    assert g["available"] and g["samples"] >= 1
    print(proc.stdout, json.dumps({k: v for k, v in g.items() if k != "timeline"}, indent=1))


def test_the_edge_versus_gpu_report(gpu, tmp_path):
    cuda_provider()
    d = out_dir(tmp_path)
    camp = d / "edge-vs-gpu.toml"
    camp.write_text(f"""
[campaign]
name = "edge-vs-gpu"
[[target]]
name = "cpu-pinned"
url = "local:"
cpus = "0"
[[target]]
name = "gpu"
url = "local:?device=cuda"
[[model]]
name = "resnet8"
path = "{RESNET}"
[[scenario]]
iterations = 3000
[slo]
p99_ms = 5
""")
    proc = edge_bench("run", str(camp), "--store", str(d / "gpu.sqlite"), "--json", str(d / "edge-vs-gpu.json"),
                      "--md", str(d / "edge-vs-gpu.md"), "--html", str(d / "edge-vs-gpu.html"))  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr  # an SLO missed is a finding here, not a failed check
    doc = json.loads((d / "edge-vs-gpu.json").read_text())
    (comp,) = doc["edge_vs_server"]
    assert comp["board"] == "cpu-pinned" and comp["server"] == "gpu"
    assert comp["budget"]["server"]["compute_ms"] is not None and comp["crossover_rtt_ms"]["p50"] is not None
    assert "## Edge vs server" in (d / "edge-vs-gpu.md").read_text()
    print(proc.stdout)
