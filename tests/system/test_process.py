"""Child processes (edge_runtime/system/process.py): a helper child dies with its parent."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for init to reap it."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status and "\nState:\tX" not in status


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
