"""Issue 27's campaign: a microcontroller on MLPerf Tiny firmware (tests/servers/eembc_sim.py on a pty) next to this
machine (`local:`) and a board's agent over a serial cable (a pty pair), in one campaign, one store and one HTML
report; then compare on the firmware's runs, and a slower firmware found slower by its loops."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from agentkit import AgentProcess, Cable
from conftest import MODELS, ROOT, need
from test_eembc_protocol import sim  # noqa: F401 - its fixture, used by `sims`

pytest.importorskip("serial")


@pytest.fixture
def sims(sim):  # noqa: F811 - test_eembc_protocol's fixture: simulators started, each its own link, all stopped
    return sim
RESNET8 = MODELS / "resnet8" / "resnet8_int8.onnx"


def edge_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)  # fmt: skip


def test_a_microcontroller_a_linux_board_and_this_machine_in_one_campaign(tmp_path, sims):
    need("onnxruntime")
    mcu = sims("--us-per-inference", "700", "--model", "ic01")
    cable = Cable()
    store = str(tmp_path / "s.sqlite")
    try:
        with AgentProcess(cable.agent_url, tmp_path / "state"):
            camp = tmp_path / "c.toml"
            camp.write_text(f"""
[campaign]
name = "mcu-board-host"
repetitions = 2
[[target]]
name = "mcu"
url = "eembc://{mcu}?baud=115200&loops=3&loop_s=0.2"
[[target]]
name = "host"
url = "local:"
cpus = "1"
[[target]]
name = "board"
url = "{cable.host_url}"
cpus = "1"
[[model]]
name = "resnet8"
path = "{RESNET8}"
[[scenario]]
kind = "single-stream"
iterations = 200
""")
            html = tmp_path / "r.html"
            proc = edge_bench("run", str(camp), "--store", store, "--json", str(tmp_path / "r.json"), "--html",
                              str(html))  # fmt: skip
    finally:
        cable.close()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = json.loads((tmp_path / "r.json").read_text())["runs"]
    assert [(r["target"], r["repetition"]) for r in runs] == [(t, k) for k in (0, 1) for t in ("mcu", "host", "board")]
    fw = [r["result"] for r in runs if r["target"] == "mcu"]
    assert all(r["throughput_ips"] == pytest.approx(1e6 / 700, rel=0.02) and r["latency_us"]["p50"] is None
               for r in fw)  # fmt: skip
    assert all(r["result"]["latency_us"]["p50"] for r in runs if r["target"] != "mcu")
    page = html.read_text()
    assert 'id="firmware"' in page and "MLPerf Tiny firmware" in page and "the device times each loop" in page
    assert all(name in page for name in ("mcu", "host", "board"))
    # the answer ranks the microcontroller by its mean and says so; the report of the store has all six runs
    answer = proc.stdout.splitlines()[1]
    assert "mean (the device's timer: no percentiles)" in answer, proc.stdout
    listed = edge_bench("report", "--store", store, "--html", str(tmp_path / "s.html"))
    assert listed.returncode == 0 and "MLPerf Tiny firmware (the device's own timer):" in listed.stdout
    assert len(re.findall(r"^\s+\d+\s+(mcu|host|board)\s", listed.stdout, re.M)) == 6, listed.stdout
    ids = [str(r["run"]) for r in runs if r["target"] == "mcu"]
    same = edge_bench("compare", *ids, "--store", store)
    assert same.returncode == 0 and "3 vs 3 loops" in same.stdout and "regression" not in same.stdout, same.stdout
    mixed = edge_bench("compare", ids[0], str(runs[1]["run"]), "--store", store, "--force")
    assert mixed.returncode == 2 and "report` shows them side by side" in mixed.stderr, mixed.stderr


def test_a_slower_firmware_is_a_regression_by_its_loops(tmp_path, sims):
    """Three runs a side, the candidate 25% slower: found by the loops and the runs (an MCU's own timer varies little:
    --run-spread is not needed with three runs a side)."""
    store = str(tmp_path / "s.sqlite")
    ids = {}
    for side, us in (("a", "800"), ("b", "1000")):
        link = sims("--us-per-inference", us, "--model", "kws01")
        for _ in range(3):
            proc = edge_bench("run", "--target", f"eembc://{link}?loops=3&loop_s=0.1", "--model", str(RESNET8),
                              "--store", store, "--json", "-")  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            ids.setdefault(side, []).append(re.search(r"stored as run (\d+)", proc.stderr).group(1))
    got = edge_bench("compare", "--a", *ids["a"], "--b", *ids["b"], "--store", store, "--json", "-")
    doc = json.loads(got.stdout)
    assert got.returncode == 1 and doc["verdict"] == "regression", got.stdout
    assert doc["metrics"]["throughput"]["change_pct"] == pytest.approx(-20.0, abs=1.0)
    assert doc["metrics"]["mean"]["change_pct"] == pytest.approx(25.0, abs=1.5)
    back = edge_bench("compare", "--a", *ids["a"][:2], "--b", ids["a"][2], "--store", store)
    assert back.returncode == 0 and "regression" not in back.stdout.split("verdict:")[1], back.stdout


def test_performance_and_accuracy_on_one_device_in_one_campaign_with_its_data_beside_the_campaign(tmp_path, sims):
    """Two targets naming one device take turns on its port; `data=` is read relative to the campaign file, as its
    models are, and checked when the campaign is read; a dataset the device cannot score fails its run, not the
    campaign (found after its first sample, not its last)."""
    import numpy as np
    from test_eembc_protocol import expected_results

    mcu = sims("--us-per-inference", "300", "--model", "ic01")
    rng = np.random.default_rng(4)
    x = rng.integers(0, 128, (4, 3072), dtype=np.uint8)
    for i, k in enumerate((3, 0, 9, 5)):  # class k's slice bright: a clear answer, no tie in the printed 3 decimals
        x[i, 3072 * k // 10 : 3072 * (k + 1) // 10] = 250
    x = x.reshape(4, 32, 32, 3)
    y = np.array([int(np.argmax(expected_results(v.tobytes(), 10))) for v in x])
    assert list(y) == [3, 0, 9, 5]
    folder = tmp_path / "camp"
    folder.mkdir()
    np.savez(folder / "ic.npz", x=x, y=y)
    np.savez(folder / "wide.npz", x=x[:2], y=np.array([0, 15]))  # label 15: only the device's answer says it's wrong
    camp = folder / "c.toml"
    camp.write_text(f"""
[campaign]
name = "one-device"
[[target]]
name = "perf"
url = "eembc://{mcu}?loops=2&loop_s=0.1"
[[target]]
name = "acc"
url = "eembc://{mcu}?mode=accuracy&data=ic.npz"
[[target]]
name = "wide"
url = "eembc://{mcu}?mode=accuracy&data=wide.npz&input_bytes=3072"
[[model]]
name = "resnet8"
path = "{RESNET8}"
""")
    proc = edge_bench("run", str(camp), "--store", str(tmp_path / "s.sqlite"), "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the third run failed; the campaign went on
    runs = {r["target"]: r for r in json.loads((tmp_path / "r.json").read_text())["runs"]}
    assert runs["perf"]["result"]["throughput_ips"] == pytest.approx(1e6 / 300, rel=0.02)
    assert runs["acc"]["result"]["firmware"]["accuracy"]["value"] == 1.0
    assert "label 15, but the device's results have 10 classes" in proc.stdout + proc.stderr
    camp.write_text(camp.read_text().replace("data=ic.npz", "data=absent.npz"))
    proc = edge_bench("run", str(camp), "--store", str(tmp_path / "s.sqlite"))
    assert proc.returncode == 2 and "[[target]] 'acc'" in proc.stderr and "absent.npz" in proc.stderr, proc.stderr
