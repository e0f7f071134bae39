"""On a machine with an NVIDIA GPU (`make gpu-check`; every test here skips elsewhere, saying why): NVML's figures, the
local GPU target through ONNX Runtime's CUDA provider with NVML sampled during the run, and the edge-versus-GPU report
of this host's CPU (the board's stand-in, pinned) against its GPU on the same model. With GPU_CHECK_OUT=DIR the
reports are kept there (the device machine's $OUT).

Issue 24: batch 1 and batch BIG_BATCH on `local:?device=cuda&gpu=0` (a dynamic-batch resnet8 made with onnx tools,
tests/batchmodels.py), idle and above-idle energy, a GPU index past the last refused, and the boards-per-GPU line.
tests/host/test_gpu_batch.py checks the same code's arithmetic and options on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MODELS, ROOT

RESNET = MODELS / "resnet8" / "resnet8_int8.onnx"
BIG_BATCH = 64


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


@pytest.fixture(scope="module")
def dyn(tmp_path_factory) -> Path:
    pytest.importorskip("onnx", reason="make gpu-check installs onnx (tests/gpu/requirements-gpu.txt)")
    from batchmodels import dynamic_batch

    d = Path(os.environ.get("GPU_CHECK_OUT") or tmp_path_factory.mktemp("gpu"))
    return dynamic_batch(RESNET, d / "resnet8_int8_dynbatch.onnx")


def cuda_run(d: Path, name: str, url: str, model: Path, *more: str) -> dict:
    proc = edge_bench("run", "--target", url, "--model", str(model), *more, "--json", str(d / f"{name}.json"),
                      "--store", str(d / "gpu.sqlite"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    print(proc.stdout)
    return json.loads((d / f"{name}.json").read_text())


def test_batch_1_and_a_larger_batch_on_cuda_with_idle_and_above_idle_energy(gpu, dyn, tmp_path):
    cuda_provider()
    d = out_dir(tmp_path)
    one = cuda_run(d, "cuda-b1", "local:?device=cuda&gpu=0&batch=1", dyn, "--duration", "3")
    big = cuda_run(d, f"cuda-b{BIG_BATCH}", f"local:?device=cuda&gpu=0&batch={BIG_BATCH}", dyn, "--duration", "3")
    for doc, batch in ((one, 1), (big, BIG_BATCH)):
        assert doc["backend"]["device"] == "cuda" and not doc["backend"]["fallback"]
        assert doc["backend"]["details"]["provider"] == "CUDAExecutionProvider"
        assert doc["config"]["batch"] == batch
        g = doc["gpu"]
        assert g["index"] == 0 and g["batch"] == batch and g["cuda_device_order"]
        assert g["idle"]["power_w"] > 0 and g["idle"]["window_s"] >= 0.9, g["idle"]
        assert g["energy_j"] > 0 and "energy_above_idle_j" in g, g
        assert g["energy_per_sample_uj"] == pytest.approx(g["energy_per_inference_uj"] / batch, rel=0.02)
        if "samples_per_j_above_idle" in g:  # a run that drew more than idle (else its note says so)
            assert g["samples_per_j_above_idle"] > g["samples_per_j"]
        else:
            assert g["energy_above_idle_note"]
        n = doc["latency_us"]["count"] * batch
        assert doc["throughput_ips"] == pytest.approx(n / doc["wall_s"], rel=1e-6)  # samples per second
    # a GPU exists to batch: samples/s at batch 64 well above batch 1's on a model this small
    assert big["throughput_ips"] > 1.5 * one["throughput_ips"], (big["throughput_ips"], one["throughput_ips"])
    summary = {f"batch {b}": {k: doc["gpu"].get(k) for k in ("samples_per_s", "energy_j", "energy_above_idle_j",
               "energy_per_sample_uj", "energy_above_idle_per_sample_uj", "samples_per_j", "samples_per_j_above_idle",
               "idle")} | {"p50_us": doc["latency_us"]["p50"]} for b, doc in ((1, one), (BIG_BATCH, big))}  # fmt: skip
    (d / "batches.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


def test_a_gpu_index_past_the_last_is_one_line_and_exit_2(gpu, tmp_path):
    count = gpu.check()[0].nvmlDeviceGetCount()
    proc = edge_bench("run", "--target", f"local:?device=cuda&gpu={count}", "--model", str(RESNET), "--iterations",
                      "10", "--store", str(tmp_path / "s.sqlite"))  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("edge-bench: error: ") and f"GPU {count}: there are {count}" in lines[0], lines[0]


def test_the_boards_per_gpu_line(gpu, dyn, tmp_path):
    """This host's CPU pinned (the board, batch 1) against its GPU at batch BIG_BATCH, the same model file: the
    comparison says how many boards equal the GPU, in throughput and in samples per joule."""
    cuda_provider()
    d = out_dir(tmp_path)
    camp = d / "boards-per-gpu.toml"
    camp.write_text(f"""
[campaign]
name = "boards-per-gpu"
[[target]]
name = "cpu-pinned"
url = "local:"
cpus = "0"
[[target]]
name = "gpu-b{BIG_BATCH}"
url = "local:?device=cuda&gpu=0&batch={BIG_BATCH}"
[[model]]
name = "resnet8-dynbatch"
path = "{dyn}"
[[scenario]]
kind = "offline"
duration_s = 3
""")
    proc = edge_bench("run", str(camp), "--store", str(d / "gpu.sqlite"), "--json", str(d / "boards-per-gpu.json"),
                      "--md", str(d / "boards-per-gpu.md"))  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads((d / "boards-per-gpu.json").read_text())
    (comp,) = doc["edge_vs_server"]
    f = comp["boards_per_gpu"]
    assert f["batch"] == {"board": 1, "server": BIG_BATCH}
    assert f["boards_for_throughput"] > 0 and f["whole_boards"] >= 1
    assert f["samples_per_j"]["server_total"] > 0 and f["idle_w"] > 0
    assert "Boards per GPU: " in (d / "boards-per-gpu.md").read_text()
    print(proc.stdout, json.dumps(f, indent=1))
