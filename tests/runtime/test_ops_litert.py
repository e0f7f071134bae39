"""LiteRT's per-op placement (issue 29, edge_runtime/ops/litert_ops.py) on the real engine and the committed models:
FP32 models whole under XNNPACK, the INT8 ones as the installed LiteRT places them (its version read, the behaviour
of each known version written down with where it was measured), the CUMSUM model in two partitions around the one op
XNNPACK lacks, and still right; no delegate, a delegate that does not load.

The tflite_runtime 2.14 cases run in .venv-tflite-runtime with EDGE_RUNTIME_TFLITE_IMPL=tflite-runtime (marker
tflite_runtime, like test_tflite_runtime.py); everything else runs on the library edge_runtime picks here."""

from __future__ import annotations

import hashlib
import importlib.util
import os

import numpy as np
import pytest
from conftest import ARTIFACTS, MODELS, artifact, need

import edge_runtime
from edge_runtime import DeviceError, FallbackWarning
from edge_runtime.errors import UserError
from edge_runtime.ops.litert_ops import absorbed, ops_report, placement, split_nodes
from edge_runtime.ops.profile import profile_model

CUMSUM = MODELS / "partial_cumsum" / "partial_cumsum_fp32.tflite"
REFERENCE = [a for a in ARTIFACTS if a["format"] == "tflite" and a["model"] != "partial_cumsum"]
FP32 = [a["file"] for a in REFERENCE if a["precision"] == "fp32"]
INT8 = [a["file"] for a in REFERENCE if a["precision"] == "int8"]
IN_TFLRT_ENV = os.environ.get("EDGE_RUNTIME_TFLITE_IMPL") == "tflite-runtime" and np.__version__.startswith("1.")
needs_tflrt_env = pytest.mark.skipif(
    not IN_TFLRT_ENV,
    reason="runs in .venv-tflite-runtime with EDGE_RUNTIME_TFLITE_IMPL=tflite-runtime (make test's second line)",
)
ALL_OPS = "every op"
QUICK_RUN = dict(iterations=5, warmup=1, sandbox=False)
# What the default XNNPACK leaves on the CPU in each INT8 reference model, per library and version (major.minor), as
# measured (research 29, x86-64 with AVX-512): a new version is not assumed to behave the same; record it here.
INT8_FALLBACK = {
    # XNNPACK does not take INT8 SOFTMAX; the models without a softmax are whole under it.
    ("ai-edge-litert", "2.3"): {
        "resnet8": {"SOFTMAX": 1},
        "dscnn_kws": {"SOFTMAX": 1},
        "mobilenet_v1_025_vww": {"SOFTMAX": 1},
        "digits_cnn": {},
        "fc_autoencoder_ad": {},
    },
    # 2.14's default XNNPACK takes no INT8 model at all (its quantized support was not on by default).
    ("tflite-runtime", "2.14"): dict.fromkeys(
        ["resnet8", "dscnn_kws", "mobilenet_v1_025_vww", "digits_cnn", "fc_autoencoder_ad"], ALL_OPS
    ),
}


def report(path, **kw) -> dict:
    need("tflite")
    return ops_report(path, sandbox=False, **kw)


def library(r: dict) -> tuple[str, str]:
    """(distribution, major.minor) of the LiteRT that made the report."""
    return r["backend"]["details"]["library"], ".".join(r["backend"]["version"].split(".")[:2])


def assert_consistent(r: dict) -> None:
    """What holds whatever the version: every op placed once; partitions (the delegate's, then the CPU's ops as one,
    as ONNX Runtime counts them), fallback and verdict agree with the rows; no time claimed."""
    rows = r["ops"]
    assert r["engine"] == "tflite" and r["time_source"] == "placement only"
    assert any("no op profiler" in n for n in r["notes"])
    assert all(o["mean_us"] is None and o["p99_us"] is None and o["share"] is None for o in rows)
    delegated = [o for o in rows if o["status"] == "delegated"]
    assert sum(p["ops"] for p in r["partitions"] if p["where"] != "CPU") == len(delegated)
    assert sum(p["ops"] for p in r["partitions"]) == len(rows)
    assert sum(sum(p["op_types"].values()) for p in r["partitions"]) == len(rows)
    cpu = [p for p in r["partitions"] if p["where"] == "CPU"]
    assert [p["ops"] for p in cpu] == ([len(rows) - len(delegated)] if len(delegated) < len(rows) else [])
    assert r["partitions"][-len(cpu) or len(r["partitions"]) :] == cpu  # the CPU's part last
    assert r["fallback"]["count"] == sum(r["fallback"]["types"].values())
    assert r["fallback"]["count"] == sum(o["status"] == "fallback" for o in rows)
    assert all((o["where"] == "CPU") == (o["status"] != "delegated") for o in rows)
    want = "not delegated" if not delegated else "fully delegated" if len(delegated) == len(rows) else "partial"
    assert r["verdict"] == want


def test_the_placement_model_is_what_its_builder_writes():
    """`make models` (models/partial_tflite.py) writes the committed bytes again, with no TensorFlow: the manifest's
    sha256, the file's, and the builder's output here are one."""
    pytest.importorskip(
        "ai_edge_litert.tools.flatbuffer_utils", reason="ai-edge-litert: pip install 'edge-runtime[tflite]'"
    )
    spec = importlib.util.spec_from_file_location("partial_tflite", MODELS / "partial_tflite.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    entry = next(a for a in ARTIFACTS if a["model"] == "partial_cumsum")
    assert MODELS / entry["file"] == CUMSUM and entry["provenance"] == builder.PROVENANCE
    assert hashlib.sha256(builder.model_bytes()).hexdigest() == entry["sha256"]
    assert hashlib.sha256(CUMSUM.read_bytes()).hexdigest() == entry["sha256"]


def test_the_walk_finds_what_a_delegate_node_replaced():
    """absorbed() on a diamond (0: t0->t1, 1: t1->t2, 2: t1->t3, 3: t2,t3->t4), by a node over all of it, over the
    part after op 0, and over op 3 alone; a weight tensor (t9, no producer) is an input like any other."""
    ops = [
        {"index": 0, "op_name": "A", "inputs": [0, 9], "outputs": [1]},
        {"index": 1, "op_name": "B", "inputs": [1], "outputs": [2]},
        {"index": 2, "op_name": "C", "inputs": [1, -1], "outputs": [3]},
        {"index": 3, "op_name": "D", "inputs": [2, 3], "outputs": [4]},
    ]
    node = {"index": 4, "op_name": "DELEGATE"}
    assert absorbed(ops, {**node, "inputs": [0, 9], "outputs": [4]}) == {0, 1, 2, 3}
    assert absorbed(ops, {**node, "inputs": [1], "outputs": [4]}) == {1, 2, 3}
    assert absorbed(ops, {**node, "inputs": [2, 3], "outputs": [4]}) == {3}
    assert split_nodes([*ops, node, {**node, "index": 5}]) == (ops, [node, {**node, "index": 5}])
    assert split_nodes(ops) == (ops, [])


def test_the_model_ops_are_the_nodes_before_allocation():
    """The split at the first DELEGATE node gives the op list an interpreter holds before allocate_tensors (where
    XNNPACK is applied), in the same order: checked on a bare interpreter of the same library."""
    need("tflite")
    from edge_runtime.runtime.backends.tflite_backend import _impl

    _, mod = _impl()
    for path in (CUMSUM, artifact("resnet8", "_int8.tflite"), artifact("resnet8", "_fp32.tflite")):
        it = mod.Interpreter(model_path=str(path))
        before = [it._interpreter.NodeName(i) for i in range(it._interpreter.NumNodes())]
        assert [o["type"] for o in report(path)["ops"]] == before


@pytest.mark.parametrize("file", FP32)
def test_fp32_models_are_whole_under_xnnpack(file):
    r = report(MODELS / file)
    assert r["engine"] == "tflite"
    check_fp32_whole(r)


def check_fp32_whole(r: dict) -> None:
    """Every op of an FP32 model under XNNPACK, in one partition, nothing fallen back or copied."""
    assert_consistent(r)
    assert r["verdict"] == "fully delegated"
    assert {o["where"] for o in r["ops"]} == {"XNNPACK"} and {o["precision"] for o in r["ops"]} == {"fp32"}
    assert len(r["partitions"]) == 1 and r["partitions"][0]["ops"] == len(r["ops"])
    assert r["fallback"] == {"count": 0, "types": {}} and r["copies"] == {"count": 0, "types": {}}


@pytest.mark.parametrize("file", INT8)
def test_int8_placement_is_what_this_litert_version_does(file):
    r = report(MODELS / file)
    assert r["engine"] == "tflite"
    check_int8_placement(r, file)


def check_int8_placement(r: dict, file: str) -> None:
    """An INT8 model's placement as INT8_FALLBACK records it for the library that ran it (a library not recorded
    there: skipped, saying so)."""
    assert_consistent(r)
    assert any(o["precision"] == "int8" for o in r["ops"])
    lib = library(r)
    if lib not in INT8_FALLBACK:
        pytest.skip(f"{lib[0]} {r['backend']['version']}: its INT8 placement is not recorded (INT8_FALLBACK)")
    model = next(a["model"] for a in REFERENCE if a["file"] == file)
    want = INT8_FALLBACK[lib][model]
    if want == ALL_OPS:
        assert r["verdict"] == "not delegated" and r["fallback"]["count"] == len(r["ops"])
    else:
        assert r["fallback"]["types"] == want
        # the softmax is last: everything before it is one partition, and the CPU's the other
        assert [p["where"] for p in r["partitions"]] == ["XNNPACK"] + (["CPU"] if want else [])
        assert r["verdict"] == ("partial" if want else "fully delegated")


def test_resnet8_int8_leaves_its_softmax_on_the_cpu():
    """The finding of research 29 on ai-edge-litert 2.3: XNNPACK takes 14 of resnet8_int8's 15 ops, not the INT8
    SOFTMAX, which is named as the fallback and in the notes."""
    r = report(artifact("resnet8", "_int8.tflite"))
    if library(r) != ("ai-edge-litert", "2.3"):
        pytest.skip(f"measured on ai-edge-litert 2.3, this is {' '.join(library(r))} (see INT8_FALLBACK)")
    cpu = [o for o in r["ops"] if o["where"] == "CPU"]
    assert [(o["type"], o["precision"], o["status"], o["kernel"]) for o in cpu] == [
        ("SOFTMAX", "int8", "fallback", "builtin")
    ]
    assert r["partitions"] == [
        {"where": "XNNPACK", "ops": 14, "op_types": {"CONV_2D": 9, "ADD": 3, "FULLY_CONNECTED": 1, "MEAN": 1}},
        {"where": "CPU", "ops": 1, "op_types": {"SOFTMAX": 1}},
    ]
    assert "XNNPACK left 1 of 15 op(s) on LiteRT's builtin CPU kernels: SOFTMAX x1" in r["notes"]


def check_cumsum_partial(session) -> None:
    """Two XNNPACK partitions around CUMSUM, which runs on the CPU, and the output still numpy's."""
    r = placement(session)
    assert_consistent(r)
    assert r["verdict"] == "partial"
    assert [(o["name"], o["type"], o["where"], o["status"]) for o in r["ops"]] == [
        ("added", "ADD", "XNNPACK", "delegated"),
        ("cumsum", "CUMSUM", "CPU", "fallback"),
        ("output", "MUL", "XNNPACK", "delegated"),
    ]
    assert r["ops"][0]["kernel"].startswith("partition 1 ") and r["ops"][2]["kernel"].startswith("partition 2 ")
    assert r["partitions"] == [
        {"where": "XNNPACK", "ops": 1, "op_types": {"ADD": 1}},
        {"where": "XNNPACK", "ops": 1, "op_types": {"MUL": 1}},
        {"where": "CPU", "ops": 1, "op_types": {"CUMSUM": 1}},
    ]
    assert r["fallback"] == {"count": 1, "types": {"CUMSUM": 1}}
    x = np.random.default_rng(29).standard_normal((1, 64)).astype(np.float32)
    got = session.infer({"input": x})["output"]
    np.testing.assert_allclose(got, np.cumsum(x + 1, axis=1) * 0.5, rtol=1e-5, atol=1e-5)


def test_cumsum_model_is_two_partitions_around_the_cpu_op_and_still_right():
    need("tflite")
    with edge_runtime.load(CUMSUM, backend="tflite", sandbox=False) as s:
        check_cumsum_partial(s)
        check_cumsum_partial(s)  # reading the placement changed nothing: the same twice, the run still right


def test_no_delegate_is_not_delegated_and_nothing_falls_back():
    for path in (CUMSUM, artifact("resnet8", "_fp32.tflite")):
        r = report(path, options={"xnnpack": "0"})
        assert_consistent(r)
        assert r["verdict"] == "not delegated" and [(p["where"], p["ops"]) for p in r["partitions"]] == [
            ("CPU", len(r["ops"]))
        ]
        assert {(o["where"], o["kernel"], o["status"]) for o in r["ops"]} == {("CPU", "builtin", "cpu")}
        assert r["fallback"] == {"count": 0, "types": {}}
        assert any(n.startswith("no delegate (xnnpack=0)") for n in r["notes"])


def test_a_delegate_that_does_not_load(tmp_path):
    """Refused as a run refuses it; with fallback allowed, the placement is the one the run falls back to (XNNPACK),
    and the note says why."""
    nope = str(tmp_path / "libnope_delegate.so")
    with pytest.raises(DeviceError, match="does not load"):
        report(CUMSUM, delegate=nope)
    with pytest.warns(FallbackWarning):
        r = report(CUMSUM, delegate=nope, fallback=True)
    assert r["backend"]["fallback"] is True and r["backend"]["delegate"] is None
    assert r["fallback"]["types"] == {"CUMSUM": 1} and len(r["partitions"]) == 3
    assert [n for n in r["notes"] if n.startswith("fell back")] == [f"fell back: {r['backend']['fallback_reason']}"]
    assert "libnope_delegate.so" in r["backend"]["fallback_reason"]


def test_only_an_open_tflite_session():
    need("tflite")
    s = edge_runtime.load(CUMSUM, backend="tflite", sandbox=False)
    s.close()
    with pytest.raises(UserError, match="closed"):
        placement(s)
    need("onnxruntime")
    with (
        edge_runtime.load(artifact("digits_cnn", "_fp32.onnx"), sandbox=False) as s,
        pytest.raises(UserError, match="needs a tflite session"),
    ):
        placement(s)


@pytest.mark.tflite_runtime
@needs_tflrt_env
def test_placement_on_tflite_runtime_2_14():
    """2.14 (older board images): FP32 whole under XNNPACK, no INT8 model delegated at all, and the CUMSUM model
    split as on ai-edge-litert."""
    r = report(artifact("resnet8", "_fp32.tflite"))
    assert library(r) == ("tflite-runtime", "2.14")
    assert_consistent(r)
    assert r["verdict"] == "fully delegated"
    r = report(artifact("resnet8", "_int8.tflite"))
    assert_consistent(r)
    assert r["verdict"] == "not delegated" and [p["where"] for p in r["partitions"]] == ["CPU"]
    assert r["fallback"]["types"] == {"CONV_2D": 9, "ADD": 3, "FULLY_CONNECTED": 1, "MEAN": 1, "SOFTMAX": 1}
    with edge_runtime.load(CUMSUM, backend="tflite", sandbox=False) as s:
        assert s.backend.details["library"] == "tflite-runtime"
        check_cumsum_partial(s)


@pytest.mark.tflite_runtime
@needs_tflrt_env
@pytest.mark.parametrize("file", INT8)
def test_int8_placement_on_tflite_runtime(file):
    r = report(MODELS / file)
    assert library(r)[0] == "tflite-runtime"  # this lane's library, not ai-edge-litert
    check_int8_placement(r, file)


@pytest.mark.tflite_runtime
@needs_tflrt_env
@pytest.mark.parametrize("file", FP32)
def test_fp32_placement_on_tflite_runtime(file):
    r = report(MODELS / file)
    assert library(r)[0] == "tflite-runtime"  # this lane's library, not ai-edge-litert
    check_fp32_whole(r)


def check_ops_after_a_fallback(tmp_path) -> None:
    """`edge-runtime ops` with a delegate that does not load and fallback allowed: the target is the delegate asked
    for, the ops ran on what the run fell back to (XNNPACK here), so nothing was delegated and every op fell back;
    the fallback is said once."""
    nope = str(tmp_path / "libnope_delegate.so")
    with pytest.warns(FallbackWarning):
        rep = profile_model(
            artifact("resnet8", "_fp32.tflite"), backend="tflite", delegate=nope, fallback=True, **QUICK_RUN
        )
    n = len(rep.ops)
    assert rep.target == "libnope_delegate.so" and rep.engine["fallback"] is True
    assert rep.verdict == f"not delegated: all {n} ops on XNNPACK"
    assert rep.fallback.count == n and sum(rep.fallback.types.values()) == n
    assert sum("fell back" in note for note in rep.notes) == 1


def test_ops_after_a_delegate_fell_back_is_not_delegated(tmp_path):
    need("tflite")
    check_ops_after_a_fallback(tmp_path)


@pytest.mark.tflite_runtime
@needs_tflrt_env
def test_ops_after_a_delegate_fell_back_on_tflite_runtime(tmp_path):
    check_ops_after_a_fallback(tmp_path)


def test_an_unknown_copy_count_stays_unknown(monkeypatch):
    """An external delegate copies inside its own nodes, which LiteRT does not show: the count is None in the
    profile and "unknown" in the table, not 0."""
    need("tflite")
    from edge_runtime.ops import litert_ops
    from edge_runtime.program.bench_text import counted_text

    monkeypatch.setattr(litert_ops, "copies", lambda backend: {"count": None, "types": {}})
    with edge_runtime.load(CUMSUM, backend="tflite", sandbox=False) as s:
        got = litert_ops.profile(s, {}, iterations=1, warmup=1)
    assert got.copies.count is None and got.copies.to_dict() == {"count": None, "types": {}}
    assert counted_text(got.copies.to_dict(), "0") == "unknown"
