"""Issue 26: the committed dynamic-batch variants (<name>_int8_dynamic.onnx and its OpenVINO IR, written by
`models/build.py --dynamic-only` or `make models`). Each backend sees a dynamic first dimension, a batch's rows equal
the fixed-batch INT8 model's answer to each row alone, the serve batcher batches them, and the build step rebuilds the
committed bytes from the committed INT8 ONNX without TensorFlow."""

from __future__ import annotations

import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import ARTIFACTS, MODELS, ROOT, need

import edge_runtime
from edge_runtime.serve import Batcher, session_loader

DYNAMIC = ["digits_cnn", "resnet8", "fc_autoencoder_ad"]
# (backend, dynamic file suffix, fixed file suffix): the same quantized graph on the same backend
RUNS = [
    ("onnxruntime", "_int8_dynamic.onnx", "_int8.onnx"),
    ("openvino", "_int8_dynamic.xml", "_int8.xml"),
]
CASES = [(m, *r) for m in DYNAMIC for r in RUNS]
IDS = [f"{m}{dyn}-{backend}" for m, backend, dyn, _ in CASES]


def _rows(shape, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((n, *shape[1:]), dtype=np.float32)


@pytest.mark.parametrize(("model", "backend", "dynamic", "fixed"), CASES, ids=IDS)
def test_batch_rows_equal_the_fixed_model_run_one_row_at_a_time(model, backend, dynamic, fixed):
    """ONNX Runtime runs the same integer kernels on each row: exactly equal. OpenVINO may pick other kernels for a
    batch (on another CPU): within the tolerance of the FP32 cross-backend test, |diff| <= 1e-4 + 1e-3 * |reference|."""
    need(backend)
    path, fixed_path = MODELS / model / f"{model}{dynamic}", MODELS / model / f"{model}{fixed}"
    with (
        edge_runtime.load(path, backend=backend, threads=1, sandbox=False) as dyn,
        edge_runtime.load(fixed_path, backend=backend, threads=1, sandbox=False) as one,
    ):
        assert [t.shape[0] for t in (*dyn.inputs, *dyn.outputs)] == [None] * 2
        assert [t.shape[1:] for t in dyn.inputs] == [t.shape[1:] for t in one.inputs]
        inp, out = one.inputs[0], one.outputs[0].name
        x = _rows(inp.shape, 8, seed=len(model))
        want = np.concatenate([one.infer({inp.name: x[i : i + 1]})[out] for i in range(len(x))])
        for n in (1, 3, 8):
            got = dyn.infer({inp.name: x[:n]})[out]
            assert got.shape == (n, *one.outputs[0].shape[1:])
            if backend == "onnxruntime":
                np.testing.assert_array_equal(got, want[:n], err_msg=f"{path.name}, batch {n}")
            else:
                np.testing.assert_allclose(got, want[:n], rtol=1e-3, atol=1e-4, err_msg=f"{path.name}, batch {n}")


def test_manifest_writes_the_dynamic_batch_as_minus_one():
    """The manifest lists each variant (so its sha256 is checked) with the first dimension -1 and the rest as the
    fixed model's, and says where it came from."""
    for model in DYNAMIC:
        for _, dynamic, fixed in RUNS:
            art = next(a for a in ARTIFACTS if a["file"] == f"{model}/{model}{dynamic}")
            base = next(a for a in ARTIFACTS if a["file"] == f"{model}/{model}{fixed}")
            for kind in ("inputs", "outputs"):
                assert [t["shape"] for t in art[kind]] == [[-1, *t["shape"][1:]] for t in base[kind]]
            assert (art["precision"], art["activations"], art["weights"]) == ("int8", "u8", "s8")
            assert f"derived from {model}/{model}_int8.onnx by models/build.py:write_dynamic_batch" in art["provenance"]


@pytest.mark.parametrize(
    ("backend", "suffix"), [("onnxruntime", "_int8_dynamic.onnx"), ("openvino", "_int8_dynamic.xml")]
)
def test_serve_batcher_batches_the_dynamic_variants(backend, suffix):
    """`edge-runtime serve`'s batcher takes them (a fixed batch would make it run requests one at a time), and
    requests from 8 submitters come back with their own rows."""
    need(backend)
    path = MODELS / "resnet8" / f"resnet8{suffix}"
    inputs = [_rows((1, 32, 32, 3), 1 + i % 3, seed=i) for i in range(16)]
    with edge_runtime.load(path, backend=backend, threads=1, sandbox=False) as ref:
        want = [ref.infer({"input": x})["probabilities"] for x in inputs]
    with Batcher(session_loader(path, backend=backend), max_batch=8, max_delay_us=2000, queue=64) as b:
        assert b.unbatched_reason is None
        assert b.max_batch == 8
        with ThreadPoolExecutor(8) as pool:
            futures = list(pool.map(lambda x: b.submit({"input": x}), inputs))
        got = [f.result(timeout=60)["probabilities"] for f in futures]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)


def test_dynamic_only_rebuilds_the_committed_bytes_without_tensorflow(tmp_path):
    """`models/build.py --dynamic-only` from the committed INT8 ONNX files (onnx and openvino only) writes the
    committed files byte for byte and the same manifest, and never imports TensorFlow."""
    pytest.importorskip("onnx", reason="onnx is in the dev extra: pip install 'edge-runtime[dev]'")
    need("openvino")
    shutil.copy(MODELS / "manifest.toml", tmp_path / "manifest.toml")
    for model in DYNAMIC:
        (tmp_path / model).mkdir()
        shutil.copy(MODELS / model / f"{model}_int8.onnx", tmp_path / model)
    code = (
        "import sys; sys.path.insert(0, 'models'); import build;"
        " rc = build.main(['--dynamic-only', '--out', sys.argv[1]]);"
        " assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, 'TensorFlow imported'; sys.exit(rc)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "manifest.toml").read_text() == (MODELS / "manifest.toml").read_text()
    for model in DYNAMIC:
        for suffix in ("_int8_dynamic.onnx", "_int8_dynamic.xml", "_int8_dynamic.bin"):
            made, committed = tmp_path / model / f"{model}{suffix}", MODELS / model / f"{model}{suffix}"
            assert made.read_bytes() == committed.read_bytes(), made.name


def test_batchmodels_copies_the_committed_variant_and_derives_the_same_bytes(tmp_path):
    """tests/batchmodels.py hands out the committed variants, and for a model without one derives the same way: from
    a copy of the fixed model with no committed variant beside it, it writes the committed bytes."""
    pytest.importorskip("onnx", reason="onnx is in the dev extra: pip install 'edge-runtime[dev]'")
    from batchmodels import committed_dynamic, dynamic_batch

    for model in DYNAMIC:
        src, committed = MODELS / model / f"{model}_int8.onnx", MODELS / model / f"{model}_int8_dynamic.onnx"
        assert committed_dynamic(src) == committed
        assert dynamic_batch(src, tmp_path / "copied" / src.name).read_bytes() == committed.read_bytes()
        alone = shutil.copy(src, tmp_path / src.name)
        assert committed_dynamic(Path(alone)) is None
        assert dynamic_batch(Path(alone), tmp_path / "derived" / src.name).read_bytes() == committed.read_bytes()
    assert committed_dynamic(MODELS / "dscnn_kws" / "dscnn_kws_int8.onnx") is None
