"""Lock files (edge_runtime/files/locks.py): a tune lock that is a link or a fifo, and lock files that neither
pile up nor stop excluding."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from conftest import artifact, need
from helpers import assert_one_line_error, cli, cli_child, run_cli, state_key, x86_tree

MODEL = artifact("digits_cnn", "_int8.onnx")


def _locks() -> set[str]:
    from edge_runtime.files.locks import lock_dir

    # Output claims and tune locks: the commands this test runs. An agent's lock (edge-runtime-agent-*) belongs to
    # whatever agent runs on this machine meanwhile, not to these commands.
    return {n for n in os.listdir(lock_dir()) if n.startswith(("edge-runtime-out-", "edge-runtime-tune-"))}


def test_the_tune_lock_never_follows_a_link(tmp_path):
    from edge_runtime.files.locks import lock_dir

    t = x86_tree(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    lock = Path(lock_dir()) / f"edge-runtime-tune-{state_key(t)}.lock"
    lock.unlink(missing_ok=True)
    lock.symlink_to(victim)
    try:
        proc = cli("tune", "apply", "--cpus", "1", "--sysroot", t, "--state-dir", tmp_path / "st")
        assert_one_line_error(proc, "tuning lock")
        assert victim.read_text() == "precious"
    finally:
        lock.unlink()


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
    slow = cli_child("bench", str(MODEL), "--duration", "30", "--prom", str(same), stdout=subprocess.DEVNULL,
                     text=False)  # fmt: skip
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
