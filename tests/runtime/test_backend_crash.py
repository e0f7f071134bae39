"""A backend library that crashes when imported (a broken vendor build on a board; ONNX Runtime under QEMU reading an
x86 /proc/cpuinfo) must be as harmless as a model that crashes it: `info` lists the backend as unusable with the
reason, `run` and `quantize` exit 2 with one line, and the other backends go on working.

The crash is real: a package named like the library, first on PYTHONPATH, that dereferences NULL when imported
(SIGSEGV), as the broken build does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MODELS, ROOT, need
from helpers import assert_one_line_error, run_cli


def crashing(tmp_path, library: str) -> dict:
    pkg = tmp_path / "broken" / library
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import ctypes\nctypes.string_at(0)  # what a broken native build does\n")
    return {"PYTHONPATH": str(tmp_path / "broken")}


def test_info_lists_a_backend_whose_library_crashes_as_unusable_and_the_others_as_usual(tmp_path):
    need("openvino")
    env = crashing(tmp_path, "onnxruntime")
    proc = run_cli("info", "--json", "-", env=env)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)["backends"]
    assert found["onnxruntime"]["unusable"] is True and found["onnxruntime"]["installed"] is False
    assert "crashes" in found["onnxruntime"]["error"] and "SIGSEGV" in found["onnxruntime"]["error"]
    assert found["openvino"]["installed"] is True and found["openvino"]["version"]
    text = run_cli("info", env=env)
    assert text.returncode == 0, text.stderr
    row = next(ln for ln in text.stdout.splitlines() if ln.split()[:1] == ["onnxruntime"])
    assert "unusable" in row and "SIGSEGV" in row


def test_run_and_bench_refuse_in_one_line_and_another_backend_still_runs(tmp_path):
    need("tflite")
    env = crashing(tmp_path, "onnxruntime")
    onnx_model = str(MODELS / "digits_cnn" / "digits_cnn_int8.onnx")
    for cmd in (["run", onnx_model], ["bench", onnx_model, "--iterations", "20"]):
        assert_one_line_error(run_cli(*cmd, env=env), "backend 'onnxruntime'", "importing its library crashes")
    ok = run_cli("run", str(MODELS / "digits_cnn" / "digits_cnn_int8.tflite"), env=env)
    assert ok.returncode == 0, ok.stderr


def test_quantize_on_the_openvino_path_refuses_a_crashing_openvino_in_one_line(tmp_path):
    need("onnxruntime")
    env = crashing(tmp_path, "openvino")
    cal = MODELS / "digits_cnn" / "digits_calibration.npz"
    proc = run_cli(
        "quantize", str(MODELS / "digits_cnn" / "digits_cnn_fp32.onnx"), "--calibration", str(cal),
        "--backend", "openvino", "--out", str(tmp_path / "q.xml"), env=env,
    )  # fmt: skip
    assert_one_line_error(proc, "backend 'openvino'", "crashes")
    assert not (tmp_path / "q.xml").exists()


def test_the_library_api_raises_instead_of_dying(tmp_path):
    """`edge_runtime.load` in a long-running process: the caller survives and gets BackendNotInstalledError."""
    need("onnxruntime")
    env = crashing(tmp_path, "onnxruntime")
    code = (
        "import edge_runtime, sys\n"
        "from edge_runtime.errors import BackendNotInstalledError\n"
        "try:\n"
        f"    edge_runtime.load({str(MODELS / 'digits_cnn' / 'digits_cnn_int8.onnx')!r})\n"
        "except BackendNotInstalledError as e:\n"
        "    print('refused:', e.message)\n"
        "print('alive')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": env["PYTHONPATH"] + os.pathsep + str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "refused:" in proc.stdout and "SIGSEGV" in proc.stdout and proc.stdout.strip().endswith("alive")


@pytest.mark.parametrize("library", ["onnxruntime", "openvino"])
def test_a_library_that_only_fails_to_import_is_still_not_installed(tmp_path, library):
    """A library that raises on import (not a crash) keeps its old report: not installed, with the extra to install."""
    pkg = tmp_path / "raising" / library
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('built for another Python')\n")
    proc = run_cli("info", "--json", "-", env={"PYTHONPATH": str(tmp_path / "raising")})
    assert proc.returncode == 0, proc.stderr
    b = json.loads(proc.stdout)["backends"][library]
    assert b["installed"] is False and not b.get("unusable") and "edge-runtime[" in b["install"]


def test_native_noise_on_stderr_is_dropped_and_the_rest_kept(capfd):
    """OpenVINO on ARM prints "...: Can't open MIDR_EL1 sysfs entry" from C at every load, LiteRT an INFO line: written
    to file descriptor 2 by native code, they are dropped; anything else a library prints there still shows."""
    from edge_runtime.runtime.backends.openvino_backend import _arm_noise
    from edge_runtime.runtime.backends.tflite_backend import _drop_info_logs

    with _arm_noise():
        os.write(2, b"src/util_impl_linux.h, 451: Can't open MIDR_EL1 sysfs entry\nE: a real error\n")
    with _drop_info_logs():
        os.write(2, b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\nWARNING: kept\n")
    err = capfd.readouterr().err
    assert err == "E: a real error\nWARNING: kept\n"


def _hanging(tmp_path, library: str) -> dict:
    pkg = tmp_path / "hang" / library
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "import os, time\nprint('importing', flush=True)\nopen(os.environ['HANG_MARK'], 'w').close()\ntime.sleep(600)\n"
    )  # the mark, not the print: a forked child points its fd 1 at its error pipe
    return {**os.environ, "PYTHONPATH": str(tmp_path / "hang"), "HANG_MARK": str(tmp_path / "importing")}


def test_a_one_shot_runs_child_goes_with_it_on_sigterm_and_on_sigkill(tmp_path):
    """`run` does its work in a child forked before numpy or a backend is imported. A library that hangs there: a
    SIGTERM to the command ends it (143, one line) and its child; a SIGKILL of the command leaves no child running
    (it dies with its parent). Where the command has threads it never forks (sandbox.can_fork): the check child is
    exec'd instead, and must go just the same."""
    import signal
    import time

    import psutil

    env = _hanging(tmp_path, "onnxruntime")
    model = str(MODELS / "digits_cnn" / "digits_cnn_int8.onnx")
    for sig, code in ((signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGKILL, -signal.SIGKILL)):
        proc = subprocess.Popen([sys.executable, "-m", "edge_runtime.cli", "run", model], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            kids = []
            while time.monotonic() < deadline and not kids:  # the child is the one importing the hanging library
                kids = psutil.Process(proc.pid).children()
                time.sleep(0.1)
            assert kids, "no child was forked"
            # Forked (the same command line) where the command has one thread; exec'd where it has more (under QEMU
            # user-mode the emulator's own threads are the process's): the child must go with it either way.
            child = kids[0]
            mark = Path(env["HANG_MARK"])
            while not mark.exists():  # the child is inside the hanging import
                assert time.monotonic() < deadline and proc.poll() is None, "the child never imported the library"
                time.sleep(0.05)
            mark.unlink()
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == code, err
            if sig == signal.SIGTERM:
                assert err.strip().splitlines() == ["edge-runtime: interrupted (SIGTERM)"], err
            _, alive = psutil.wait_procs([child], timeout=10)
            assert not alive, f"the child outlived its parent ({sig.name})"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
