"""The bad-input corpus (tests/badmodels.py) and bad flags: one line on stderr naming the file or value, exit code 2,
no traceback, and the calling process survives — through the API and through the CLI, on every backend."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from badmodels import build_corpus
from conftest import READERS, ROOT, artifact, backend_installed, need
from helpers import assert_one_line_error, run_cli

import edge_runtime
from edge_runtime import ModelError, UserError


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return {c.name: c for c in build_corpus(tmp_path_factory.mktemp("corpus"))}


def _cases():
    """(case name, backend) for every corpus file and every backend that reads its format; ids known at collection."""
    with tempfile.TemporaryDirectory() as tmp:
        cases = build_corpus(Path(tmp))
    fmt = {".onnx": "onnx", ".xml": "openvino", ".tflite": "tflite"}
    return [
        pytest.param(c.name, backend, id=f"{c.name}-{backend}")
        for c in cases
        for backend in READERS.get(fmt.get(c.path.suffix, ""), [c.backend])
    ]


CASES = _cases()


@pytest.mark.parametrize(("name", "backend"), CASES)
def test_api_refuses_bad_model(name, backend, corpus):
    need(backend)
    case = corpus[name]
    with pytest.raises(ModelError) as err:
        edge_runtime.load(case.path, backend=backend)  # sandbox=True: the crash-check child sees the file first
    text = str(err.value)
    assert str(case.path) in text
    assert case.expect in text
    assert "\n" not in text


@pytest.mark.parametrize(("name", "backend"), CASES)
def test_cli_refuses_bad_model(name, backend, corpus):
    need(backend)
    case = corpus[name]
    proc = run_cli("run", str(case.path), "--backend", backend)
    assert_one_line_error(proc, str(case.path), case.expect)


def test_cli_missing_file():
    assert_one_line_error(run_cli("run", "models/nope.onnx"), "'models/nope.onnx'", "no such file")


def test_cli_directory_instead_of_file():
    assert_one_line_error(run_cli("run", "models"), "is a directory")


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--backend", "tensorflow"], ["backend 'tensorflow' is not known", "onnxruntime"]),
        (["--backend", "tflite"], ["cannot load onnx files"]),
        (["--device", "tpu9000"], ["'tpu9000'", "choose one of"]),
        (["--device", "cuda"], ["'cuda'", "--allow-fallback"]),
        (["--cpus", "7-x"], ["--cpus '7-x'"]),
        (["--cpus", "64"], ["--cpus '64'", "do not exist"]),
        (["--threads", "0"], ["threads 0"]),
        (["--delegate-option", "novalue", "--delegate", "x.so"], ["--delegate-option 'novalue'", "KEY=VALUE"]),
        (["--input", "nope=missing.npy"], ["no such file 'nope=missing.npy'"]),  # one input: '=' is part of a path
        (["--input", "missing.npy"], ["no such file 'missing.npy'"]),
        (["--frobnicate"], ["unrecognized arguments: --frobnicate"]),
    ],
)
def test_cli_bad_flags(args, needles):
    need("onnxruntime")
    proc = run_cli("run", str(artifact("digits_cnn", "_int8.onnx")), *args)
    assert_one_line_error(proc, *needles)


def test_cli_delegate_that_does_not_load():
    need("tflite")
    lib = "/nonexistent/libvx_delegate.so"
    proc = run_cli("run", str(artifact("digits_cnn", "_int8.tflite")), "--delegate", lib, "--delegate-option", "a=b")
    assert_one_line_error(proc, f"delegate '{lib}' does not load", "--allow-fallback")
    proc = run_cli("run", str(artifact("digits_cnn", "_int8.tflite")), "--delegate", lib, "--allow-fallback", "--json")
    assert proc.returncode == 0
    assert '"fallback": true' in proc.stdout and "warning: tflite: falling back to CPU" in proc.stderr


@pytest.mark.parametrize(
    ("suffix", "backend", "name", "dtype"),
    [
        ("_int8.onnx", "onnxruntime", "input", "float32"),
        ("_int8.xml", "openvino", "input", "float32"),
        ("_int8.tflite", "tflite", "serving_default_input:0", "int8"),
    ],
)
def test_cli_feed_of_the_wrong_shape(tmp_path, suffix, backend, name, dtype):
    """Exactly one line also on TFLite, whose library prints an INFO line for every interpreter it creates."""
    need(backend)
    bad = tmp_path / "x.npy"
    np.save(bad, np.zeros((1, 64), dtype))
    proc = run_cli("run", str(artifact("digits_cnn", suffix)), "--input", f"{name}={bad}")
    assert_one_line_error(proc, f"input '{name}'", f"expects shape (1, 8, 8, 1) {dtype}, got (1, 64) {dtype}")


def test_cli_input_path_with_equals_sign(tmp_path, digits):
    need("onnxruntime")
    d = tmp_path / "a=b"
    d.mkdir()
    f = d / "x.npy"
    np.save(f, digits[0][:1])
    for spec in (str(f), f"input={f}"):
        proc = run_cli("run", str(artifact("digits_cnn", "_fp32.onnx")), "--input", spec)
        assert proc.returncode == 0, proc.stderr
        assert "<- file" in proc.stdout


def test_cli_json_never_overwrites_the_model(tmp_path):
    need("onnxruntime")
    model = tmp_path / "m.onnx"
    model.write_bytes(artifact("digits_cnn", "_int8.onnx").read_bytes())
    before = model.read_bytes()
    proc = run_cli("run", str(model), "--json", str(model))
    assert_one_line_error(proc, "refusing to overwrite")
    assert model.read_bytes() == before


def test_cli_json_file_is_readable_by_others(tmp_path):
    need("onnxruntime")
    out = tmp_path / "r.json"
    assert run_cli("run", str(artifact("digits_cnn", "_int8.onnx")), "--json", str(out)).returncode == 0
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask


def test_cli_debug_flag_after_the_subcommand():
    proc = run_cli("run", "models/nope.onnx", "--debug")
    assert "Traceback" in proc.stderr and "ModelError" in proc.stderr


@pytest.mark.parametrize(
    ("suffix", "option", "needle"),
    [
        ("_int8.onnx", "intra_op_spin=0", "the CPU provider takes no options"),
        ("_int8.xml", "FOO=1", "not a property of the CPU plugin"),
        ("_int8.tflite", "threads=4", "not known"),
    ],
)
def test_cli_unknown_backend_option(suffix, option, needle):
    backend = {"onnx": "onnxruntime", "xml": "openvino", "tflite": "tflite"}[suffix.rsplit(".", 1)[1]]
    need(backend)
    proc = run_cli("run", str(artifact("digits_cnn", suffix)), "--option", option)
    assert_one_line_error(proc, option.split("=")[0], needle)


def test_cli_input_file_that_is_not_npy(tmp_path):
    need("onnxruntime")
    bad = tmp_path / "x.npy"
    bad.write_bytes(b"not numpy")
    proc = run_cli("run", str(artifact("digits_cnn", "_int8.onnx")), "--input", str(bad))
    assert_one_line_error(proc, str(bad), "not a .npy array (no NUMPY header)")


def test_cli_unwritable_json_destination(tmp_path):
    need("onnxruntime")
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = run_cli("run", str(artifact("digits_cnn", "_int8.onnx")), "--json", str(blocker / "out.json"))
    assert_one_line_error(proc, "--json", "is not a directory")


def test_debug_shows_the_traceback():
    proc = run_cli("--debug", "run", "models/nope.onnx")
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr and "ModelError" in proc.stderr


def test_probe_deadline_is_an_error_not_a_hang():
    need("openvino")
    with pytest.raises(ModelError, match=r"did not load and run it within 0.01 s"):
        edge_runtime.load(artifact("resnet8", "_int8.xml"), sandbox_timeout_s=0.01)


def test_not_installed_backend_names_the_extra():
    """Run where a backend is really missing: the numpy-1 tflite-runtime venv has no onnxruntime or openvino."""
    venv_python = ROOT / ".venv-tflite-runtime" / "bin" / "python"
    if not venv_python.exists():
        pytest.skip("needs .venv-tflite-runtime (make test creates it)")
    proc = subprocess.run(
        [str(venv_python), "-m", "edge_runtime.cli", "run", str(artifact("digits_cnn", "_int8.onnx"))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert_one_line_error(proc, "backend 'onnxruntime' is not installed", "pip install 'edge-runtime[onnxruntime]'")


def test_a_bad_model_does_not_take_down_a_long_running_process(corpus):
    """Many bad files in a row, then a good one, in one process: every bad one is an error, the good one works."""
    need("tflite")
    for case in corpus.values():
        if not backend_installed(case.backend):
            continue
        with pytest.raises(UserError):
            edge_runtime.load(case.path, backend=case.backend)
    with edge_runtime.load(artifact("digits_cnn", "_int8.tflite")) as s:
        out = s.infer({t.name: np.zeros(t.shape, t.dtype) for t in s.inputs})
        assert out[s.outputs[0].name].shape == (1, 10)
