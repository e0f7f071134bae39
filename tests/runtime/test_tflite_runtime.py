"""The tflite backend on `tflite_runtime` 2.14, the flavour older board images ship. It needs numpy < 2, so these
tests run in their own environment: `make test` creates `.venv-tflite-runtime` and runs this file there with
EDGE_RUNTIME_TFLITE_IMPL=tflite-runtime. In the main environment they skip, except the numpy-2 error check."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import ARTIFACTS, MANIFEST, MODELS, ROOT, artifact

import edge_runtime
from edge_runtime import DeviceError, ModelError
from edge_runtime.runtime.accuracy import classify

IN_TFLRT_ENV = os.environ.get("EDGE_RUNTIME_TFLITE_IMPL") == "tflite-runtime" and np.__version__.startswith("1.")
needs_env = pytest.mark.skipif(
    not IN_TFLRT_ENV,
    reason="runs in .venv-tflite-runtime with EDGE_RUNTIME_TFLITE_IMPL=tflite-runtime (make test does this)",
)
TFLITE_FILES = [a["file"] for a in ARTIFACTS if a["format"] == "tflite"]


@pytest.mark.tflite_runtime
@needs_env
@pytest.mark.parametrize("file", TFLITE_FILES)
def test_every_tflite_artifact_runs_on_tflite_runtime(file):
    with edge_runtime.load(MODELS / file, sandbox=False) as s:
        assert s.backend.details["library"] == "tflite-runtime"
        assert s.backend.version.startswith("2.14")
        out = s.infer({t.name: np.zeros(t.shape, t.dtype) for t in s.inputs})
        spec = next(a for a in ARTIFACTS if a["file"] == file)["outputs"][0]
        assert out[s.outputs[0].name].shape == tuple(spec["shape"])


@pytest.mark.tflite_runtime
@needs_env
def test_digits_accuracy_on_tflite_runtime_matches_the_manifest():
    d = np.load(MODELS / "digits_cnn" / "digits_test.npz")
    x, y = d["x"], d["y"]
    p32 = classify(artifact("digits_cnn", "_fp32.tflite"), x, sandbox=False)
    p8 = classify(artifact("digits_cnn", "_int8.tflite"), x, sandbox=False)
    recorded = next(m for m in MANIFEST["model"] if m["name"] == "digits_cnn")["accuracy"]["tflite"]
    one = 1.0 / len(y)
    assert np.mean(p8 == p32) >= 0.99
    assert np.mean(p32 == y) - np.mean(p8 == y) <= 0.01
    assert abs(np.mean(p8 == y) - recorded["int8_top1"]) <= one + 1e-9


@pytest.mark.tflite_runtime
@needs_env
def test_bad_files_and_delegates_on_tflite_runtime(tmp_path):
    from badmodels import build_corpus

    for case in build_corpus(tmp_path):
        if case.path.suffix == ".tflite":
            with pytest.raises(ModelError, match=r"tflite|TFLite|empty"):
                edge_runtime.load(case.path)  # through the probe child
    with pytest.raises(DeviceError, match="does not load"):
        edge_runtime.load(artifact("digits_cnn", "_int8.tflite"), delegate=str(tmp_path / "libnope.so"), sandbox=False)


def test_tflite_runtime_under_numpy_2_says_what_to_do():
    """Where tflite-runtime is installed beside numpy 2 (the dev extra does this), loading says why it cannot work."""
    pytest.importorskip("tflite_runtime", reason="tflite-runtime not installed here (the dev extra installs it)")
    if np.__version__.startswith("1."):
        pytest.skip("numpy 1 here: tflite_runtime works, nothing to explain")
    proc = subprocess.run(
        [sys.executable, "-m", "edge_runtime.cli", "run", str(artifact("digits_cnn", "_int8.tflite"))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "EDGE_RUNTIME_TFLITE_IMPL": "tflite-runtime"},
        timeout=120,
    )
    assert proc.returncode == 2
    assert "cannot run with numpy 2" in proc.stderr and "ai-edge-litert" in proc.stderr
