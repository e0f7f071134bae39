"""Outputs (edge_runtime/files/outputs.py, the one writer): device nodes, fifos, links, descriptors, standard
output under its spellings, outputs that collide with each other or an input, full disks, killed writers."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, ROOT, artifact, need
from helpers import assert_one_line_error, cli, cli_child, fifo_reader, mknod_char, run_cli, strict_json, x86_tree

MODEL = artifact("digits_cnn", "_int8.onnx")
FP32 = artifact("digits_cnn", "_fp32.onnx")


WRITERS = [
    ("run", ["run", MODEL, "--json"]),
    ("bench --json", ["bench", MODEL, "--iterations", "50", "--json"]),
    ("bench --prom", ["bench", MODEL, "--iterations", "50", "--prom"]),
    ("bench --hdr-log", ["bench", MODEL, "--iterations", "50", "--hdr-log"]),
    ("info", ["info", "--json"]),
    ("thermal", ["thermal", "--json"]),
]


@pytest.mark.parametrize(("name", "args"), WRITERS, ids=[w[0] for w in WRITERS])
def test_a_character_device_output_is_written_through_never_replaced(tmp_path, name, args):
    need("onnxruntime")
    null = mknod_char(tmp_path / "null")
    proc = cli(*args, null)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISCHR(null.lstat().st_mode), f"{name} replaced the device node"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]  # no temporary file left beside it
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_the_real_dev_null_survives_as_root():
    need("onnxruntime")
    proc = cli("run", MODEL, "--json", "/dev/null")
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.parametrize("flag", ["--json", "--prom", "--hdr-log"])
def test_a_fifo_output_gets_the_data_and_stays_a_fifo(tmp_path, flag):
    need("onnxruntime")
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    t, got = fifo_reader(fifo)
    proc = cli("bench", MODEL, "--iterations", "50", flag, fifo)
    t.join(timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    data = got[0].decode()
    if flag == "--json":
        assert strict_json(data)["latency_us"]["count"] == 50
    elif flag == "--prom":
        assert "edge_runtime_latency_seconds{" in data
    else:
        assert data.startswith("#") and "StartTime" in data


def test_a_fifo_without_a_reader_is_an_error_not_a_hang(tmp_path):
    need("onnxruntime")
    fifo = tmp_path / "nobody.fifo"
    os.mkfifo(fifo)
    proc = cli("run", MODEL, "--json", fifo, timeout=60)
    assert_one_line_error(proc, "--json", "no process is reading from it")


def test_a_link_to_a_file_is_followed_and_stays_a_link(tmp_path):
    need("onnxruntime")
    target = tmp_path / "real.json"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    proc = cli("run", MODEL, "--json", link)
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert strict_json(target.read_text())["schema"] == "edge-runtime/run/1"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the file keeps its permissions


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        ("dangling", "which does not exist"),
        ("loop", "symbolic link loop"),
        ("block", "is a block device; refusing to replace it"),
        ("directory", "is a directory; refusing to replace it"),
        ("socket", "is a socket; refusing to replace it"),
    ],
)
def test_outputs_that_cannot_be_written_are_refused_before_the_run(tmp_path, make, needle):
    need("onnxruntime")
    dest = tmp_path / "out"
    if make == "dangling":
        dest.symlink_to(tmp_path / "missing" / "x.json")
    elif make == "loop":
        dest.symlink_to(tmp_path / "out2")
        (tmp_path / "out2").symlink_to(dest)
    elif make == "block":
        if os.geteuid() != 0:
            pytest.skip("mknod needs root")
        os.mknod(dest, 0o600 | stat.S_IFBLK, os.makedev(7, 250))
    elif make == "directory":
        dest.mkdir()
    else:
        import socket

        s = socket.socket(socket.AF_UNIX)
        s.bind(str(dest))
        s.close()
    before = dest.lstat()
    t0 = time.monotonic()
    proc = cli("bench", MODEL, "--duration", "30", "--json", dest)
    assert_one_line_error(proc, "--json", needle)
    assert time.monotonic() - t0 < 25  # refused at once, not after the 30 s run
    after = dest.lstat()
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)


def test_dev_stdout_is_standard_output(tmp_path):
    """/dev/stdout means what `-` means: the JSON on standard output, alone (never a file created or replaced)."""
    need("onnxruntime")
    proc = cli("run", MODEL, "--json", "/dev/stdout")
    assert proc.returncode == 0, proc.stderr
    assert strict_json(proc.stdout)["schema"] == "edge-runtime/run/1"
    out = tmp_path / "captured.txt"
    with open(out, "w") as f:  # stdout redirected to a file: written through it, the file is not replaced
        ino = os.fstat(f.fileno()).st_ino
        proc = subprocess.run(
            [sys.executable, "-m", "edge_runtime.cli", "run", str(MODEL), "--json", "/dev/stdout"],
            cwd=ROOT,
            stdout=f,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_ino == ino and strict_json(out.read_text())["schema"] == "edge-runtime/run/1"


def test_outputs_of_one_command_never_overwrite_each_other_or_an_input(tmp_path, digits):
    need("onnxruntime")
    m = tmp_path / "m.onnx"
    calib = tmp_path / "c.npy"
    np.save(calib, digits[0][:20])
    t0 = time.monotonic()
    proc = cli("quantize", FP32, "--calibration", calib, "--out", m, "--json", m)
    assert_one_line_error(proc, "--json", "--out", "same destination")
    assert time.monotonic() - t0 < 20 and not m.exists()  # refused before any work
    f = tmp_path / "r.json"
    for flag in ("--hdr-log", "--prom"):
        assert_one_line_error(cli("bench", MODEL, "--iterations", "5", flag, f, "--json", f), "same destination")
    f.write_text("old")
    link = tmp_path / "alias.json"
    link.symlink_to(f)
    assert_one_line_error(cli("bench", MODEL, "--iterations", "5", "--prom", link, "--json", f), "same destination")
    proc = cli("bench", MODEL, "--iterations", "5", "--prom", "/dev/stdout", "--json")
    assert_one_line_error(proc, "same destination")
    proc = cli("quantize", FP32, "--calibration", calib, "--out", calib.with_suffix(".onnx"), "--json", calib)
    assert_one_line_error(proc, "--json", "is --calibration")
    assert f.read_text() == "old"


def test_no_json_ever_holds_nan(tmp_path):
    need("onnxruntime")
    from edge_runtime.files.outputs import dumps

    text = dumps({"a": float("nan"), "b": [np.float32("inf"), 1.5], "c": {"d": -np.inf}})
    assert strict_json(text) == {"a": None, "b": [None, 1.5], "c": {"d": None}}
    x = tmp_path / "huge.npy"
    np.save(x, np.full((1, 8, 8, 1), 3e38, np.float32))  # finite, but the FP32 model overflows on it
    proc = cli("run", FP32, "--input", x, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = strict_json(proc.stdout)
    # NaN outputs are never ranked as an answer: counted, and said on stderr.
    assert doc["outputs"][0]["top"] == [] and doc["outputs"][0]["non_finite"] == 10
    assert "output 'logits': 10 of 10 values are NaN or infinite" in proc.stderr
    text = cli("run", FP32, "--input", x).stdout
    assert "top: none (10 values NaN or infinite)" in text


@pytest.mark.parametrize("spelling", ["//dev/stdout", "/dev/./stdout", "/proc/thread-self/fd/1", "SAME"])
def test_every_spelling_of_stdout_writes_through_it(tmp_path, spelling):
    need("onnxruntime")
    out = tmp_path / "captured.txt"
    out.write_text("")
    dest = str(out) if spelling == "SAME" else spelling  # `--json F > F`: F is standard output
    with open(out, "w") as f:
        ino = os.fstat(f.fileno()).st_ino
        proc = subprocess.run(
            [sys.executable, "-m", "edge_runtime.cli", "info", "--json", dest],
            cwd=ROOT,
            stdout=f,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_ino == ino  # not replaced: the shell's file is the one written
    assert strict_json(out.read_text())["schema"] == "edge-runtime/info/1"  # and only the JSON, as with -


@pytest.mark.parametrize(
    ("dest", "needle"),
    [
        ("/dev/stdin", "standard input is open for reading"),
        ("/dev/fd/0", "standard input is open for reading"),
        ("/proc/version", "kernel file under /proc or /sys"),
        ("/proc/sys/kernel/hostname", "kernel file under /proc or /sys"),
        ("/dev/fd/²", "kernel file under /proc or /sys"),
    ],
)
def test_descriptors_and_kernel_files_are_refused_before_the_run(tmp_path, dest, needle):
    need("onnxruntime")
    src = tmp_path / "in.txt"
    src.write_text("keep me")
    hostname = Path("/proc/sys/kernel/hostname").read_text()
    t0 = time.monotonic()
    with open(src) as f:
        proc = subprocess.run(
            [sys.executable, "-m", "edge_runtime.cli", "bench", str(MODEL), "--duration", "30", "--json", dest],
            cwd=ROOT,
            stdin=f,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert_one_line_error(proc, needle)
    assert time.monotonic() - t0 < 25 and src.read_text() == "keep me"
    assert Path("/proc/sys/kernel/hostname").read_text() == hostname


def test_closed_stderr_as_an_output_is_refused():
    need("onnxruntime")
    args = [sys.executable, "-m", "edge_runtime.cli", "info", "--json", "/dev/stderr"]
    proc = subprocess.run(
        args, cwd=ROOT, capture_output=False, stdout=subprocess.PIPE, timeout=60, preexec_fn=lambda: os.close(2)
    )
    assert proc.returncode == 2 and proc.stdout == b""


def test_a_hard_linked_result_is_replaced_whole(tmp_path):
    need("onnxruntime")
    f = tmp_path / "r.json"
    f.write_text("old")
    (tmp_path / "hard.json").hardlink_to(f)
    assert cli("run", MODEL, "--json", f).returncode == 0
    assert strict_json(f.read_text())["schema"] == "edge-runtime/run/1"
    assert (tmp_path / "hard.json").read_text() == "old"  # the other name keeps the old file, never half of one


def test_two_commands_never_write_one_result_file_at_once(tmp_path):
    need("onnxruntime")
    f = tmp_path / "r.json"
    first = cli_child("bench", str(MODEL), "--duration", "4", "--json", str(f), stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while "measuring" not in (line := first.stderr.readline()) and time.monotonic() < deadline:
            pass
        assert "measuring" in line
        proc = cli("bench", MODEL, "--iterations", "10", "--json", f)
        assert_one_line_error(proc, "another edge-runtime is writing this file", f"pid {first.pid}")
    finally:
        first.wait(timeout=60)
    assert first.returncode == 0 and strict_json(f.read_text())["latency_us"]["count"] > 0


def test_a_fifo_without_a_reader_is_refused_before_the_run(tmp_path):
    need("onnxruntime")
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    assert_one_line_error(cli("bench", MODEL, "--duration", "30", "--json", fifo), "no process is reading from it")
    assert time.monotonic() - t0 < 25


def test_temporary_files_of_a_killed_writer_are_swept(tmp_path):
    need("onnxruntime")
    dead = subprocess.run(["true"]).args and 2**22 + 12345  # beyond pid_max on most systems: not a live process
    stale = tmp_path / f".r.json.er-{dead}.tmp"
    stale.write_text("half")
    assert cli("run", MODEL, "--json", tmp_path / "r.json").returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_outputs_never_land_in_what_the_command_reads(tmp_path):
    need("onnxruntime")
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "x86-node-exporter", root)
    before = (root / "proc/interrupts").read_bytes()
    for args in (
        ["bench", MODEL, "--iterations", "10", "--sysroot", root, "--json", root / "proc/interrupts"],
        ["info", "--sysroot", root, "--json", root / "proc/cpuinfo"],
        ["thermal", "--sysroot", root, "--json", root / "new.json"],
    ):
        assert_one_line_error(cli(*args), "is inside the --sysroot tree")
    assert (root / "proc/interrupts").read_bytes() == before and not (root / "new.json").exists()
    t = x86_tree(tmp_path)
    state = tmp_path / "state"
    proc = cli("tune", "apply", "--cpus", "1", "--sysroot", t, "--state-dir", state, "--json", state / "x.json")
    assert_one_line_error(proc, "is inside the tune state dir")
    # The board profiles are read by every command: a result written among them would be read as a profile next time.
    boards = tmp_path / "boards"
    shutil.copytree(ROOT / "boards", boards)
    proc = cli("info", "--json", boards / "result.toml", env={**os.environ, "EDGE_RUNTIME_BOARDS": str(boards)})
    assert_one_line_error(proc, "is inside the board profiles directory")
    assert not (boards / "result.toml").exists()


def test_a_full_disk_under_one_output_does_not_cost_the_others(tmp_path):
    need("onnxruntime")
    hlog, prom = tmp_path / "run.hlog", tmp_path / "run.prom"
    proc = run_cli(
        "bench", str(MODEL), "--iterations", "300", "--json", "/dev/full", "--hdr-log", str(hlog), "--prom", str(prom)
    )
    assert_one_line_error(proc, "--json '/dev/full'", "no space left")
    # The two that could be written were written, whole.
    assert "edge_runtime_latency_seconds" in prom.read_text()
    from hdrh.log import HistogramLogReader

    reader = HistogramLogReader(str(hlog), None)
    total = 0
    while (h := reader.get_next_interval_histogram()) is not None:
        total += h.get_total_count()
    assert total == 300


def test_one_data_stream_on_standard_output_is_alone_there(tmp_path):
    need("onnxruntime")
    proc = run_cli("bench", str(MODEL), "--iterations", "200", "--hdr-log", "-")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("#edge-runtime bench digits_cnn_int8.onnx\n#[Histogram log format version")
    assert "latency" not in proc.stdout and "quality" not in proc.stdout  # no text report mixed into the log
    proc = run_cli("bench", str(MODEL), "--iterations", "200", "--prom", "-", "--histogram", "5")
    assert_one_line_error(proc, "--histogram prints text, and --prom - already takes standard output")
