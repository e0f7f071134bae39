"""The eembc target's runs (bench/targets/eembc_run.py, issue 27) against tests/servers/eembc_sim.py on a real pty:
performance mode's record (throughput from the device's laps within 2% of the simulator's known rate, percentiles
absent with the reason, the loops kept), accuracy mode over small datasets with a known answer (top-1 and the AD
model's AUC), the same through noise and a reset, and what a careless or hostile user gives it."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from conftest import MODELS
from test_eembc_protocol import expected_results, start_sim

from bench.targets.base import TargetError, TargetOptions
from bench.targets.eembc import EembcTarget
from bench.targets.eembc_run import auc, random_input, split_url
from edge_runtime import results
from edge_runtime.errors import UserError
from edge_runtime.measure.request import BenchRequest

pytest.importorskip("serial")
RESNET8 = MODELS / "resnet8" / "resnet8_int8.tflite"


@pytest.fixture
def target(tmp_path):
    opened = []

    def start(sim_args: tuple[str, ...], query: str = "", timeout: float = 10.0) -> EembcTarget:
        proc, link = start_sim(tmp_path, *sim_args)
        opened.append(proc)
        t = EembcTarget(f"eembc://{link}?baud=115200{query}", TargetOptions(connect_timeout=timeout))
        opened.append(t)
        return t

    yield start
    for thing in reversed(opened):
        if isinstance(thing, EembcTarget):
            thing.close()
        else:
            thing.terminate()
            thing.wait(10)


def request(**kw) -> BenchRequest:
    return BenchRequest(model=str(RESNET8), **kw)


def test_performance_mode_is_the_record_every_target_writes(target):
    t = target(("--us-per-inference", "500", "--model", "ic01"), "&loops=3&loop_s=0.3&warmups=2")
    said = []
    got = t.bench(request(seed=7), progress=said.append)
    doc = got.result
    fw = doc["firmware"]
    assert doc["throughput_ips"] == pytest.approx(2000.0, rel=0.02)  # 500 us an inference, by the device's timer
    assert doc["latency_us"]["mean"] == pytest.approx(500.0, rel=0.02)
    assert all(doc["latency_us"][k] is None for k in ("p50", "p99", "min", "max")) and doc["histogram_us"] == []
    assert "not each inference" in fw["why_no_percentiles"]
    assert len(fw["loops"]) == 3 and all(lp["elapsed_us"] >= 300_000 for lp in fw["loops"])
    assert doc["latency_us"]["count"] == sum(lp["inferences"] for lp in fw["loops"])
    assert fw["median_ips"] == doc["throughput_ips"] and fw["resets"] == 0
    assert fw["results"] == pytest.approx(expected_results(random_input("ic01", split_url(t.url)[1], 7), 10),
                                          abs=5e-4)  # fmt: skip
    assert fw["mlperf_rule"]["met"] is False and "at least 5 loops of at least 10 s" in fw["mlperf_rule"]["why"]
    assert any("not an MLPerf Tiny score" in w for w in got.warnings)
    assert doc["model"]["sha256"] and doc["model"]["server_name"] == "ic01" and doc["backend"]["name"] == "eembc"
    assert doc["environment"]["board"] == "edge_runtime eembc_sim (dut)"
    assert doc["config"]["timed_call"].startswith("the firmware's th_infer")
    assert any(s.startswith("loop 3/3: ") for s in said), said
    assert results.load(doc).to_dict() == doc  # the schema reads it back, key for key
    # a bound on a percentile cannot be shown met by loop means: a failed check that says why, never a pass
    from bench.slo import SLO, evaluate, verdict_lines

    verdict = evaluate(doc, SLO({"p99_ms": 1000.0}, 0.01))
    assert verdict["pass"] is False and not verdict["checks"][0]["pass"] and not verdict["error_budget"]["pass"]
    assert "no percentiles" in verdict_lines(verdict)[0]


def test_a_noisy_device_gives_the_same_throughput_and_says_its_reset(target):
    t = target(("--us-per-inference", "400", "--model", "kws01", "--echo", "--drop-hex-every", "4",
                "--garbage-every", "3", "--reset-after-infers", "2"), "&loops=3&loop_s=0.2")  # fmt: skip
    doc = t.bench(request(seed=3)).result
    assert doc["throughput_ips"] == pytest.approx(2500.0, rel=0.02)
    assert doc["firmware"]["resets"] == 1 and [lp["resets"] for lp in doc["firmware"]["loops"]] == [1, 0, 0]
    assert doc["firmware"]["pieces_resent"] >= 1
    assert any("reset 1 time(s)" in w for w in doc["quality"]["warnings"])
    assert doc["firmware"]["results"] == pytest.approx(
        expected_results(random_input("kws01", split_url(t.url)[1], 3), 12), abs=5e-4)  # fmt: skip


def test_a_duration_is_shared_by_the_loops(target):
    t = target(("--us-per-inference", "1000",), "&loops=2")  # fmt: skip
    doc = t.bench(request(duration_s=0.4)).result
    assert doc["firmware"]["loop_s"] == pytest.approx(0.2)
    assert all(lp["elapsed_us"] >= 200_000 for lp in doc["firmware"]["loops"])


def classifier_set(tmp_path, n: int, wrong: int):
    """n ic01 inputs; the labels are the simulator's top-1 answers (computed here from its documented rule), with
    `wrong` of them changed: top-1 is (n - wrong) / n."""
    rng = np.random.default_rng(1)
    x = rng.integers(0, 128, (n, 3072), dtype=np.uint8)
    for i in range(n):  # one class's slice bright: a clear answer, no tie in the 3 decimals the device prints
        k = i % 10
        x[i, 3072 * k // 10 : 3072 * (k + 1) // 10] = 250
    x = x.reshape(n, 32, 32, 3)
    y = np.array([int(np.argmax(expected_results(s.tobytes(), 10))) for s in x])
    assert list(y) == [i % 10 for i in range(n)]
    y[:wrong] = (y[:wrong] + 1) % 10
    path = tmp_path / "ic.npz"
    np.savez(path, x=x, y=y)
    return path


def test_accuracy_mode_top1_over_a_known_set(target, tmp_path):
    data = classifier_set(tmp_path, 12, wrong=3)
    t = target(("--us-per-inference", "300", "--model", "ic01", "--drop-hex-every", "7"),
               f"&mode=accuracy&data={data}")  # fmt: skip
    doc = t.bench(request()).result
    acc = doc["firmware"]["accuracy"]
    assert acc == {"metric": "top1", "value": 0.75, "samples": 12, "correct": 9}
    assert len(doc["firmware"]["results"]) == 12
    # each inference timed alone by the device: a distribution, so this mode has percentiles
    assert doc["latency_us"]["count"] == 12 and doc["latency_us"]["p50"] == pytest.approx(300, rel=0.1)
    assert sum(c for _, c in doc["histogram_us"]) == 12


def brute_auc(scores, labels) -> float:
    pairs = [(p, q) for p, q in itertools.product(range(len(scores)), repeat=2) if labels[p] == 1 and labels[q] == 0]
    return sum(1.0 if scores[p] > scores[q] else 0.5 if scores[p] == scores[q] else 0.0 for p, q in pairs) / len(pairs)


def test_accuracy_mode_auc_for_the_anomaly_model(target, tmp_path):
    rng = np.random.default_rng(2)
    x = rng.random((10, 640), dtype=np.float32)
    x[3] = x[4]  # a tie: the two share their rank
    scores = [sum(s.tobytes()) / (255 * s.nbytes) for s in x]  # the simulator's ad01 score: mean byte / 255
    y = np.array([1, 0, 1, 1, 0, 0, 1, 0, 0, 1])
    np.savez(tmp_path / "ad.npz", x=x, y=y)
    t = target(("--us-per-inference", "200", "--model", "ad01"), f"&mode=accuracy&data={tmp_path / 'ad.npz'}")
    acc = t.bench(request()).result["firmware"]["accuracy"]
    assert acc["metric"] == "auc" and acc["value"] == pytest.approx(brute_auc(np.round(scores, 3), y), abs=1e-6)
    assert 0 < acc["value"] < 1


def test_auc_against_the_pairwise_count():
    rng = np.random.default_rng(5)
    scores, labels = rng.integers(0, 5, 40).astype(float), rng.integers(0, 2, 40)
    assert auc(scores, labels) == pytest.approx(brute_auc(scores, labels))
    with pytest.raises(UserError, match=r"normal .* and anomalous"):
        auc(scores, np.ones(40, dtype=int))


@pytest.mark.parametrize("query, words", [
    ("&loops=NaN", "loops 'NaN': a whole number 1 to 1,000"),
    ("&loops=1000000000000", "loops '1000000000000': a whole number 1 to 1,000"),
    ("&loop_s=nan", "loop_s 'nan': a number 0.001 to 3600"),
    ("&loop_s=-1", "loop_s '-1'"),
    ("&timeout=inf", "timeout 'inf'"),
    ("&mode=energy", "energy mode needs a power monitor"),
    ("&mode=accuracy", "mode=accuracy needs data=FILE.npz"),
    ("&data=x.npz", "data= is for mode=accuracy"),
    ("&input_bytes=0", "input_bytes '0'"),
])  # fmt: skip
def test_bad_options_are_one_line_before_anything_opens(query, words):
    with pytest.raises(UserError) as err:
        EembcTarget.check_url("eembc:///dev/ttyACM0?baud=115200" + query)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_our_options_never_reach_pyserial():
    device, opts = split_url("eembc:///dev/ttyACM0?baud=9600&loops=2&mode=accuracy&data=/tmp/a.npz&loop_s=1.5")
    assert device == "eembc:///dev/ttyACM0?baud=9600"
    assert (opts.loops, opts.loop_s, opts.mode, opts.data) == (2, 1.5, "accuracy", "/tmp/a.npz")


def bad_sets(tmp_path):
    fifo = tmp_path / "fifo.npz"
    os.mkfifo(fifo)
    np.savez(tmp_path / "nolabels.npz", x=np.zeros((2, 32, 32, 3), np.uint8))
    np.savez(tmp_path / "small.npz", x=np.zeros((2, 8, 8), np.float32), y=np.zeros(2, int))
    np.savez(tmp_path / "nan.npz", x=np.full((2, 640), np.nan, np.float32), y=np.zeros(2, int))
    np.savez(tmp_path / "count.npz", x=np.zeros((3, 32, 32, 3), np.uint8), y=np.zeros(2, int))
    (tmp_path / "text.npz").write_text("not a zip")
    return [(fifo, "not a regular file"), ("nolabels.npz", "needs arrays x (the inputs) and y (the labels)"),
            ("small.npz", "an input is 256 bytes (8x8 float32); the device's ic01 reads 3072 (32x32x3 uint8)"),
            ("nan.npz", "x holds NaN"), ("count.npz", "3 inputs and 2 labels"), ("text.npz", "not a .npz archive"),
            ("absent.npz", "")]  # fmt: skip


def test_a_bad_dataset_is_one_line_naming_it(target, tmp_path):
    for name, words in bad_sets(tmp_path):
        path = tmp_path / name
        model = "ad01" if "nan" in str(name) else "ic01"
        t = target(("--model", model), f"&mode=accuracy&data={path}")
        with pytest.raises((UserError, TargetError)) as err:  # TargetError once the device said its model
            t.bench(request())
        text = str(err.value)
        assert err.value.exit_code == 2
        assert f"data {str(path)!r}" in text and words in text and "\n" not in text, text


def test_a_device_that_stops_answering_mid_run_is_one_line(target):
    t = target(("--us-per-inference", "200", "--hang-after-commands", "6"), "&loops=3&loop_s=0.1&timeout=0.5")
    with pytest.raises(TargetError) as err:
        t.bench(request())
    text = str(err.value)
    assert "no m-ready in" in text and "last line" in text and "\n" not in text and err.value.exit_code == 1, text


def test_only_single_stream(target):
    t = target(("--model", "ic01"))
    with pytest.raises(TargetError, match="single-stream only"):
        t.bench(request(scenario="server", rate_qps=10.0, duration_s=1.0))
