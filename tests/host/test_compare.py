"""`edge-bench compare` (issue 25): the statistics on seeded distributions, then real runs of the reference models on
this machine (local:, ONNX Runtime and OpenVINO) in a temporary store, compared through the command line: identical
runs never called a regression, a 15% slower configuration found with three runs a side, backends compared without
--force, different models refused."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import MODELS, ROOT, need
from records import result

from bench.comparable import differences, refusals
from bench.compare import compare, needed_samples, parse_metrics
from bench.store import Store
from edge_runtime.errors import UserError

DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"
RESNET = MODELS / "resnet8" / "resnet8_int8.onnx"


def work(rng, n, scale=1.0):  # like a model's latency: a lognormal body and a tail of interruptions
    return (rng.lognormal(np.log(180), 0.2, n) + rng.exponential(15, n)) * scale


# ------------------------------------------------------------------------------------------ the statistics, seeded
def test_the_within_run_test_alone_tells_a_10pct_slowdown_from_noise_in_nine_of_ten_trials():
    """--run-spread 0: one run a side, the within-run bootstrap alone (the test before issue 25)."""
    slow = same = 0
    for seed in range(10):
        rng = np.random.default_rng(100 + seed)
        a = result(work(rng, 6000))
        slow += compare(a, result(work(rng, 2500, 1.10)), seed=seed, run_spread_pct=0)["verdict"] == "regression"
        same += compare(a, result(work(rng, 2500)), seed=seed, run_spread_pct=0)["verdict"] == "no significant change"
    assert slow >= 9 and same >= 9, (slow, same)


def test_one_run_a_side_is_provisional_and_calls_only_what_is_beyond_the_run_to_run_spread():
    """Identical runs on a shared VM differ by up to 4x in median: one run a side, a 3x slower B is significant
    within the runs but not a regression (provisional, with the runs that would settle it); 5x is. An isolated
    board's runs agree within a few percent: --run-spread 10 there calls a 1.3x slower B."""
    rng = np.random.default_rng(5)
    a = result(work(rng, 4000))
    doc = compare(a, result(work(rng, 4000, 3.0)))
    assert doc["provisional"] and doc["verdict"] == "no significant change", doc["verdict"]
    assert doc["metrics"]["p50"]["significant"] and doc["metrics"]["p50"]["verdict"] == "within run-to-run spread"
    assert doc["runs_to_settle"] >= 2 and "provisional" in doc["method"]
    doc = compare(a, result(work(rng, 4000, 5.0)))
    assert doc["verdict"] == "regression" and doc["metrics"]["p50"]["verdict"] == "regression"
    assert doc["metrics"]["throughput"]["verdict"] == "regression"  # a closed loop: a fifth of the pace
    assert compare(result(work(rng, 4000, 5.0)), a)["verdict"] == "improvement"
    assert compare(a, result(work(rng, 4000, 1.3)), run_spread_pct=10)["verdict"] == "regression"


def test_several_runs_a_side_weigh_the_change_against_the_spread_between_runs():
    """Runs whose medians wander by 20% from run to run (as on this VM under load): three runs a side of the same work
    are not a regression in 19 of 20 trials, though the pooled samples differ far beyond their own bootstrap interval.
    Where runs wander by 3%, a 15% slowdown is found in 9 of 10 with three runs a side. One run against three: the
    between-run interval applies (the spread is measured on the side that has it)."""

    def runs(rng, k, scale=1.0, wander=0.2):
        return [result(work(rng, 3000, scale * rng.lognormal(0, wander))) for _ in range(k)]

    false = found = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        doc = compare(runs(rng, 3), runs(rng, 3), seed=seed)
        assert not doc["provisional"] and doc["metrics"]["p50"]["between_run_interval_pct"] is not None
        false += doc["verdict"] == "regression"
        quiet = compare(runs(rng, 3, wander=0.03), runs(rng, 3, 1.15, wander=0.03), seed=seed)
        found += seed < 10 and quiet["verdict"] == "regression"
    assert false <= 1 and found >= 9, (false, found)
    doc = compare(runs(np.random.default_rng(1), 1), runs(np.random.default_rng(2), 3))
    assert not doc["provisional"] and doc["runs"] == {"a": 1, "b": 3}


def test_a_tail_percentile_gates_only_when_each_run_holds_enough_samples_beyond_it():
    """CI flaked: two runs of one model, 3,000 samples each, called a REGRESSION at --threshold 50 on p99.9 (three
    samples decide it; one stall of the machine moves it). p99.9 gates from 10,000 samples a run, p99 from 1,000."""
    assert (needed_samples(50.0), needed_samples(99.0), needed_samples(99.9)) == (0, 1000, 10000)
    rng = np.random.default_rng(3)

    def run(n, stalls):  # the same body; a few 4 ms stalls in B's tail
        samples = rng.lognormal(np.log(180), 0.1, n)
        samples[rng.choice(n, stalls, replace=False)] = 4000.0
        return result(samples)

    doc = compare(run(3000, 0), run(3000, 6), threshold_pct=50, run_spread_pct=0)
    assert doc["metrics"]["p999"]["verdict"] == "shown (not in --metrics)" and doc["verdict"] != "regression"
    assert doc["metrics"]["p999"]["change_pct"] > 50 and doc["metrics_gated"] == ["p50", "p99", "throughput"]
    doc = compare(run(3000, 0), run(3000, 6), threshold_pct=50, run_spread_pct=0, metrics=("p50", "p999"))
    assert (
        doc["metrics"]["p999"]["verdict"] == "not gated (needs 10,000 samples a run)" and not doc["metrics_gated"][1:]
    )
    doc = compare(run(20000, 0), run(20000, 60), threshold_pct=50, run_spread_pct=0)
    assert doc["metrics"]["p999"]["verdict"] == "regression" and doc["verdict"] == "regression"
    doc = compare(run(20000, 0), run(20000, 60), threshold_pct=50, run_spread_pct=0, metrics=parse_metrics("p50"))
    assert doc["verdict"] != "regression" and doc["metrics_gated"] == ["p50"]


def test_no_threshold_and_no_change_is_an_answer_not_a_division_by_zero():
    """threshold 0 and a metric that did not move (the same run on both sides): the runs that would settle a change of
    0 are 'more than any campaign' (10,000), not a ZeroDivisionError."""
    a = result(work(np.random.default_rng(3), 2000))
    doc = compare(a, a, threshold_pct=0)
    assert doc["verdict"] == "no significant change" and doc["metrics"]["p50"]["change_pct"] == 0


def test_metrics_are_named_or_refused_in_one_line():
    assert parse_metrics("p50, P99.9,throughput,p50") == ("p50", "p999", "throughput")
    for bad, said in (("p42", "unknown 'p42'"), (",", "empty")):
        with pytest.raises(UserError, match=said):
            parse_metrics(bad)


def test_throughput_is_each_runs_own_and_an_open_loops_is_not_tested():
    """A run's throughput is what it recorded, not 1e6 / mean latency; an open loop's is its schedule's."""
    rng = np.random.default_rng(7)
    samples = rng.lognormal(np.log(180), 0.2, 4000)
    a, b = result(samples, throughput_ips=5400.0), result(samples * 2.0, throughput_ips=2700.0)
    t = compare(a, b, run_spread_pct=0)["metrics"]["throughput"]
    assert (t["a"], t["b"], t["change_pct"]) == (5400.0, 2700.0, -50.0) and t["verdict"] == "regression"
    assert t["interval_pct"][1] < 0 and t["significant"]
    server = {"kind": "server", "rate_qps": 175.0}
    a2 = result(samples, scenario=server, throughput_ips=174.9)
    b2 = result(samples * 2.0, scenario=server, throughput_ips=174.8)
    doc = compare(a2, b2, run_spread_pct=0)
    t = doc["metrics"]["throughput"]
    assert (t["a"], t["b"]) == (174.9, 174.8) and t["significant"] is None and t["verdict"].startswith("not tested")
    assert doc["metrics"]["p50"]["verdict"] == "regression"  # the latency still tells
    assert refusals(a2, b2) == []
    assert "different scenarios (single-stream vs server)" in refusals(a, b2)
    faster = {**b2, "scenario": {**server, "rate_qps": 200.0}}
    assert "different rates (175.0 vs 200.0 queries/s)" in refusals(a2, faster)


def test_configurations_compare_and_what_differs_is_said_but_models_and_shapes_do_not():
    rng = np.random.default_rng(1)
    base = result(work(rng, 100), sha="1" * 64)
    base["model"] = {"path": "/m/digits_cnn_int8.onnx", "sha256": "1" * 64, "format": "onnx", "precision": "int8"}
    base["backend"] = {"name": "onnxruntime", "device": "cpu"}
    xml = {"path": "/m/digits_cnn_int8.xml", "sha256": "2" * 64, "format": "openvino"}
    ov = {**base, "model": {**base["model"], **xml}, "backend": {"name": "openvino", "device": "CPU"},
          "config": {"threads": 1}}  # fmt: skip
    assert refusals(base, ov) == []
    assert differences(base, ov, "ort", "ov") == {
        "target": ["ort", "ov"],
        "backend": ["onnxruntime", "openvino"],
        "threads": [None, 1],
        "model format": ["onnx", "openvino"],
        "model file": ["digits_cnn_int8.onnx", "digits_cnn_int8.xml"],
    }  # 'cpu' and 'CPU' are one device
    fp32 = {
        **base,
        "model": {**base["model"], "path": "/m/digits_cnn_fp32.onnx", "sha256": "3" * 64, "precision": "fp32"},
    }
    assert refusals(base, fp32) == [] and differences(base, fp32)["precision"] == ["int8", "fp32"]
    retrained = {**base, "model": {**base["model"], "sha256": "4" * 64}}
    assert refusals(base, retrained) == ["different models (digits_cnn: sha256 111111111111 vs 444444444444)"]
    resnet = {**base, "model": {**base["model"], "path": "/m/resnet8_int8.xml", "sha256": "5" * 64, "format": "x"}}
    assert refusals(base, resnet) == ["different models (digits_cnn vs resnet8)"]
    batched = {**base, "config": {"batch": 8}}
    assert refusals(base, batched) == ["different input shapes (batch 1 vs 8)"]
    # another board: the comparison itself between two targets (a sibling board, a GPU server), said in `differs`;
    # one target whose board changed between runs answers another question
    other = {**base, "environment": {"board": "rock-5b", "cpu_model": "Cortex-A76"}}
    assert refusals(base, other, targets=("pi", "rock")) == []
    assert differences(base, other, "pi", "rock")["board"] == ["board", "rock-5b"]
    assert refusals(base, other, targets=("pi", "pi")) == ["different boards ('board' vs 'rock-5b')",
                                                           "different CPUs ('cpu' vs 'Cortex-A76')"]  # fmt: skip


# ------------------------------------------------------------------------------------------ real runs, the CLI
def edge_bench(*args: str, store: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.cli", *args, "--store", str(store)], capture_output=True,
                          text=True, cwd=cwd, timeout=600)  # fmt: skip


def in_process(*args: str, store: Path) -> tuple[int, str, dict]:
    """`edge-bench ARGS --json FILE` in this process (the same main; a loop of 20 compares without 20 interpreter
    starts): the exit code, the text and the JSON document."""
    from bench.cli import main

    out, doc = io.StringIO(), store.with_name("compare.json")
    with contextlib.redirect_stdout(out):
        rc = main([*args, "--store", str(store), "--json", str(doc)])
    return rc, out.getvalue(), json.loads(doc.read_text())


def campaign(tmp_path: Path, name: str, targets: dict[str, str], models: dict[str, Path], reps: int, dur_s: float):
    """Run a campaign (targets x models x repetitions, interleaved) into tmp_path/runs.sqlite; the store's path."""
    lines = [f'[campaign]\nname = "{name}"\nrepetitions = {reps}']
    lines += [f'[[target]]\nname = "{t}"\nurl = "{url}"\ncpus = "1"\nthreads = 1' for t, url in targets.items()]
    lines += [f'[[model]]\nname = "{m}"\npath = "{p}"' for m, p in models.items()]
    lines.append(f'[[scenario]]\nkind = "single-stream"\nduration_s = {dur_s}\nwarmup = 50')
    (tmp_path / f"{name}.toml").write_text("\n".join(lines) + "\n")
    store = tmp_path / "runs.sqlite"
    proc = edge_bench("run", str(tmp_path / f"{name}.toml"), store=store)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return store


def ids_of(store: Path, **where) -> list[int]:
    import sqlite3

    cond = " AND ".join(f"{k} = ?" for k in where)
    with contextlib.closing(sqlite3.connect(store)) as db:
        return [r[0] for r in db.execute(f"SELECT id FROM runs WHERE {cond} ORDER BY id", tuple(where.values()))]


def test_twenty_pairs_of_identical_runs_are_never_called_a_regression(tmp_path):
    """Issue 25: two repetitions of the identical target and model were "REGRESSION" (p99.9 +842%). 20 pairs of
    identical runs (0.15 s each, interleaved), each pair compared through the CLI: no regression, each provisional."""
    need("onnxruntime")
    store = campaign(tmp_path, "same", {"a": "local:", "b": "local:"}, {"digits": DIGITS}, reps=20, dur_s=0.15)
    a, b = ids_of(store, target="a"), ids_of(store, target="b")
    assert len(a) == len(b) == 20
    verdicts = []
    for x, y in zip(a, b, strict=True):
        rc, _, doc = in_process("compare", str(x), str(y), store=store)
        assert doc["provisional"] and doc["differs"] == {"target": ["a", "b"]}
        verdicts.append((rc, doc["verdict"], doc["metrics"]["p50"]["change_pct"]))
    assert all(rc == 0 and v != "regression" for rc, v, _ in verdicts), verdicts
    rc, out, _ = in_process("compare", "--a", "campaign:same/a", "--b", "campaign:same/b", store=store)
    assert rc == 0 and "20 runs" in out and "REGRESSION" not in out, out  # pooled: 20 a side


def chain_model(path: Path, layers: int, n: int = 128) -> Path:
    """A chain of `layers` MatMul + Tanh on a [1, n] vector: work proportional to `layers`."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32), "w")
    nodes, prev = [], "x"
    for i in range(layers):
        out = "y" if i == layers - 1 else f"y{i}"
        nodes += [helper.make_node("MatMul", [prev, "w"], [f"m{i}"]), helper.make_node("Tanh", [f"m{i}"], [out])]
        prev = out
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], [w])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_15pct_slower_configuration_is_found_in_nine_of_ten_trials_with_three_runs_a_side(tmp_path):
    """B's model does 15% more of the same work (23 layers against 20: a slower configuration); 30 runs of each,
    interleaved. Each of 10 trials compares three runs a side through the CLI (--force: two model files): never
    "improvement", and found in 9 of 10 where this machine's run-to-run spread lets three runs a side find 15% at
    all (80% power by the compare's own rule); all 30 a side: found where 30 suffice by that rule. On this VM they do
    not: per-run medians switch between two levels about 1.6x apart for seconds at a time, quiet or not (a neighbour
    on the host: a spinner of ours on the other vCPU does not hold the level), a log spread of 0.16 to 0.26 between
    runs; 15% then needs 29 to 72 runs a side, and compare says so (not significant, the runs that would settle it).
    Then this is an xfail naming the spread it measured and the trials' answers; "improvement" is never allowed."""
    need("onnxruntime")
    pytest.importorskip("onnx")
    from bench.compare import ALPHA, runs_to_settle

    models = {"fast": chain_model(tmp_path / "chain_20.onnx", 20), "slow": chain_model(tmp_path / "chain_23.onnx", 23)}
    store = campaign(tmp_path, "slowdown", {"t": "local:"}, models, reps=30, dur_s=0.15)
    fast, slow = ids_of(store, model_name="fast"), ids_of(store, model_name="slow")
    found, trials = 0, []
    for trial in range(10):
        a, b = fast[3 * trial : 3 * trial + 3], slow[3 * trial : 3 * trial + 3]
        rc, _, doc = in_process("compare", "--a", *map(str, a), "--b", *map(str, b), "--force", store=store)
        trials.append((doc["verdict"], doc["metrics"]["p50"]["change_pct"], doc["runs_to_settle"]))
        found += rc == 1 and doc["verdict"] == "regression"
    rc, _, doc = in_process("compare", "--a", "campaign:slowdown/t/fast", "--b", "campaign:slowdown/t/slow", "--force",
                            store=store)  # fmt: skip
    pooled = (rc, doc["verdict"], doc["metrics"]["p50"]["change_pct"], doc["runs"])
    with Store(store) as st:
        p50 = {m: np.log([st.run(i).result["latency_us"]["p50"] for i in ids]) for m, ids in (("a", fast), ("b", slow))}
    sigma = float(np.sqrt((np.var(p50["a"], ddof=1) + np.var(p50["b"], ddof=1)) / 2))
    needed = runs_to_settle(0.15, sigma, 5.0, ALPHA / len(doc["metrics_gated"]))
    assert pooled[1] != "improvement", pooled
    if needed > 30:  # not even 30 a side can find it here: compare must then not claim it either way
        pytest.xfail(f"run-to-run spread here: log sd {sigma:.3f}; 15% needs about {needed} runs a side; 30 a side: "
                     f"{pooled}; 3 a side: {trials}")  # fmt: skip
    assert pooled[0] == 1 and pooled[1] == "regression" and pooled[3] == {"a": 30, "b": 30}, pooled
    if needed > 3:
        pytest.xfail(f"run-to-run spread here: log sd {sigma:.3f}; 15% needs about {needed} runs a side; {trials}")
    assert found >= 9 and all(v != "improvement" for v, _, _ in trials), (found, sigma, trials)


def test_onnx_runtime_and_openvino_compare_without_force_and_different_models_do_not(tmp_path):
    need("onnxruntime")
    need("openvino")
    store = tmp_path / "runs.sqlite"
    for url, model in (("local:", DIGITS), ("local:?backend=openvino", DIGITS.with_suffix(".xml")), ("local:", RESNET)):
        proc = edge_bench("run", "--target", url, "--model", str(model), "--duration", "0.2", store=store)
        assert proc.returncode == 0, proc.stderr[-2000:]
    ort, ov, resnet = ids_of(store, scenario="single-stream")
    proc = edge_bench("compare", str(ort), str(ov), "--json", "-", store=store)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["differs"]["backend"] == ["onnxruntime", "openvino"] and "device" not in doc["differs"]  # cpu, CPU
    assert doc["differs"]["model format"] == ["onnx", "openvino"] and doc["not_comparable"] == []
    proc = edge_bench("compare", str(ort), str(ov), store=store)
    assert proc.stdout.splitlines()[2].startswith("differs: ") and "backend onnxruntime vs openvino" in proc.stdout
    proc = edge_bench("compare", str(ort), str(resnet), store=store)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "different models (digits_cnn vs resnet8)" in lines[0]
    assert "--force" in lines[0]
    proc = edge_bench("compare", str(ort), str(resnet), "--force", store=store)
    assert proc.returncode == 1 and "forced: different models" in proc.stdout and "REGRESSION" in proc.stdout


def test_usage_mistakes_are_one_line_and_exit_2(tmp_path):
    store = tmp_path / "s.sqlite"
    rng = np.random.default_rng(2)
    with Store(store) as st:
        one = st.add_run(result(work(rng, 500)), target="a", campaign="c")
        two = st.add_run(result(work(rng, 500)), target="b", campaign="c")
    for args, said in (
        (("compare", str(one)), "give two runs"),
        (("compare", "--a", str(one)), "--a RUN... needs --b"),
        (("compare", str(one), "--a", str(one), "--b", str(two)), "give no RUN"),
        (("compare", "--baseline", "x"), "takes the RUN"),
        (("compare", "--a", "campaign:c", "--b", str(two)), "name one (campaign:c/a)"),
        (("compare", "--a", "campaign:nope", "--b", str(two)), "no runs of campaign 'nope'"),
        (("compare", "--a", "5-1", "--b", str(two)), "run range '5-1'"),
        (("compare", str(one), str(two), "--metrics", "p42"), "unknown 'p42'"),
        (("compare", str(one), str(two), "--run-spread", "-1"), "run-spread"),
        (("compare", "--a", str(one), str(one), "--b", str(two)), f"A: run {one} is given twice"),
        (("compare", "--a", str(one), "--b", f"{one}-{two}"), f"run {one} is on both sides"),
    ):
        proc = edge_bench(*args, store=store)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and said in lines[0], (args, proc.stderr)
    rc, out, _ = in_process("compare", "--a", "campaign:c/a", "--b", "campaign:c/b", store=store)
    assert rc == 0 and "provisional" in out and "about" in out
