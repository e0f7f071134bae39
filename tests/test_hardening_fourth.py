"""Issue 9, the fourth pass: what a third hostile review found after the restructure. Real parts as elsewhere: real
bench runs into /dev/full and pipes, fixture-style trees under tmp_path, a real parent killed with SIGKILL."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import artifact, need
from helpers import assert_one_line_error, run_cli

MODEL = artifact("digits_cnn", "_int8.onnx")


# ------------------------------------------------------------------------------------------------------- outputs


# ------------------------------------------------------------------------------------------------ the environment


# ---------------------------------------------------------------------------------------------------- thermal


# ------------------------------------------------------------------------------------------------- children


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for init to reap it."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status and "\nState:\tX" not in status


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


