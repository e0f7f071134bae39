"""Issue 9, the fourth pass: what a third hostile review found after the restructure. Real parts as elsewhere: real
bench runs into /dev/full and pipes, fixture-style trees under tmp_path, a real parent killed with SIGKILL."""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, artifact, need
from helpers import assert_one_line_error, run_cli, write_tree, x86_tree

from edge_runtime.system.root import SystemRoot
from edge_runtime.system.thermal import read_snapshot, thermal_limit, throttle_reasons

MODEL = artifact("digits_cnn", "_int8.onnx")


# ------------------------------------------------------------------------------------------------------- outputs
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


# ------------------------------------------------------------------------------------------------ the environment
def test_a_tree_that_does_not_say_is_unknown_and_its_hostname_is_the_boards(tmp_path):
    need("onnxruntime")
    root = write_tree(tmp_path / "root", {"sys/devices/system/cpu/online": "0-3\n"})
    proc = run_cli("bench", str(MODEL), "--iterations", "50", "--sysroot", str(root), "--json")
    assert proc.returncode == 0, proc.stderr
    env = json.loads(proc.stdout)["environment"]
    # No /proc/cmdline, no isolated list, no hostname in the tree: unknown, not "" / [] / this machine's name.
    assert env["cmdline"] is None and env["isolated_cpus"] is None and env["hostname"] is None
    assert env["online_cpus"] == [0, 1, 2, 3] and env["measured_on"]["hostname"] == platform.node()
    write_tree(root, {"proc/sys/kernel/hostname": "rock5b-bench-7\n", "proc/cmdline": "console=ttyS2\n"})
    write_tree(root, {"sys/devices/system/cpu/isolated": "\n"})
    assert not any("thermal and power read from" in w for w in json.loads(proc.stdout)["quality"]["warnings"])
    write_tree(
        root, {"sys/class/thermal/thermal_zone0/type": "soc-thermal\n", "sys/class/thermal/thermal_zone0/temp": "41000"}
    )
    doc = json.loads(run_cli("bench", str(MODEL), "--iterations", "50", "--sysroot", str(root), "--json").stdout)
    env = doc["environment"]
    assert env["hostname"] == "rock5b-bench-7" and env["cmdline"] == "console=ttyS2" and env["isolated_cpus"] == []
    # Temperatures from a tree beside latencies from this machine: the result says where each came from.
    assert doc["thermal"]["start_c"] == 41.0
    assert f"thermal and power read from the --sysroot tree {root}, not from the machine" in " ".join(
        doc["quality"]["warnings"]
    )


# ---------------------------------------------------------------------------------------------------- thermal
def test_a_placeholder_trip_point_or_crit_is_not_a_limit(tmp_path):
    zone = "sys/class/thermal/thermal_zone0"
    root = write_tree(
        tmp_path,
        {
            f"{zone}/type": "cpu-thermal\n",
            f"{zone}/temp": "45000\n",
            f"{zone}/trip_point_0_temp": "1\n",  # 1 m°C: a placeholder some DTS carry
            f"{zone}/trip_point_0_type": "passive\n",
            "sys/class/hwmon/hwmon0/name": "odd\n",
            "sys/class/hwmon/hwmon0/temp1_input": "40000\n",
            "sys/class/hwmon/hwmon0/temp1_crit": "-40000\n",
        },
    )
    snap = read_snapshot(SystemRoot(root))
    assert thermal_limit(None, None, snap) == (None, "none known")  # a limit of 0 C or -40 C would refuse every run
    write_tree(root, {f"{zone}/trip_point_1_temp": "85000\n", f"{zone}/trip_point_1_type": "critical\n"})
    assert thermal_limit(None, None, read_snapshot(SystemRoot(root))) == (85.0, "lowest passive/critical trip point")


@pytest.mark.parametrize(("driver", "reported"), [("cpufreq-dt", True), ("intel_pstate", False), (None, True)])
def test_a_clock_below_its_minimum_is_throttling_where_the_reading_is_the_clock(tmp_path, driver, reported):
    d = "sys/devices/system/cpu/cpu0/cpufreq"
    files = {
        "sys/devices/system/cpu/online": "0\n",
        f"{d}/cpuinfo_max_freq": "1800000\n",
        f"{d}/scaling_max_freq": "1800000\n",  # not capped: the governor allows the full clock
        f"{d}/scaling_min_freq": "1500000\n",
        f"{d}/scaling_cur_freq": "600000\n",
    }
    if driver:
        files[f"{d}/scaling_driver"] = driver + "\n"
    snap = read_snapshot(SystemRoot(write_tree(tmp_path, files)))
    expected = ["CPU0 at 600 MHz, below its minimum of 1500 MHz (held down by hardware or firmware)"]
    # intel_pstate reports an average over the last tick, which an idle CPU drags below any minimum.
    assert throttle_reasons(snap) == (expected if reported else [])


# ------------------------------------------------------------------------------------------------- children
def test_a_helper_child_dies_with_its_parent_even_on_sigkill():
    """Every child we start (the sandbox's crash check, co-runners, cyclictest, tegrastats) goes through the same
    trampoline: kill -9 the parent and the child must not live on, loading a model or hogging a CPU for nobody."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "from edge_runtime.system.process import dies_with_parent\n"
            "child = subprocess.Popen(dies_with_parent([sys.executable, '-c', 'import time; time.sleep(120)']))\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(120)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 10
        # Wait until the trampoline has exec'd the child (its argv no longer holds the launcher).
        while b"time.sleep(120)" not in Path(f"/proc/{child}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.02)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(child), "the child outlived a parent killed with SIGKILL"
    finally:
        parent.kill()
        parent.wait()


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for init to reap it."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status and "\nState:\tX" not in status


def test_a_tune_lock_that_is_a_fifo_does_not_hang_a_dry_run(tmp_path):
    """The tune lock read for a dry run is opened non-blocking and read only when it is a regular file."""
    from edge_runtime.system import tuning

    t = x86_tree(tmp_path)
    lock = Path(tuning.lock_path(str(t)))
    lock.unlink(missing_ok=True)
    os.mkfifo(lock)
    try:
        proc = run_cli("tune", "apply", "--dry-run", "--sysroot", str(t), "--cpus", "2", "--state-dir", str(tmp_path))
        assert proc.returncode == 0, proc.stderr
        assert "would write" in proc.stdout
    finally:
        lock.unlink()


# ------------------------------------------------------------------------------------------------------ messages
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


# ---------------------------------------------------------------------------------------------------------- locks
def _locks() -> set[str]:
    from edge_runtime.files.locks import lock_dir

    # Output claims and tune locks: the commands this test runs. An agent's lock (edge-runtime-agent-*) belongs to
    # whatever agent runs on this machine meanwhile, not to these commands.
    return {n for n in os.listdir(lock_dir()) if n.startswith(("edge-runtime-out-", "edge-runtime-tune-"))}


def test_lock_files_do_not_pile_up_and_still_exclude(tmp_path):
    """Every output claim and tune lock is a file in /run/lock; a bench station runs thousands of commands, so each
    is removed by its holder as it lets go, and a second writer of the same file is still refused meanwhile."""
    need("onnxruntime")
    before = _locks()
    for i in range(3):
        proc = run_cli("bench", str(MODEL), "--iterations", "20", "--json", str(tmp_path / f"r{i}.json"))
        assert proc.returncode == 0, proc.stderr
    assert _locks() == before
    # While one bench holds its output, a second one writing the same file is refused.
    same = tmp_path / "same.prom"
    slow = subprocess.Popen(
        [sys.executable, "-m", "edge_runtime.cli", "bench", str(MODEL), "--duration", "30", "--prom", str(same)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while len(_locks() - before) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc = run_cli("bench", str(MODEL), "--iterations", "20", "--prom", str(same))
        assert_one_line_error(proc, "another edge-runtime is writing this file", f"(pid {slow.pid})")
    finally:
        slow.send_signal(signal.SIGINT)
        slow.wait(30)
    assert _locks() == before
    # Tune: the lock records applied tuning until the reset, and goes with it.
    t = x86_tree(tmp_path)
    state = tmp_path / "state"
    assert run_cli("tune", "apply", "--sysroot", str(t), "--cpus", "2", "--state-dir", str(state)).returncode == 0
    assert len(_locks() - before) == 1
    assert run_cli("tune", "reset", "--sysroot", str(t), "--state-dir", str(state)).returncode == 0
    assert _locks() == before
