"""edge-runtime quantize on the reference FP32 models with both paths, an accuracy budget that plain INT8 misses,
and bad input. Real ONNX Runtime quantization, real NNCF, real backends."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from conftest import MANIFEST, MODELS, artifact, need, tomllib
from helpers import assert_one_line_error, cli, run_cli, strict_json

from edge_runtime.quantize import QuantizeConfig, choose_activations, run
from edge_runtime.quantize.ort_path import choose_flavour

DIGITS_CAL = MODELS / "digits_cnn" / "digits_calibration.npz"
DIGITS_VAL = MODELS / "digits_cnn" / "digits_test.npz"
NAMES = [m["name"] for m in MANIFEST["model"]]


def _nncf():
    pytest.importorskip("nncf", reason="NNCF not installed: pip install 'edge-runtime[quantize]'")


def calibration_for(name: str, tmp: Path, n: int = 32) -> Path:
    if name == "digits_cnn":
        return DIGITS_CAL
    spec = next(a for a in MANIFEST["artifact"] if a["model"] == name and a["file"].endswith("_fp32.onnx"))
    shape = spec["inputs"][0]["shape"]
    x = np.random.default_rng(1).random((n, *shape[1:]), dtype=np.float32)
    p = tmp / f"{name}_cal.npz"
    np.savez(p, **{spec["inputs"][0]["name"]: x})
    return p


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
@pytest.mark.parametrize("name", NAMES)
def test_reference_models_quantize_run_and_shrink(name, backend, tmp_path):
    need(backend)
    need("onnxruntime")
    if backend == "openvino":
        _nncf()
    suffix = ".onnx" if backend == "onnxruntime" else ".xml"
    trained = name == "digits_cnn"
    cfg = QuantizeConfig(
        model=str(artifact(name, "_fp32.onnx")),
        calibration=str(calibration_for(name, tmp_path)),
        out=str(tmp_path / f"{name}_q{suffix}"),
        backend=backend,
        validation=str(DIGITS_VAL) if trained else None,
        bench_iterations=30,
    )
    res = run(cfg)
    doc = res.doc
    assert doc["precision"] == "int8" and doc["kept_fp32"] == []
    assert doc["size_bytes"]["quantized"] < doc["size_bytes"]["fp32"]
    out = Path(doc["out"]["path"])
    import edge_runtime

    with edge_runtime.load(out, backend=backend, sandbox=False) as s:
        assert s.backend.name == backend
        feeds = {t.name: np.zeros(t.shape, t.dtype) for t in s.inputs}
        assert np.all(np.isfinite(s.infer(feeds)[s.outputs[0].name]))
    if trained:
        acc = doc["accuracy_int8"]
        assert acc["fp32_top1"] - acc["int8_top1"] <= 0.01  # within 1 point on the digits split
        assert acc["top1_agreement"] >= 0.98
    else:
        assert any("calibration samples" in w for w in res.warnings)  # 32 < 100: warned


def outlier_model(tmp: Path) -> Path:
    """digits_cnn FP32 with one hidden unit of dense5 scaled x1000 and dense6 compensating: the same FP32 function,
    but the activation between dense5 and dense6 now has one outlier channel that flattens per-tensor INT8."""
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    m = onnx.load(str(artifact("digits_cnn", "_fp32.onnx")))
    inits = {i.name: i for i in m.graph.initializer}
    w5, b5, w6 = (numpy_helper.to_array(inits[n]).copy() for n in ("dense5_w", "dense5_b", "dense6_w"))
    k = int(np.argmax(np.abs(w6).sum(1)))
    w5[:, k] *= 1000
    b5[k] *= 1000
    w6[k, :] /= 1000
    for n, a in (("dense5_w", w5), ("dense5_b", b5), ("dense6_w", w6)):
        inits[n].CopyFrom(numpy_helper.from_array(a.astype(np.float32), n))
    p = tmp / "outlier.onnx"
    onnx.save(m, str(p))
    return p


def test_mixed_precision_meets_a_budget_plain_int8_misses(tmp_path):
    need("onnxruntime")
    model = outlier_model(tmp_path)
    cfg = QuantizeConfig(
        model=str(model),
        calibration=str(DIGITS_CAL),
        out=str(tmp_path / "o.onnx"),
        validation=str(DIGITS_VAL),
        max_accuracy_drop=1.0,
        bench_iterations=30,
    )
    doc = run(cfg).doc
    assert doc["accuracy_int8"]["drop_points"] > 1.0  # plain INT8 misses the budget
    mixed = doc["accuracy_mixed"]
    assert mixed["drop_points"] <= 1.0 and doc["meets_budget"] is True
    assert doc["precision"] == "mixed"
    assert set(doc["kept_fp32"]) == {"dense5", "dense6"}  # the two layers around the outlier, nothing else
    assert mixed["sensitivity"] and mixed["trials"] >= 4
    assert {"fp32_p50", "int8_p50", "mixed_p50"} <= set(doc["latency_us"])  # the price of the kept layers
    assert "kept_fp32 = [" in doc["manifest_entry"] and 'precision = "mixed"' in doc["manifest_entry"]


def test_nncf_accuracy_control_meets_the_same_budget(tmp_path):
    need("openvino")
    _nncf()
    model = outlier_model(tmp_path)
    cfg = QuantizeConfig(
        model=str(model),
        calibration=str(DIGITS_CAL),
        out=str(tmp_path / "o.xml"),
        backend="openvino",
        validation=str(DIGITS_VAL),
        max_accuracy_drop=1.0,
        bench_iterations=30,
    )
    doc = run(cfg).doc
    assert doc["meets_budget"] is True
    assert doc["kept_fp32"] and set(doc["kept_fp32"]) <= {"dense5", "dense6"}
    assert {"fp32_p50", "int8_p50", "mixed_p50"} <= set(doc["latency_us"])


def test_manifest_entry_matches_the_written_model(tmp_path):
    need("onnxruntime")
    out = tmp_path / "d.onnx"
    proc = run_cli(
        "quantize",
        str(artifact("digits_cnn", "_fp32.onnx")),
        "--calibration",
        str(DIGITS_CAL),
        "--validation",
        str(DIGITS_VAL),
        "--out",
        str(out),
        "--method",
        "percentile",
        "--per-tensor",
    )
    assert proc.returncode == 0, proc.stderr
    assert "activations" in proc.stdout and "INT8" in proc.stdout and "manifest" in proc.stdout
    entry = tomllib.loads(Path(str(out) + ".manifest.toml").read_text())["artifact"][0]
    import hashlib

    assert entry["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert entry["precision"] == "int8" and entry["calibration_samples"] == 200
    assert "--method percentile --per-tensor" in entry["provenance"]
    assert 0.9 < entry["accuracy"]["int8_top1"] <= 1.0


@pytest.mark.parametrize(
    ("machine", "flags", "want"),
    [
        ("x86_64", {"avx2", "fma"}, "u8"),
        ("x86_64", {"avx2", "avx512_vnni"}, "s8"),
        ("x86_64", {"avx_vnni"}, "s8"),
        ("aarch64", {"asimd", "asimddp"}, "s8"),
    ],
)
def test_activation_type_from_the_cpu(machine, flags, want):
    got, why = choose_activations("auto", machine, flags)
    assert got == want and why
    assert choose_activations("u8", machine, flags)[0] == "u8"


@pytest.mark.parametrize(
    ("p50", "drops", "budget", "kept", "faster"),
    [
        ({"fp32": 133.9, "u8": 85.3, "s8": 181.6}, {}, None, "u8", True),  # the AMD EPYC that S8S8 lost on
        ({"fp32": 133.9, "u8": 181.6, "s8": 85.3}, {}, None, "s8", True),  # the other way round
        ({"fp32": 50.0, "u8": 60.0, "s8": 70.0}, {}, None, "u8", False),  # neither beats FP32: said, not hidden
        ({"fp32": 133.9, "u8": 85.3, "s8": 100.0}, {"u8": 3.0, "s8": 0.5}, 1.0, "s8", True),  # faster, but over
        ({"fp32": 133.9, "u8": 85.3, "s8": 100.0}, {"u8": 3.0, "s8": 2.0}, 1.0, "s8", True),  # neither: least drop
    ],
)
def test_the_kept_flavour_follows_the_measurement(p50, drops, budget, kept, faster):
    got = choose_flavour(p50, drops, budget)
    assert got["type"] == kept and got["faster_than_fp32"] is faster and got["why"]
    m = got["measured"]
    assert m["u8_speedup"] == pytest.approx(p50["fp32"] / p50["u8"], abs=1e-3)
    assert m["s8_speedup"] == pytest.approx(p50["fp32"] / p50["s8"], abs=1e-3)


def test_auto_quantizes_both_flavours_and_keeps_the_faster(tmp_path):
    need("onnxruntime")
    model, cal = str(artifact("resnet8", "_fp32.onnx")), str(calibration_for("resnet8", tmp_path))
    proc = run_cli("quantize", model, "--calibration", cal, "--out", str(tmp_path / "q.onnx"), "--json", "-")
    assert proc.returncode == 0, proc.stderr
    import json

    doc = json.loads(proc.stdout)
    act, m = doc["activations"], doc["activations"]["measured"]
    other = "s8" if act["type"] == "u8" else "u8"
    assert m[f"{act['type']}_p50_us"] <= m[f"{other}_p50_us"]  # the kept one is the faster of the two measured
    assert act["faster_than_fp32"] == (m[f"{act['type']}_p50_us"] < m["fp32_p50_us"])
    assert isinstance(doc["faster_than_fp32"], bool) and doc["latency_us"]["speedup"] > 0
    assert "U8S8" in proc.stderr and "S8S8" in proc.stderr  # both flavours' figures said as it goes
    forced = run_cli("quantize", model, "--calibration", cal, "--out", str(tmp_path / "q8.onnx"), "--activations", "s8",
                     "--json", "-")  # fmt: skip
    fdoc = json.loads(forced.stdout)
    assert fdoc["activations"]["type"] == "s8" and "measured" not in fdoc["activations"]
    entry = tomllib.loads(Path(str(tmp_path / "q.onnx") + ".manifest.toml").read_text())["artifact"][0]
    assert (entry["activations"], entry["weights"]) == (act["type"], "s8")
    assert entry["speedup"] == pytest.approx(doc["latency_us"]["speedup"], abs=1e-3)


def test_openvino_auto_measures_both_nncf_presets_and_keeps_the_faster(tmp_path):
    need("openvino")
    pytest.importorskip("nncf", reason="nncf: pip install 'edge-runtime[quantize]'")
    model, cal = str(artifact("resnet8", "_fp32.onnx")), str(calibration_for("resnet8", tmp_path))
    out = tmp_path / "q.xml"
    proc = run_cli("quantize", model, "--calibration", cal, "--backend", "openvino", "--out", str(out), "--json", "-")
    assert proc.returncode == 0, proc.stderr
    import json

    doc = json.loads(proc.stdout)
    act, m = doc["activations"], doc["activations"]["measured"]
    assert act["type"] in ("performance", "mixed")
    other = "mixed" if act["type"] == "performance" else "performance"
    assert m[f"{act['type']}_p50_us"] <= m[f"{other}_p50_us"] and m["fp32_p50_us"] > 0
    assert act["faster_than_fp32"] == (m[f"{act['type']}_p50_us"] < m["fp32_p50_us"])
    assert "Performance" in proc.stderr and "Mixed" in proc.stderr
    entry = tomllib.loads(Path(str(out) + ".manifest.toml").read_text())["artifact"][0]
    assert entry["nncf_preset"] == act["type"] and entry["weights_sha256"]


def test_calibration_folder_of_several_files(tmp_path):
    need("onnxruntime")
    x = np.load(DIGITS_CAL)["x"]
    folder = tmp_path / "cal"
    folder.mkdir()
    np.save(folder / "a.npy", x[:120])
    np.savez(folder / "b.npz", x=x[120:])
    doc = run(
        QuantizeConfig(
            model=str(artifact("digits_cnn", "_fp32.onnx")),
            calibration=str(folder),
            out=str(tmp_path / "q.onnx"),
            bench_iterations=20,
        )
    ).doc
    assert doc["calibration_samples"] == 200


def test_bad_input(tmp_path):
    need("onnxruntime")
    fp32 = str(artifact("digits_cnn", "_fp32.onnx"))
    out = str(tmp_path / "q.onnx")
    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.zeros((10, 64), np.float32))
    assert_one_line_error(
        run_cli("quantize", fp32, "--calibration", str(wrong), "--out", out),
        str(wrong),
        "expects samples of shape (1, 8, 8, 1), got an array of shape (10, 64)",
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line_error(
        run_cli("quantize", fp32, "--calibration", str(empty), "--out", out), "holds no .npy or .npz files"
    )
    assert_one_line_error(
        run_cli("quantize", str(artifact("digits_cnn", "_int8.onnx")), "--calibration", str(DIGITS_CAL), "--out", out),
        "already quantized",
    )
    assert_one_line_error(
        run_cli("quantize", fp32, "--calibration", str(DIGITS_CAL), "--out", out, "--method", "kl"),
        "argument --method: invalid choice: 'kl'",
    )
    assert_one_line_error(
        run_cli("quantize", fp32, "--calibration", str(tmp_path / "nope.npz"), "--out", out), "no such file"
    )
    assert_one_line_error(
        run_cli("quantize", fp32, "--calibration", str(DIGITS_CAL), "--out", out, "--max-accuracy-drop", "1"),
        "needs --validation",
    )
    assert_one_line_error(
        run_cli("quantize", fp32, "--calibration", str(DIGITS_CAL), "--out", str(tmp_path / "q.xml")),
        "writes a .onnx file",
    )
    assert not Path(out).exists()


def test_out_may_not_overwrite_an_input(tmp_path):
    need("onnxruntime")
    model = tmp_path / "m.onnx"
    model.write_bytes(artifact("digits_cnn", "_fp32.onnx").read_bytes())
    before = model.read_bytes()
    proc = run_cli("quantize", str(model), "--calibration", str(DIGITS_CAL), "--out", str(model))
    assert_one_line_error(proc, "is the model", "refusing to overwrite it")
    assert model.read_bytes() == before


def test_unnamed_nodes_can_still_be_kept_in_fp32(tmp_path):
    need("onnxruntime")
    onnx = pytest.importorskip("onnx")
    m = onnx.load(str(outlier_model(tmp_path)))
    for n in m.graph.node:
        n.name = ""
    p = tmp_path / "unnamed.onnx"
    onnx.save(m, str(p))
    doc = run(
        QuantizeConfig(
            model=str(p),
            calibration=str(DIGITS_CAL),
            out=str(tmp_path / "u.onnx"),
            validation=str(DIGITS_VAL),
            max_accuracy_drop=1.0,
            bench_iterations=20,
        )
    ).doc
    assert doc["meets_budget"] and 0 < len(doc["kept_fp32"]) < 4 and "" not in doc["kept_fp32"]
    assert doc["size_bytes"]["ratio"] < 1.0  # really mixed, not everything left in FP32


def test_one_hot_labels_are_accepted_and_garbage_labels_refused(tmp_path):
    need("onnxruntime")
    y = np.load(DIGITS_VAL)["y"]
    x = np.load(DIGITS_VAL)["x"]
    val = tmp_path / "val.npy"
    np.save(val, x)
    onehot = tmp_path / "onehot.npy"
    np.save(onehot, np.eye(10, dtype=np.float32)[y])
    doc = run(
        QuantizeConfig(
            model=str(artifact("digits_cnn", "_fp32.onnx")),
            calibration=str(DIGITS_CAL),
            out=str(tmp_path / "q.onnx"),
            validation=str(val),
            labels=str(onehot),
            bench_iterations=20,
        )
    ).doc
    assert doc["accuracy_int8"]["fp32_top1"] > 0.95
    scalar = tmp_path / "scalar.npy"
    np.save(scalar, np.array(3.5))
    proc = run_cli(
        "quantize",
        str(artifact("digits_cnn", "_fp32.onnx")),
        "--calibration",
        str(DIGITS_CAL),
        "--validation",
        str(val),
        "--labels",
        str(scalar),
        "--out",
        str(tmp_path / "r.onnx"),
    )
    assert_one_line_error(proc, "expected one class index per sample")
    assert not (tmp_path / "r.onnx").exists()


# ------------------------------------------------------------------------------------ hostile cases (issue 9's reviews)
MODEL = artifact("digits_cnn", "_int8.onnx")
FP32 = artifact("digits_cnn", "_fp32.onnx")


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
@pytest.mark.parametrize("poison", ["all-nan", "one-minus-inf"])
def test_non_finite_calibration_or_validation_data_is_a_user_error(tmp_path, digits, backend, poison):
    need(backend)
    pytest.importorskip("nncf" if backend == "openvino" else "onnx")
    x = digits[0][:50].copy()
    if poison == "all-nan":
        x[:] = np.nan
    else:
        x[7, 0, 3, 0] = -np.inf
    bad = tmp_path / "bad.npy"
    np.save(bad, x)
    good = tmp_path / "good.npz"
    np.savez(good, x=digits[0][:50], y=digits[1][:50])
    out = tmp_path / ("q.onnx" if backend == "onnxruntime" else "q.xml")
    proc = cli("quantize", FP32, "--backend", backend, "--calibration", bad, "--out", out)
    sample = "0" if poison == "all-nan" else "7"
    assert_one_line_error(proc, str(bad), "input 'input'", "NaN or infinite", f"first in sample {sample}")
    proc = cli("quantize", FP32, "--backend", backend, "--calibration", good, "--validation", bad, "--out", out)
    assert_one_line_error(proc, "validation data", "NaN or infinite")
    assert not out.exists()


@pytest.mark.parametrize("damage", ["truncated", "bitflips"])
def test_a_broken_onnx_given_to_quantize(tmp_path, digits, damage):
    need("onnxruntime")
    from badmodels import flip_bytes

    data = FP32.read_bytes()
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(data[: len(data) // 2] if damage == "truncated" else flip_bytes(data, seed=3, count=40))
    calib = tmp_path / "c.npy"
    np.save(calib, digits[0][:20])
    proc = cli("quantize", bad, "--calibration", calib, "--out", tmp_path / "q.onnx")
    assert_one_line_error(proc, str(bad))


def test_quantize_on_openvino_sends_nothing_and_exits(tmp_path, digits):
    need("openvino")
    pytest.importorskip("nncf")
    home = tmp_path / "home"
    home.mkdir()
    calib = tmp_path / "c.npy"
    np.save(calib, digits[0][:40])
    env = {**os.environ, "HOME": str(home)}
    env.pop("ORT_DISABLE_TELEMETRY", None)
    for i in range(2):  # the telemetry sender used to hang the exit about every other run
        proc = cli(
            "quantize",
            FP32,
            "--backend",
            "openvino",
            "--calibration",
            calib,
            "--out",
            tmp_path / f"q{i}.xml",
            timeout=120,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr
    proc = cli("run", MODEL, timeout=60, env=env)  # ONNX Runtime: no device ID, no upload
    assert proc.returncode == 0, proc.stderr
    # OpenVINO itself (not only NNCF) writes ~/intel when imported with its telemetry package there: a run on it,
    # and info (which imports every backend in a child), must not either.
    for args in (("run", tmp_path / "q0.xml"), ("info",)):
        proc = cli(*args, timeout=60, env=env)
        assert proc.returncode == 0, proc.stderr
    assert list(home.iterdir()) == []  # no ~/intel, no ~/.cache/Microsoft


def test_quantize_with_a_300_character_data_path(tmp_path, digits):
    need("onnxruntime")
    long = "a" * 300
    good = tmp_path / "c.npz"
    np.savez(good, x=digits[0][:20], y=digits[1][:20])
    for extra in (
        ["--calibration", long],
        ["--calibration", good, "--validation", long],
        ["--calibration", good, "--validation", good, "--labels", long],
    ):
        proc = cli("quantize", FP32, *extra, "--out", tmp_path / "q.onnx")
        assert_one_line_error(proc, "file name too long")


def test_labels_must_name_the_model_classes(tmp_path, digits):
    need("onnxruntime")
    x, y = digits
    calib = tmp_path / "c.npy"
    np.save(calib, x[:40])
    for name, labels, needle in (
        ("minus", y[:40] - 100, "labels run from -100"),
        ("big", y[:40] + 1000, "but the model has 10 classes"),
        ("float", y[:40] + 0.5, "not whole numbers"),
    ):
        f = tmp_path / f"{name}.npy"
        np.save(f, labels)
        proc = cli(
            "quantize", FP32, "--calibration", calib, "--validation", calib, "--labels", f, "--out", tmp_path / "q.onnx"
        )
        assert_one_line_error(proc, f"--labels '{f}'", needle)


def test_hidden_and_other_files_in_a_calibration_folder_are_named(tmp_path, digits):
    need("onnxruntime")
    folder = tmp_path / "calib"
    folder.mkdir()
    np.save(folder / "a.npy", digits[0][:60])
    np.save(folder / ".hidden.npy", np.full((60, 8, 8, 1), np.nan, np.float32))  # would poison it if used
    (folder / "notes.txt").write_text("x")
    proc = cli("quantize", FP32, "--calibration", folder, "--out", tmp_path / "q.onnx", "--json")
    assert proc.returncode == 0, proc.stderr
    assert strict_json(proc.stdout)["calibration_samples"] == 60
    assert "2 entries not used (.hidden.npy, notes.txt)" in proc.stderr


def test_a_manifest_name_that_is_a_link_is_refused(tmp_path, digits):
    need("onnxruntime")
    victim = tmp_path / "user.txt"
    victim.write_text("mine")
    (tmp_path / "q.onnx.manifest.toml").symlink_to(victim)
    calib = tmp_path / "c.npy"
    np.save(calib, digits[0][:20])
    proc = cli("quantize", FP32, "--calibration", calib, "--out", tmp_path / "q.onnx")
    assert_one_line_error(proc, "--out (its manifest)", "refusing to write through a link")
    assert victim.read_text() == "mine"


def test_quantize_refuses_a_model_with_nothing_to_quantize_and_reads_n_samples(tmp_path):
    need("onnxruntime")
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    relu = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]))
    relu.opset_import[0].version = 17
    relu.ir_version = 8
    onnx.save(relu, tmp_path / "relu.onnx")
    calib = tmp_path / "c.npy"
    np.save(calib, np.random.default_rng(0).random((20, 1, 4), dtype=np.float32))  # (N, *input shape)
    proc = cli("quantize", tmp_path / "relu.onnx", "--calibration", calib, "--out", tmp_path / "q.onnx")
    assert_one_line_error(proc, "no Conv, Gemm, MatMul or ConvTranspose layer to quantize")
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.eye(4, dtype=np.float32).ravel().tolist())
    mm = helper.make_model(helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y], [w]))
    mm.opset_import[0].version = 17
    mm.ir_version = 8
    onnx.save(mm, tmp_path / "mm.onnx")
    proc = cli("quantize", tmp_path / "mm.onnx", "--calibration", calib, "--out", tmp_path / "q.onnx", "--json")
    assert proc.returncode == 0, proc.stderr
    assert strict_json(proc.stdout)["calibration_samples"] == 20
