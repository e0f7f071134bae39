"""Issue 26, heat as part of serving (edge_runtime/serve/heat.py): a fake thermal tree (the one the thermal tests
build) heated and cooled by writing its `temp` file; the gate refuses new work at the limit, keeps refusing until the
temperature is below the limit minus the hysteresis, and the core's readiness, statistics and /metrics say so. Real
ONNX Runtime sessions behind the core."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import MODELS, need
from helpers import thermal_tree

from edge_runtime.errors import UserError
from edge_runtime.serve.app import Settings, build_core
from edge_runtime.serve.heat import HeatGate
from edge_runtime.serve.kserve import Unavailable
from edge_runtime.serve.metrics import exposition
from edge_runtime.system.root import SystemRoot

DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"
X = {"input": np.zeros((1, 8, 8, 1), np.float32)}


def heat(root, celsius: float) -> None:
    (root / "sys/class/thermal/thermal_zone0/temp").write_text(f"{int(celsius * 1000)}\n")


@pytest.fixture
def hot(tmp_path):
    need("onnxruntime")
    root = thermal_tree(tmp_path, {"cpu-thermal": "50000"})
    gate = HeatGate(SystemRoot(root), 70.0, hysteresis_c=5.0, interval_s=3600).start()  # read by hand below
    core = build_core([str(DIGITS)], Settings(max_batch=1, queue=8), {"threads": 1}, gate)
    yield root, gate, core
    core.close(timeout_s=5)


def test_a_crossing_refuses_new_work_and_hysteresis_holds_it_until_cool(hot):
    root, gate, core = hot
    assert core.ready() and core.infer("digits_cnn_int8", None, X)["logits"].shape == (1, 10)
    heat(root, 71.0)
    gate.read_once()
    assert not core.ready() and not core.model_ready("digits_cnn_int8")
    with pytest.raises(Unavailable) as err:
        core.submit("digits_cnn_int8", None, X)
    assert err.value.status == 503 and err.value.retry_after_s >= 1
    assert "71.0 C" in str(err.value) and "resumes below 65 C" in str(err.value)
    heat(root, 67.0)  # below the limit, not below limit - hysteresis: still refusing
    gate.read_once()
    assert not core.ready()
    time.sleep(0.05)
    heat(root, 64.0)
    gate.read_once()
    assert core.ready() and core.infer("digits_cnn_int8", None, X)["logits"].shape == (1, 10)
    state = core.statistics()["thermal"]
    assert state["crossings"] == 1 and not state["refusing"] and state["refused_s"] >= 0.05
    assert state["temperature_c"] == 64.0 and state["headroom_c"] == 6.0 and state["limit_c"] == 70.0
    # nothing that was refused counts as a request: only the two served ones
    assert core.statistics()["model_stats"][0]["inference_stats"]["success"]["count"] == 2


def test_metrics_carry_temperature_headroom_and_time_refusing(hot):
    root, gate, core = hot
    heat(root, 80.0)
    gate.read_once()
    time.sleep(0.02)
    text = exposition(core)[0].decode()
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line and line[0] != "#"}
    assert values["edge_serve_temperature_celsius"] == 80.0
    assert values["edge_serve_thermal_headroom_celsius"] == -10.0
    assert values["edge_serve_thermal_refusing"] == 1.0 and values["edge_serve_ready"] == 0.0
    assert values["edge_serve_thermal_refused_seconds_total"] > 0
    assert values["edge_serve_thermal_crossings_total"] == 1.0


def test_the_sampling_thread_follows_the_sensor(tmp_path):
    root = thermal_tree(tmp_path, {"cpu-thermal": "40000"})
    gate = HeatGate(SystemRoot(root), 60.0, interval_s=0.02).start()
    try:
        heat(root, 61.5)
        end = time.monotonic() + 10
        while not gate.refusing and time.monotonic() < end:
            time.sleep(0.01)
        assert gate.refusing and gate.temperature_c == 61.5
        heat(root, 30.0)
        while gate.refusing and time.monotonic() < end:
            time.sleep(0.01)
        assert not gate.refusing
    finally:
        gate.stop()


def test_a_vanished_sensor_keeps_the_last_state(tmp_path):
    """A sensor file that disappears for a moment (a driver reloading) neither crashes the thread nor ends refusing."""
    root = thermal_tree(tmp_path, {"cpu-thermal": "90000"})
    gate = HeatGate(SystemRoot(root), 60.0, interval_s=0.02).start()
    try:
        assert gate.refusing
        (root / "sys/class/thermal/thermal_zone0/temp").unlink()
        time.sleep(0.1)
        assert gate._thread.is_alive() and gate.refusing and gate.temperature_c == 90.0
        with pytest.raises(Unavailable, match=r"90\.0 C"):
            gate.check()
    finally:
        gate.stop()


@pytest.mark.parametrize("limit", [float("nan"), 1e12, -5.0, True])
def test_a_limit_that_is_no_temperature_is_refused(tmp_path, limit):
    with pytest.raises(UserError, match="--thermal-limit"):
        HeatGate(SystemRoot(tmp_path), limit)
