"""Issue 24, the GPU side as a GPU is used, on what runs without a GPU: `local:?batch=N` and the offline scenario's
batches on ONNX Runtime CPU (a dynamic-batch resnet8 made with onnx tools, tests/batchmodels.py), the `gpu=N`
option's checks, NVML's idle and above-idle energy arithmetic on an NVML capture's shape
(tests/data/nvml-h200-shaped-synthetic.json: no real capture holds idle readings, so it is synthetic and says so),
and the edge-vs-server report's boards-per-GPU line from real local records. tests/gpu runs the rest on a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from batchmodels import dynamic_batch
from conftest import MODELS, ROOT, need
from helpers import assert_one_line_error

from bench.metrics.nvml import energy_figures, idle_power, window_summary
from bench.report import edge_vs_server
from bench.targets.local import LocalTarget, parse_local
from bench.targets.local_gpu import on_gpu
from edge_runtime.errors import UserError
from edge_runtime.measure.request import BenchRequest

RESNET = MODELS / "resnet8" / "resnet8_int8.onnx"
CAPTURE = ROOT / "tests" / "data" / "nvml-h200-shaped-synthetic.json"


@pytest.fixture(scope="module")
def dyn(tmp_path_factory) -> Path:
    need("onnxruntime")
    pytest.importorskip("onnx")
    return dynamic_batch(RESNET, tmp_path_factory.mktemp("models") / "resnet8_int8_dynbatch.onnx")


def edge_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=180)  # fmt: skip


# ------------------------------------------------------------------------------------------------ the URL options
@pytest.mark.parametrize(
    "url, opts",
    [
        ("local:?batch=32", {"batch": 32}),
        ("local:?device=cuda&gpu=1", {"device": "cuda", "gpu": 1}),
        ("local:?device=TensorRT&gpu=0&batch=8", {"device": "TensorRT", "gpu": 0, "batch": 8}),
    ],
)
def test_batch_and_gpu_parse(url, opts):
    assert parse_local(url) == opts


@pytest.mark.parametrize(
    "url, words",
    [
        ("local:?gpu=1", "gpu=1 picks an NVIDIA GPU: it needs device=cuda or device=tensorrt"),
        ("local:?device=cpu&gpu=0", "needs device=cuda"),
        ("local:?device=cuda&gpu=-1", "gpu '-1': a whole number 0 to 63"),
        ("local:?device=cuda&gpu=one", "gpu 'one'"),
        ("local:?batch=0", "batch '0': a whole number 1 to 4096"),
        ("local:?batch=4097", "batch '4097'"),
        ("local:?batch=2.5", "batch '2.5'"),
    ],
)
def test_bad_batch_and_gpu_options_are_one_line(url, words):
    with pytest.raises(UserError) as err:
        parse_local(url)
    assert words in err.value.one_line() and "\n" not in err.value.one_line()


def test_gpu_n_is_the_providers_device_id_and_orders_cuda_by_pci_bus(monkeypatch):
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    req = on_gpu(BenchRequest(str(RESNET), device="cuda"), 1, "local:?device=cuda&gpu=1")
    assert req.options == {"device_id": "1"} and os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")  # the user's own order is kept
    on_gpu(BenchRequest(str(RESNET), device="cuda"), 1, "u")
    assert os.environ["CUDA_DEVICE_ORDER"] == "FASTEST_FIRST"
    from bench.targets.base import TargetError

    with pytest.raises(TargetError, match="gpu=1 and the option device_id=0 name different GPUs"):
        on_gpu(BenchRequest(str(RESNET), device="cuda", options={"device_id": "0"}), 1, "u")


def test_a_gpu_this_host_lacks_is_one_line_and_exit_2_before_anything_runs(tmp_path):
    """No NVIDIA driver here: NVML cannot tell the index, so the refusal names what is missing (tests/gpu checks an
    index past the last GPU on a GPU machine)."""
    proc = edge_bench("run", "--target", "local:?device=cuda&gpu=3", "--model", RESNET, "--iterations", "10",
                      "--store", tmp_path / "s.sqlite")  # fmt: skip
    assert_one_line_error(proc, "no NVIDIA GPU", program="edge-bench")
    assert proc.stdout == ""  # nothing measured, nothing printed


def test_the_request_says_its_batch_only_when_asked():
    """An agent that predates batches reads a request without one (the key is left out when unset)."""
    assert "batch" not in BenchRequest(str(RESNET)).to_dict()
    req = BenchRequest.from_json({**BenchRequest(str(RESNET)).to_dict(), "batch": 8})
    assert req.batch == 8
    for bad, words in ((0, "batch 0: must be 1 to 4,096"), (True, "not a whole number")):
        with pytest.raises(UserError, match=words):
            BenchRequest(str(RESNET), batch=bad).validate()
    with pytest.raises(UserError, match="samples_per_query 6 is not a whole number of batches of 4"):
        BenchRequest(str(RESNET), batch=4, scenario="offline", samples_per_query=6).validate()


# ------------------------------------------------------------------------------------------------ batches on CPU
def test_local_batch_runs_n_samples_per_inference_and_counts_samples(dyn, tmp_path):
    out = tmp_path / "b8.json"
    proc = edge_bench("run", "--target", "local:?batch=8", "--model", dyn, "--iterations", "200", "--json", out,
                      "--store", tmp_path / "s.sqlite")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["config"]["batch"] == 8 and doc["latency_us"]["count"] == 200  # latency per batch: 200 timed calls
    assert doc["throughput_ips"] == pytest.approx(200 * 8 / doc["wall_s"], rel=1e-6)  # samples, not inferences
    assert "samples/s at batch 8 (latency per batch)" in proc.stdout


def test_a_batch_on_a_model_with_a_fixed_batch_of_1_is_one_line_naming_its_shape(tmp_path):
    need("onnxruntime")
    proc = edge_bench("run", "--target", "local:?batch=4", "--model", RESNET, "--iterations", "10",
                      "--store", tmp_path / "s.sqlite")  # fmt: skip
    assert_one_line_error(proc, "batch 4", "fixed batch of 1", "shape [1, 32, 32, 3]", program="edge-bench")


def test_the_offline_scenarios_queries_run_as_batches(dyn):
    """Offline at batch 4: a query is one batch of 4 unless samples_per_query says more (a whole number of
    batches); throughput counts samples. Run by the local target, as a campaign's offline scenario is."""
    target = LocalTarget("local:?batch=4")
    one = target.bench(BenchRequest(str(dyn), scenario="offline", iterations=60)).result
    assert one["config"]["batch"] == 4 and one["scenario"]["samples_per_query"] == 4
    assert one["scenario"]["queries"] == 60
    assert one["throughput_ips"] == pytest.approx(60 * 4 / one["wall_s"], rel=1e-6)
    two = target.bench(BenchRequest(str(dyn), scenario="offline", samples_per_query=8, iterations=60)).result
    assert two["scenario"]["samples_per_query"] == 8 and two["throughput_ips"] == pytest.approx(
        60 * 8 / two["wall_s"], rel=1e-6
    )


def test_a_query_of_several_batches_runs_that_many_inferences():
    """The schedule's side of it, counted exactly: 10 offline queries of 8 samples at batch 4 are 20 inferences
    (after the warm-up's 3), and the query's samples stay 8 for the record."""
    from edge_runtime.measure.schedule import measure_open_loop, plan_for

    calls = []
    req = BenchRequest(str(RESNET), scenario="offline", samples_per_query=8, batch=4, iterations=10).validate()
    plan = plan_for(req, 10, None)
    assert (plan.samples_per_query, plan.batch) == (8, 4)
    m, run = measure_open_loop(lambda: calls.append(1), plan, warmup=3)
    assert len(calls) == 3 + 20 and len(run.intended_ns) == len(m.samples_ns) == 10
    one = plan_for(BenchRequest(str(RESNET), scenario="server", rate_qps=100.0, batch=4), 5, None)
    assert one.samples_per_query == 4  # a query is one batch unless samples_per_query says more


# ------------------------------------------------------------------------------------------------ NVML's energy
@pytest.fixture(scope="module")
def capture() -> dict:
    doc = json.loads(CAPTURE.read_text())
    assert "SYNTHETIC" in doc["provenance"]
    return doc


def test_idle_power_is_the_energy_counters_rise_else_the_mean_reading(capture):
    idle = idle_power(capture["idle"])
    assert idle["power_w"] == pytest.approx(120.0) and idle["source"] == "energy counter"
    assert idle["window_s"] == pytest.approx(1.0) and idle["readings"] == 11
    no_counter = [{k: v for k, v in s.items() if k != "energy_mj"} for s in capture["idle"]]
    mean = sum(s["power_w"] for s in capture["idle"]) / 11
    assert idle_power(no_counter)["power_w"] == pytest.approx(mean, abs=1e-3) != pytest.approx(120.0)
    assert idle_power(no_counter)["source"] == "power readings"
    assert idle_power([{"t_s": 0.0}])["power_w"] is None
    still = [{**s, "energy_mj": 7} for s in capture["idle"]]  # a counter that did not move: the readings decide
    assert idle_power(still)["power_w"] == pytest.approx(mean, abs=1e-3)


def test_energy_total_and_above_idle_per_inference_and_per_sample(capture):
    """3 s at 300 W measured, 120 W idle, 3,000 inferences of batch 32: 900 J, 540 J above idle."""
    w = capture["measured"]
    s = window_summary(capture["run"], w["start_s"], w["end_s"], 3000, 96_000, idle_power(capture["idle"]))
    assert s["energy_j"] == pytest.approx(900.0) and s["energy_source"] == "energy counter"
    assert s["energy_above_idle_j"] == pytest.approx(540.0)
    assert s["energy_per_inference_uj"] == pytest.approx(300_000) and s["energy_per_sample_uj"] == pytest.approx(9375)
    assert s["energy_above_idle_per_inference_uj"] == pytest.approx(180_000)
    assert s["energy_above_idle_per_sample_uj"] == pytest.approx(5625)
    assert s["samples_per_s"] == pytest.approx(32_000) and s["samples_per_j"] == pytest.approx(96_000 / 900, abs=1e-3)
    assert s["samples_per_j_above_idle"] == pytest.approx(96_000 / 540, abs=1e-3)
    assert s["idle"]["power_w"] == pytest.approx(120.0) and s["samples"] == 13  # the readings inside [2, 5] s
    assert s["throttle_reasons"] == ["software power cap"]
    from bench.report import gpu_text

    shown = gpu_text({"available": True, "name": "NVIDIA H200", **s, "batch": 32})
    assert "idle 120 W (energy counter, 1.0 s before the model loaded); 540 J above idle of 900 J" in shown
    assert "5,625.0 uJ per sample above idle (9,375.0 total) at batch 32" in shown
    assert "32,000 samples/s, 177.8 samples/J above idle (106.7 total)" in shown
    plain = window_summary(capture["run"], w["start_s"], w["end_s"], 3000)  # no idle: the total only
    assert plain["energy_j"] == pytest.approx(900.0) and "energy_above_idle_j" not in plain


def test_energy_without_the_counter_is_mean_power_times_the_window(capture):
    run = [{k: v for k, v in s.items() if k != "energy_mj"} for s in capture["run"]]
    inside = [s["power_w"] for s in run if 2.0 <= s["t_s"] <= 5.0]
    s = window_summary(run, 2.0, 5.0, 100)
    assert s["energy_j"] == pytest.approx(sum(inside) / len(inside) * 3.0, abs=1e-3)
    assert s["energy_source"] == "mean power x window"


def test_a_run_no_heavier_than_idle_gets_no_per_joule_figure_above_idle():
    f = energy_figures(100.0, 1.0, 120.0, 10, 10)
    assert f["energy_above_idle_j"] == pytest.approx(-20.0) and "samples_per_j_above_idle" not in f
    assert "no more than the idle 120 W" in f["energy_above_idle_note"]


# ------------------------------------------------------------------------------------------------ the report
def test_the_report_says_how_many_boards_equal_one_gpu(dyn, capture):
    """Real records of this CPU (the board at batch 1, the 'GPU' at batch 8), the GPU side given the capture's NVML
    section as local:?device=cuda writes it; the line in every format, beside the crossover."""
    board = LocalTarget("local:").bench(BenchRequest(str(dyn), iterations=300)).result
    gpu = LocalTarget("local:?batch=8").bench(BenchRequest(str(dyn), iterations=300)).result
    w = capture["measured"]
    samples = round(gpu["throughput_ips"] * gpu["wall_s"])
    section = window_summary(capture["run"], w["start_s"], w["end_s"], samples // 8, samples,
                             idle_power(capture["idle"]))  # fmt: skip
    gpu = {**gpu, "gpu": {"available": True, "source": "NVML", **section, "batch": 8}}
    board = {**board, "power": {**board["power"], "available": True, "avg_w": 5.0}}  # a 5 W board's rail
    (c,) = edge_vs_server.pairs([("pi", board), ("gpu", gpu)])
    f = c["boards_per_gpu"]
    ratio = gpu["throughput_ips"] / board["throughput_ips"]
    assert f["boards_for_throughput"] == pytest.approx(ratio, abs=1e-3) and f["batch"] == {"board": 1, "server": 8}
    assert f["whole_boards"] == -(-round(ratio, 3) // 1)
    assert f["samples_per_j"]["board"] == pytest.approx(board["throughput_ips"] / 5.0, abs=1e-3)
    assert f["samples_per_j"]["server_above_idle"] == section["samples_per_j_above_idle"]
    per_j = f["samples_per_j"]["board"] / section["samples_per_j_above_idle"]
    assert f["board_vs_server_per_j"] == pytest.approx(per_j, rel=1e-3) and f["idle_w"] == pytest.approx(120.0)
    text = edge_vs_server.text([c])
    assert f"boards/GPU   {ratio:,.2f} boards" in text and "at batch 8 (a board:" in text
    assert text.index("crossover") < text.index("boards/GPU")
    assert f"the server {section['samples_per_j_above_idle']:,.1f} samples/J above its idle of 120 W" in text
    assert c["energy_per_inference_uj"]["server"] == section["energy_per_sample_uj"]  # per sample, as a board's
    assert "Boards per GPU: " in edge_vs_server.markdown([c])
    assert '<p class="boards-per-gpu">Boards per GPU: ' in edge_vs_server.html_section([c])


def test_unknown_figures_are_dashes_never_guesses():
    board = {"throughput_ips": 100.0, "power": {"available": False}}
    server = {"throughput_ips": None}
    c = {"boards_per_gpu": edge_vs_server.figures(board, server)}
    from bench.report.boards_per_gpu import line

    assert line(c).startswith("throughput not known on both sides; energy: a board - samples/J")
