"""What a hostile afternoon found (issue 9), one class a section, each from real parts: device nodes made with mknod
under tmp_path, fifos, links, fixture trees, real concurrent processes and signals. Every case: a clean exit with one
line, or the behaviour the section names; nothing hangs (every child has a deadline), nothing is replaced.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, artifact, need
from helpers import (
    assert_one_line_error,
    cli,
    read_until,
    strict_json,
)

MODEL = artifact("digits_cnn", "_int8.onnx")
FP32 = artifact("digits_cnn", "_fp32.onnx")


# ------------------------------------------------------------------------------------------- 1. non-regular outputs
WRITERS = [
    ("run", ["run", MODEL, "--json"]),
    ("bench --json", ["bench", MODEL, "--iterations", "50", "--json"]),
    ("bench --prom", ["bench", MODEL, "--iterations", "50", "--prom"]),
    ("bench --hdr-log", ["bench", MODEL, "--iterations", "50", "--hdr-log"]),
    ("info", ["info", "--json"]),
    ("thermal", ["thermal", "--json"]),
]


# ---------------------------------------------------------------------------------------- 2. non-regular inputs


# ------------------------------------------------------------------------------------- 3. concurrent tune apply
def _snapshot(tree: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tree)): p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()}


def tune_apply_command(tree: Path, state: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "edge_runtime.cli",
        "tune",
        "apply",
        "--cpus",
        "1",
        "--sysroot",
        str(tree),
        "--state-dir",
        str(state),
    ]


# -------------------------------------------------------------------------------- 4. outputs that collide


# ------------------------------------------------------------------------------------ 5. non-finite calibration
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


# ------------------------------------------------------------------------------------ 6. impossible sensor values


# ------------------------------------------------------------------------------------ 7. cooling device names


# ----------------------------------------------------------------------------------- 8. user mistakes, not bugs
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


# ------------------------------------------------------------------------------------ 9. nonsense accepted
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


# ------------------------------------------------------------------------------------ 10. truth in reports


# ------------------------------------------------------------------------------------ 11. signals and children
def _ps(needle: str) -> list[str]:
    # -ww: whole command lines (ps may cut them at 80 columns; under QEMU they start with the interpreter's path)
    cmd = ["ps", "-ww", "-eo", "pid,cls,rtprio,args"]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()
    return [ln for ln in out if needle in ln and "ps -ww" not in ln]


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_run_writes_its_partial_result(tmp_path, sig, code):
    need("onnxruntime")
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "edge_runtime.cli", "bench", str(MODEL), "--duration", "60", "--json", str(out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        line = ""
        while "measuring" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
        assert "measuring" in line
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    r = strict_json(out.read_text())
    name = signal.Signals(sig).name
    assert r["aborted"] == {
        "kind": "interrupted",
        "reason": f"interrupted by {name}",
        "signal": name,
        "at_s": r["aborted"]["at_s"],
        "partial": True,
    }
    assert r["latency_us"]["count"] > 0 and 0.5 < r["wall_s"] < 30
    assert f"interrupted by {name}: partial result written" in err


def test_an_interrupt_before_measuring_writes_nothing(tmp_path):
    need("openvino")
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edge_runtime.cli",
            "bench",
            str(artifact("mobilenet_v1_025_vww", "_int8.xml")),
            "--warmup-time",
            "30",
            "--iterations",
            "10",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    read_until(proc, "warming up")  # "warming up: 30 s": the session is loaded, nothing measured yet
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert not out.exists() and "interrupted (SIGTERM)" in err


# ------------------------------------------------------------------------------------ 12. messages
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


# ====================================================================================== found by the second pass
# ------------------------------------------------------------------------------------------- vendor telemetry
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


# ---------------------------------------------------------------------------------------- outputs, second pass


# ---------------------------------------------------------------------------------------- exit 3, second pass


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


# ------------------------------------------------------------------------------------------- tune, second pass


# ------------------------------------------------------------------------------- sensors and reports, second pass


def measuring_bench(*args: str) -> subprocess.Popen:
    """A bench in the background, returned once it reports that it is measuring (about 1 s into its measured part)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "edge_runtime.cli", "bench", str(MODEL), *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    read_until(proc, "measuring")  # (its later progress lines stay in the pipe: a few KB a minute)
    return proc


# ------------------------------------------------------------------------------- nonsense, second pass
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


# ====================================================================================== found by the third pass
def _profiles(tmp_path: Path) -> Path:
    d = tmp_path / "boards"
    d.mkdir()
    shutil.copy(ROOT / "boards" / "generic-x86.toml", d / "generic-x86.toml")
    return d


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


def _first(path: Path) -> Path:
    one = path.with_name("one.npy")
    np.save(one, np.load(path)[:1])
    return one


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
