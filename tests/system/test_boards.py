"""Board profiles (edge_runtime/system/boards.py): hostile profiles, garbage in the environment, offline CPUs."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, artifact, need
from helpers import assert_one_line_error, cli, strict_json

MODEL = artifact("digits_cnn", "_int8.onnx")


def _profiles(tmp_path: Path) -> Path:
    d = tmp_path / "boards"
    d.mkdir()
    shutil.copy(ROOT / "boards" / "generic-x86.toml", d / "generic-x86.toml")
    return d


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        ("fifo", "is a fifo, not a regular file"),
        ("zero", "is a character device, not a regular file"),
        ("latin1", "not UTF-8 text"),
        ("nan", "thermal.limit_c = nan: expected degrees C from -80 to 200"),
        ("hot", "thermal.limit_c = 1000000000.0: expected degrees C"),
        ("cpu", "cpus.isolate = [9223372036854775807]: expected a list of CPU numbers (0 to 8191)"),
        ("cluster", "cpus.clusters[0].cpus = [-5, 'x']: expected CPU numbers"),
    ],
)
def test_a_hostile_board_profile_is_skipped_with_a_warning(tmp_path, make, needle):
    d = _profiles(tmp_path)
    bad = d / "bad.toml"
    good = (ROOT / "boards" / "generic-x86.toml").read_text().replace('name = "generic-x86"', 'name = "bad"')
    if make == "fifo":
        os.mkfifo(bad)
    elif make == "zero":
        bad.symlink_to("/dev/zero")
    elif make == "latin1":
        bad.write_bytes(good.encode() + b"\n# caf\xe9\n")
    elif make == "nan":
        bad.write_text(good.replace("limit_c = 95.0", "limit_c = nan"))
    elif make == "hot":
        bad.write_text(good.replace("limit_c = 95.0", "limit_c = 1e9"))
    elif make == "cpu":
        bad.write_text(re.sub(r"(?m)^isolate = .*$", "isolate = [9223372036854775807]", good))
    else:
        bad.write_text(re.sub(r"(?m)^clusters = .*$", 'clusters = [{ name = "x", cpus = [-5, "x"] }]', good))
    proc = cli("info", "--json", timeout=30, env={**os.environ, "EDGE_RUNTIME_BOARDS": str(d)})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edge-runtime: warning: board profile") and needle in lines[0], lines
    assert "(profile skipped)" in lines[0]
    assert strict_json(proc.stdout)["board_profile"]["name"] == "generic-x86"  # the good one still works


@pytest.mark.parametrize(
    ("var", "value", "needle"),
    [
        ("EDGE_RUNTIME_BOARDS", "/nonexistent/boards", "EDGE_RUNTIME_BOARDS '/nonexistent/boards': no such file"),
        ("EDGE_RUNTIME_BOARDS", "/etc/hostname", "is a file, not a directory"),
        ("EDGE_RUNTIME_STRESS_TOOL", "garbage", "EDGE_RUNTIME_STRESS_TOOL='garbage': not one of stress-ng, builtin"),
        ("EDGE_RUNTIME_TFLITE_IMPL", "garbage", "EDGE_RUNTIME_TFLITE_IMPL='garbage': not one of ai-edge-litert"),
    ],
)
def test_an_environment_variable_set_to_garbage_is_named(var, value, needle):
    need("onnxruntime")
    model = artifact("digits_cnn", "_int8.tflite") if "TFLITE" in var else MODEL
    args = ["bench", model, "--iterations", "10", "--cpus", "1"] + (["--stress", "cpu:0"] if "STRESS" in var else [])
    assert_one_line_error(cli(*args, env={**os.environ, var: value}), needle)


def test_board_cpus_that_are_offline_are_said_so(tmp_path):
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "rpi5", root)
    (root / "sys/devices/system/cpu").mkdir(parents=True, exist_ok=True)
    (root / "sys/devices/system/cpu/online").write_text("0-1\n")
    proc = cli("tune", "show", "--sysroot", root, "--cpus", "board")
    assert_one_line_error(proc, "board profile raspberry-pi-5 isolates CPU [3], none of them online on the tree")
