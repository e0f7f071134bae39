"""A request run in a child process, the public way: the agent's jobs (agent/jobs.py) and the host's `local:` target
run a bench or load check through `run_in_child` (the program is `python -m edge_runtime.measure.child_main`), and
ask for the board's identity through `board_info`. A backend library that crashes on import, a delegate that
segfaults or a bench that hangs takes its child, never the caller.

- `run_in_child(job, on_progress=..., lock=...)`: the child's answer, whatever it prints or however it ends:
  {"ok": True, "result", "warnings"} or {"ok": False, "error": {"kind", "message"}}.
- `cancel(job)`: SIGINT (the bench keeps what it measured), SIGKILL after CANCEL_GRACE_S.
- `command_in_child(argv, name)`, `info_in_child()`, `board_info()`: `edge-runtime ... --json` in a child; a child
  that fails is a `ChildError` with a kind ("timeout", "internal").
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

from edge_runtime.errors import UserError
from edge_runtime.system.process import dies_with_parent, signal_name

COMMAND_TIMEOUT_S = 120.0
CANCEL_GRACE_S = 30.0  # a cancelled job that has not stopped by then is killed
CHILD_MAIN = "edge_runtime.measure.child_main"


class ChildError(UserError):
    """A command in a child that gave no answer: `kind` says how ("timeout", "internal")."""

    def __init__(self, message: str, kind: str = "internal"):
        super().__init__(message)
        self.kind = kind


@dataclass
class ChildJob:
    """One request for the child: `op` ("bench" | "load_check") and the request as JSON. `cancelled` and `proc` (the
    child, once started) are what `cancel` reads."""

    op: str
    request: object
    cancelled: bool = False
    proc: subprocess.Popen | None = None


def run_in_child(job: ChildJob, *, on_progress: Callable[[str], None] | None = None, lock=None,
                 cmd: list[str] | None = None) -> dict:  # fmt: skip
    """Run `job` in a child and give its answer. Whatever the child prints or however it ends, this returns an
    answer: lines that are not the child's JSON are skipped, stderr is kept to its last lines, a cancel that the child
    does not heed within CANCEL_GRACE_S becomes SIGKILL, and the child never outlives this. `on_progress` hears each
    progress line; `lock` guards `job.proc` where another thread may cancel."""
    cmd = dies_with_parent(cmd or [sys.executable, "-m", CHILD_MAIN])
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except OSError as err:
        return {"ok": False, "error": {"kind": "internal", "message": f"cannot start the job: {err.strerror}"}}
    with lock if lock is not None else contextlib.nullcontext():
        job.proc = proc
    stderr: collections.deque[str] = collections.deque(maxlen=20)

    def drain_stderr() -> None:
        for raw in proc.stderr:
            stderr.append(raw.decode("utf-8", "replace"))

    drainer = threading.Thread(target=drain_stderr, daemon=True)
    drainer.start()
    final, warnings = None, []
    try:
        try:
            proc.stdin.write(json.dumps({"op": job.op, "request": job.request}).encode())
            proc.stdin.close()
        except OSError:
            pass  # the child is already gone: its end is reported below
        if job.cancelled:
            cancel(job)
        for raw in proc.stdout:
            try:
                doc = json.loads(raw.decode("utf-8"))
            except (ValueError, UnicodeDecodeError, RecursionError):
                continue  # a native library talking on stdout
            if not isinstance(doc, dict):
                continue
            if "progress" in doc:
                if on_progress is not None:
                    on_progress(str(doc["progress"]))
            elif "warning" in doc:
                warnings.append(str(doc["warning"])[:500])
            elif "result" in doc or "error" in doc:
                final = doc
        rc = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    drainer.join(timeout=2)
    return _answer(job, final, warnings, rc, list(stderr))


def _answer(job: ChildJob, final: dict | None, warnings: list[str], rc: int, stderr: list[str]) -> dict:
    if final is None:
        if job.cancelled:
            return {"ok": False, "error": {"kind": "cancelled", "message": "cancelled before anything was measured"}}
        why = f"signal {-rc} ({signal_name(-rc)})" if rc < 0 else f"exit {rc}"
        last = " ".join("".join(stderr[-3:])[-2000:].split())[-300:]  # its last words, not a flood before them
        kind = "crashed" if rc < 0 else "internal"
        return {"ok": False, "error": {"kind": kind, "message": f"the job died ({why}){': ' + last if last else ''}"}}
    if "error" in final:
        err = final["error"] if isinstance(final["error"], dict) else {"kind": "internal", "message": str(final)}
        return {"ok": False, "error": err, "warnings": warnings}
    return {"ok": True, "result": final["result"], "warnings": warnings}


def cancel(job: ChildJob, grace_s: float | None = None) -> None:
    """Ask the job's child to stop (SIGINT: a bench ends its loop at the next chunk and keeps what it measured); one
    that does not heed it within `grace_s` (CANCEL_GRACE_S; a native library stuck in a call) is killed."""
    proc = job.proc
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    grace_s = CANCEL_GRACE_S if grace_s is None else grace_s

    def escalate() -> None:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()

    threading.Thread(target=escalate, daemon=True).start()


def command_in_child(argv: list[str], name: str, timeout_s: float = COMMAND_TIMEOUT_S) -> dict:
    """`edge-runtime ARGV --json` in a child, its JSON object; ChildError when it gives none."""
    cmd = dies_with_parent([sys.executable, "-m", "edge_runtime.cli", *argv, "--json"])
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ChildError(f"{name}: no answer in {timeout_s:g} s", "timeout") from None
    try:
        doc = json.loads(done.stdout)
        if not isinstance(doc, dict):
            raise ValueError("not an object")
        return doc
    except (ValueError, RecursionError):
        last = " ".join(done.stderr.split())[-300:]
        raise ChildError(f"{name} failed (exit {done.returncode}): {last}", "internal") from None


def info_in_child(timeout_s: float = COMMAND_TIMEOUT_S) -> dict:
    """`edge-runtime info --json`, in a child: a backend library that crashes on import takes the child."""
    return command_in_child(["info"], "info", timeout_s)


def board_identity(info: dict) -> dict:
    """What a hello tells the host about this board, from `edge-runtime info --json`."""
    return {
        "board": info.get("board"),
        "board_profile": (info.get("board_profile") or {}).get("name"),
        "cpu_model": info.get("cpu_model"),
        "kernel": info.get("kernel"),
        "python": info.get("python"),
        "cpus": info.get("cpus"),
        "backends": {
            name: (b.get("version") if b.get("installed") else None) for name, b in (info.get("backends") or {}).items()
        },
        "hostname": os.uname().nodename,
    }


def board_info() -> dict:
    """This board's identity (`board_identity` of `info_in_child`); ChildError when info gives no answer."""
    return board_identity(info_in_child())
