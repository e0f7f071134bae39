"""The bad-input corpus (tests/badmodels.py) and bad flags: one line on stderr naming the file or value, exit code 2,
no traceback, and the calling process survives — through the API and through the CLI, on every backend. Below them,
the user mistakes issue 9's reviews found: absurd numbers, nonsense flags, closed standard streams, messages."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from badmodels import build_corpus
from conftest import READERS, ROOT, artifact, backend_installed, need
from helpers import assert_one_line_error, cli, run_cli, strict_json

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


# ------------------------------------------------------------------------------------ hostile cases (issue 9's reviews)
MODEL = artifact("digits_cnn", "_int8.onnx")
FP32 = artifact("digits_cnn", "_fp32.onnx")


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["bench", MODEL, "--iterations", str(10**12)], ["--iterations 1000000000000", "fit in this machine's memory"]),
        (["bench", MODEL, "--duration", "1e300"], ["--duration 1e300", "at most 604800"]),
        (["bench", MODEL, "--warmup-time", "1e300"], ["--warmup-time 1e300", "at most 3600"]),
        (["bench", MODEL, "--warmup", str(10**12)], ["--warmup", "at most 50,000,000"]),
        (["run", MODEL, "--seed", "-1"], ["--seed -1", "at least 0"]),
        (["run", MODEL, "--seed", str(2**64)], ["--seed", "at most"]),
        (["bench", MODEL, "--threads", "100000"], ["--threads 100000", "at most 1,024"]),
        (["bench", MODEL, "--sample-interval", "nan"], ["--sample-interval nan", "finite"]),
        (["bench", MODEL, "--cooldown-timeout", "-1"], ["--cooldown-timeout -1"]),
        (["run", MODEL, "--top", "-1"], ["--top -1", "at least 0"]),
    ],
)
def test_absurd_numbers_are_user_errors(args, needles):
    assert_one_line_error(cli(*args), *needles)


def test_a_300_character_file_name(tmp_path):
    need("onnxruntime")
    long = tmp_path / ("x" * 300 + ".onnx")
    assert_one_line_error(cli("run", long), "file name too long")
    assert_one_line_error(cli("run", MODEL, "--json", tmp_path / ("y" * 300 + ".json")), "file name too long")


def test_bench_with_stdout_closed():
    need("onnxruntime")
    args = [sys.executable, "-m", "edge_runtime.cli", "bench", str(MODEL), "--iterations", "20"]
    proc = subprocess.run(
        args, cwd=ROOT, stderr=subprocess.PIPE, text=True, timeout=120, stdout=None, preexec_fn=lambda: os.close(1)
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "edge-runtime: error: standard output is closed: the result would be lost (give --json FILE, or open stdout)"
    )


def test_bench_with_stdout_closed_writes_its_json_file(tmp_path):
    need("onnxruntime")
    out = tmp_path / "r.json"
    args = [sys.executable, "-m", "edge_runtime.cli", "bench", str(MODEL), "--iterations", "20", "--json", str(out)]
    proc = subprocess.run(
        args, cwd=ROOT, stderr=subprocess.PIPE, text=True, timeout=120, preexec_fn=lambda: os.close(1)
    )
    assert proc.returncode == 0, proc.stderr
    assert strict_json(out.read_text())["latency_us"]["count"] == 20


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["bench", MODEL, "--platform-latency", "-1"], ["--platform-latency -1", ">= 1"]),
        (["bench", MODEL, "--platform-latency", "nan"], ["--platform-latency nan", "finite"]),
        (["run", MODEL, "--json", ""], ["--json ''", "empty path"]),
        (["bench", MODEL, "--prom", ""], ["--prom ''", "empty path"]),
        (["thermal", "--watch", "1", "--count", "0"], ["--count 0", "at least 1"]),
        (["thermal", "--count", "3"], ["--count goes with --watch"]),
        (["thermal", "--watch", "1e300"], ["--watch 1e300", "at most 86400"]),
        (
            ["quantize", FP32, "--calibration", "c.npy", "--out", "q.onnx", "--max-accuracy-drop", "nan"],
            ["--max-accuracy-drop nan", "finite"],
        ),
        (["run", artifact("digits_cnn", "_int8.tflite"), "--option", "xnnpack=2"], ["xnnpack='2'", "not one of 1"]),
    ],
)
def test_nonsense_is_refused(args, needles):
    if "xnnpack=2" in args:
        need("tflite")
    assert_one_line_error(cli(*args), *needles)


def test_messages_point_the_right_way(tmp_path):
    need("onnxruntime")
    loop = tmp_path / "loop.onnx"
    loop.symlink_to(tmp_path / "loop2.onnx")
    (tmp_path / "loop2.onnx").symlink_to(loop)
    assert_one_line_error(cli("run", loop), "symbolic link loop")
    rnd = tmp_path / "random.npy"
    rnd.write_bytes(np.random.default_rng(0).bytes(4096))
    proc = cli("run", MODEL, "--input", rnd)
    assert_one_line_error(proc, "not a .npy array (no NUMPY header)")
    assert "pickle" not in proc.stderr
    obj = tmp_path / "obj.npy"
    np.save(obj, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert_one_line_error(cli("run", MODEL, "--input", obj), "holds Python objects (pickled data)")


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["run", MODEL, "--device", ""], ["--device ''", "not a name"]),
        (["run", MODEL, "--backend", ""], ["--backend ''", "not a name"]),
        (["thermal", "--watch", "1e-300"], ["--watch 1e-300", ">= 0.1"]),
        (["bench", MODEL, "--platform-latency", "0.5"], ["--platform-latency 0.5", ">= 1"]),
        (["bench", MODEL, "--stress", "cpu:0", "--stress", "cpu:0-1", "--cpus", "1"], ["CPU 0 is already loaded"]),
        (["run", MODEL, "--cpus", "-1"], ["--cpus '-1'", "is not a CPU number"]),
        (["run", MODEL, "--cpus", "0x3"], ["--cpus '0x3'", "is not a CPU number"]),
    ],
)
def test_more_nonsense_is_refused(args, needles):
    assert_one_line_error(cli(*args), *needles)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--delegate-option", "a=b"], "--delegate-option without --delegate"),
        (["--option", "session.x=1", "--option", "session.X=2"], "is already given; one value per key"),
        (["--option", "session.=1"], "not a session config key"),
        (["--cpus", "1", "--option", "session.intra_op_thread_affinities=1"], "--cpus sets the workers' affinities"),
    ],
)
def test_options_that_would_be_ignored_or_clash(args, needle):
    need("onnxruntime")
    assert_one_line_error(cli("run", MODEL, *args), needle)


def test_messages_name_the_real_mistake(tmp_path):
    need("onnxruntime")
    import numpy as np

    arr = np.zeros((1, 1, 28, 28), np.float32)
    np.save(tmp_path / "x.npy", arr)
    np.savez(tmp_path / "x.npz", input=arr)
    # An input name the model lacks, before a file that exists: the name is the mistake, not a missing file.
    proc = run_cli("run", str(MODEL), "--input", f"bogus={tmp_path / 'x.npy'}")
    assert_one_line_error(proc, "the model has no input 'bogus'", f"write input={tmp_path / 'x.npy'}")
    assert_one_line_error(run_cli("run", str(MODEL), "--input", str(tmp_path / "x.npz")), "a .npz archive")
    # A flag error names the subcommand once, after the program's own prefix.
    proc = run_cli("bench", str(MODEL), "--iterations", "x")
    assert_one_line_error(proc, "edge-runtime: error: bench: --iterations 'x' is not a whole number")
    assert proc.stderr.count("edge-runtime") == 2  # the prefix and the --help pointer, not "edge-runtime bench:"
