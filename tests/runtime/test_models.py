"""The committed reference models: hashes against the manifest, every artifact on every backend that reads it,
FP32 agreement across backends, and INT8 accuracy on the digits split against FP32 and against the manifest."""

from __future__ import annotations

import hashlib
import os
import shutil

import numpy as np
import pytest
from conftest import ARTIFACTS, MANIFEST, MODELS, READERS, artifact, need
from helpers import assert_one_line_error, cli, make_fifo

import edge_runtime
from edge_runtime.runtime.accuracy import classify

MATRIX = [(a["file"], b) for a in ARTIFACTS for b in READERS[a["format"]]]


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("art", ARTIFACTS, ids=[a["file"] for a in ARTIFACTS])
def test_artifact_hash_matches_manifest(art):
    assert sha256(MODELS / art["file"]) == art["sha256"]
    if "weights_file" in art:
        assert sha256(MODELS / art["weights_file"]) == art["weights_sha256"]


def test_every_model_file_is_in_the_manifest():
    listed = {a["file"] for a in ARTIFACTS} | {a["weights_file"] for a in ARTIFACTS if "weights_file" in a}
    on_disk = {
        p.relative_to(MODELS).as_posix()
        for p in MODELS.rglob("*")
        if p.suffix in (".onnx", ".tflite", ".xml", ".bin") and ".venv" not in p.parts
    }
    assert on_disk == listed


def test_manifest_covers_all_models_and_formats():
    names = {m["name"] for m in MANIFEST["model"]}
    assert names == {"digits_cnn", "resnet8", "dscnn_kws", "mobilenet_v1_025_vww", "fc_autoencoder_ad"}
    for name in names:
        kinds = {(a["format"], a["precision"]) for a in ARTIFACTS if a["model"] == name}
        assert {("onnx", "fp32"), ("onnx", "int8"), ("openvino", "int8"), ("tflite", "int8")} <= kinds
    for m in MANIFEST["model"]:
        # Only digits_cnn is trained; the others must say they are for latency work only.
        assert m["trained"] == (m["name"] == "digits_cnn")
        if not m["trained"]:
            assert "not trained" in m["description"]


@pytest.mark.parametrize(("file", "backend"), MATRIX, ids=[f"{f}-{b}" for f, b in MATRIX])
def test_artifact_runs_on_backend(file, backend):
    need(backend)
    art = next(a for a in ARTIFACTS if a["file"] == file)
    with edge_runtime.load(MODELS / file, backend=backend, sandbox=False) as s:
        assert s.backend.name == backend
        assert s.backend.fallback is False
        # -1 in the manifest is a dynamic dimension (the *_dynamic files' batch): None in the session, fed 3 rows here
        assert [tuple(t.shape) for t in s.inputs] == [
            tuple(d if d >= 0 else None for d in i["shape"]) for i in art["inputs"]
        ]
        if backend != "openvino" or art["format"] != "tflite":  # OpenVINO's TFLite frontend keeps raw int8 I/O
            assert [str(t.dtype) for t in s.inputs] == [i["dtype"] for i in art["inputs"]]
        rng = np.random.default_rng(0)
        feeds = {}
        for t in s.inputs:
            x = rng.random(tuple(3 if d is None else d for d in t.shape), dtype=np.float32)
            feeds[t.name] = t.quantize(x) if t.dtype.kind in "iu" else x.astype(t.dtype)
        out = s.infer(feeds)
        assert list(out) == [t.name for t in s.outputs]
        for t, spec in zip(s.outputs, art["outputs"], strict=True):
            assert out[t.name].shape == tuple(d if d >= 0 else 3 for d in spec["shape"])
            assert np.all(np.isfinite(out[t.name].astype(np.float64)))


def _float_input(shape, seed):
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


@pytest.mark.parametrize("model", [m["name"] for m in MANIFEST["model"]])
def test_fp32_outputs_agree_across_backends(model):
    """FP32 ONNX on ONNX Runtime is the reference; OpenVINO (same file) and TFLite (same Keras model) must agree.

    Tolerance: |diff| <= 1e-4 + 1e-3 * |reference| (float32 sums in a different order, folded batch norms).
    """
    ref_path = artifact(model, "_fp32.onnx")
    others = [("openvino", ref_path), ("tflite", artifact(model, "_fp32.tflite"))]
    need("onnxruntime")
    with edge_runtime.load(ref_path, sandbox=False) as ref:
        inp = ref.inputs[0]
        xs = [_float_input(inp.shape, seed) for seed in range(4)]
        expected = [ref.infer({inp.name: x})[ref.outputs[0].name] for x in xs]
    compared = 0
    for backend, path in others:
        if not __import__("conftest").backend_installed(backend):
            continue
        with edge_runtime.load(path, backend=backend, sandbox=False) as s:
            for x, want in zip(xs, expected, strict=True):
                got = s.infer([x])[s.outputs[0].name]
                np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4, err_msg=f"{model} on {backend}")
        compared += 1
    assert compared >= 1, "no second backend installed to compare with"


DIGITS_RUNS = {  # backend -> (fp32 artifact, int8 artifact): the pairs the manifest's accuracy section describes
    "onnxruntime": ("_fp32.onnx", "_int8.onnx"),
    "openvino": ("_fp32.onnx", "_int8.xml"),
    "tflite": ("_fp32.tflite", "_int8.tflite"),
}


@pytest.mark.parametrize("backend", list(DIGITS_RUNS))
def test_digits_int8_accuracy(backend, digits):
    """INT8 agrees with FP32 on >= 99% of the split, loses at most 1 point, and matches the manifest's numbers."""
    need(backend)
    x, y = digits
    fp32, int8 = (artifact("digits_cnn", s) for s in DIGITS_RUNS[backend])
    p32 = classify(fp32, x, backend=backend, sandbox=False)
    p8 = classify(int8, x, backend=backend, sandbox=False)
    fp32_top1, int8_top1, agreement = np.mean(p32 == y), np.mean(p8 == y), np.mean(p8 == p32)
    assert agreement >= 0.99
    assert fp32_top1 - int8_top1 <= 0.01
    assert fp32_top1 >= 0.95  # the model really learned the digits
    recorded = next(m for m in MANIFEST["model"] if m["name"] == "digits_cnn")["accuracy"][backend]
    one_sample = 1.0 / len(y)
    assert abs(recorded["fp32_top1"] - fp32_top1) <= one_sample + 1e-9
    assert abs(recorded["int8_top1"] - int8_top1) <= one_sample + 1e-9
    assert abs(recorded["int8_fp32_agreement"] - agreement) <= one_sample + 1e-9


def test_int8_qdq_onnx_uses_u8_activations():
    """The QDQ model quantizes activations to uint8 (U8S8), as the manifest says: S8S8 measured slower than FP32 on
    x86 CPUs where U8S8 was faster (models/speedup.toml)."""
    for a in ARTIFACTS:
        if a["precision"] == "int8":
            assert (a["activations"], a["weights"]) == ("s8" if a["format"] == "tflite" else "u8", "s8"), a["file"]
    onnx = pytest.importorskip("onnx", reason="onnx is in the dev extra: pip install 'edge-runtime[dev]'")
    m = onnx.load(str(artifact("resnet8", "_int8.onnx")))
    inits = {i.name: i for i in m.graph.initializer}
    q_nodes = [n for n in m.graph.node if n.op_type == "QuantizeLinear"]
    assert q_nodes
    zero_point_types = {inits[n.input[2]].data_type for n in q_nodes if len(n.input) > 2 and n.input[2] in inits}
    assert zero_point_types == {onnx.TensorProto.UINT8}
    dq_weight_types = {
        inits[n.input[0]].data_type for n in m.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits
    }
    assert onnx.TensorProto.INT8 in dq_weight_types


def _weights(arrays) -> set[bytes]:
    """Every float32 tensor of more than one value, by its sorted values' bytes (layout-free, bit-exact); all-zero
    biases left out (TFLite drops them)."""
    return {np.sort(a.ravel()).tobytes() for a in arrays if a.dtype == np.float32 and a.size > 1 and np.any(a)}


@pytest.mark.parametrize("model", [m["name"] for m in MANIFEST["model"]])
def test_tflite_carries_the_onnx_weights_bit_for_bit(model):
    """Why `make models` gives the same bytes on any x86 CPU: batch norms are folded once, in numpy (float64), and
    both the ONNX export and the Keras model given to the TFLite converter carry those folded weights, so the FP32
    TFLite file holds exactly the ONNX file's numbers. (When TensorFlow folded them itself, its rounding followed the
    CPU, and these differed in their last bits.)"""
    onnx = pytest.importorskip("onnx", reason="onnx is in the dev extra: pip install 'edge-runtime[dev]'")
    litert = pytest.importorskip(
        "ai_edge_litert.interpreter", reason="ai-edge-litert: pip install 'edge-runtime[tflite]'"
    )
    from onnx import numpy_helper

    ref = _weights(numpy_helper.to_array(i) for i in onnx.load(str(artifact(model, "_fp32.onnx"))).graph.initializer)
    it = litert.Interpreter(str(artifact(model, "_fp32.tflite")))
    it.allocate_tensors()
    consts = []
    for d in it.get_tensor_details():
        try:
            consts.append(it.get_tensor(d["index"]))
        except ValueError:  # an intermediate tensor: no data outside an invocation
            continue
    assert ref and ref <= _weights(consts)


def test_digits_weights_are_the_source_of_its_artifacts():
    """Training rounds differently on different CPUs, so the trained weights are kept (digits_cnn_weights.npz) and
    every digits artifact is built from them: the FP32 ONNX holds exactly those numbers."""
    onnx = pytest.importorskip("onnx", reason="onnx is in the dev extra: pip install 'edge-runtime[dev]'")
    from onnx import numpy_helper

    with np.load(MODELS / "digits_cnn" / "digits_cnn_weights.npz") as z:
        kept = _weights(z[k] for k in z.files)
    exported = _weights(
        numpy_helper.to_array(i) for i in onnx.load(str(artifact("digits_cnn", "_fp32.onnx"))).graph.initializer
    )
    assert len(kept) == 8 and kept == exported


def test_speedups_recorded_where_the_models_were_built():
    """models/speedup.toml (`make models-speedup`): each model's committed INT8 flavour (U8S8, fixed so the files
    are the same wherever they are built) against FP32, and S8S8 beside it, measured on the machine that built them."""
    from conftest import tomllib

    with open(MODELS / "speedup.toml", "rb") as f:
        sp = tomllib.load(f)
    assert sp["cpu"] and sp["rounds"] >= 3
    assert {m["name"] for m in sp["model"]} == {m["name"] for m in MANIFEST["model"]}
    for m in sp["model"]:
        assert m["committed"] == "u8s8"
        for k in ("onnxruntime_u8s8_speedup", "onnxruntime_s8s8_speedup", "openvino_u8s8_speedup"):
            assert 0 < m[k] < 100, (m["name"], k)


# ------------------------------------------------------------------------------------ hostile cases (issue 9's reviews)
def test_a_fifo_as_the_model_is_refused_at_once(tmp_path):
    fifo = make_fifo(tmp_path, "m.onnx")
    for args in (
        ["run", fifo],
        ["bench", fifo, "--iterations", "5"],
        ["quantize", fifo, "--calibration", fifo, "--out", tmp_path / "q.onnx"],
    ):
        assert_one_line_error(cli(*args, timeout=60), str(fifo), "is a fifo, not a regular file")


def test_a_weights_file_that_is_a_fifo_a_device_link_or_a_directory(tmp_path):
    need("openvino")
    xml = artifact("digits_cnn", "_int8.xml")
    for kind, needle in (("fifo", "is a fifo"), ("zero", "is a character device"), ("dir", "is a directory")):
        d = tmp_path / kind
        d.mkdir()
        shutil.copyfile(xml, d / "m.xml")
        weights = d / "m.bin"
        if kind == "fifo":
            os.mkfifo(weights)
        elif kind == "zero":
            weights.symlink_to("/dev/zero")
        else:
            weights.mkdir()
        proc = cli("run", d / "m.xml", timeout=60)
        assert_one_line_error(proc, "weights file", needle)


def test_a_model_that_links_to_dev_zero(tmp_path):
    link = tmp_path / "zero.tflite"
    link.symlink_to("/dev/zero")
    assert_one_line_error(cli("run", link, timeout=60), "is a character device, not a regular file")
