"""The agent's jobs, each in a child process: a model job (bench, load check: `edge_runtime.agent.child`) and the
read-only commands (`edge-runtime info|thermal|tune show --json`). A backend library that crashes on import, a
delegate that segfaults or a bench that hangs takes its child, never the agent. Also here: the host's bench request
made a request on this board, with every path it names checked.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass

from edge_runtime.agent.models import check_sha
from edge_runtime.agent.state import StateDir
from edge_runtime.errors import RequestError
from edge_runtime.system.process import dies_with_parent, signal_name
from edge_runtime.wire import messages as wm

COMMAND_TIMEOUT_S = 120.0
CANCEL_GRACE_S = 30.0  # a cancelled job that has not stopped by then is killed
LIBRARY_DIRS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib", "/opt", "/vendor", "/system")


@dataclass
class Job:
    rid: str
    op: str
    args: dict
    proc: subprocess.Popen | None = None
    cancelled: bool = False
    rerun: bool = False


def board_request(state: StateDir, request: object) -> dict:
    """The host's request with its model named by hash, made a request on this board (the model's path in the
    state dir), with every path it names checked: nothing leads out of the state dir but a delegate library in
    a system library directory."""
    from edge_runtime.measure.request import BenchRequest

    if not isinstance(request, dict):
        raise RequestError("request: a bench request object is needed")
    sha = request.get("model_sha256")
    if sha is None:
        raise RequestError("request: model_sha256 is needed (the agent keeps models by hash)")
    name = request.get("model")
    # The request's name (held or an alias: the same bytes) resolves to the held files.
    doc = {**request, "model": state.model_path(check_sha(sha), None if name is None else os.path.basename(str(name)))}
    req = BenchRequest.from_json(doc)  # the same checks as a local request: bounds, kinds, unknown keys
    if req.delegate is not None:
        real = os.path.realpath(req.delegate)
        if os.sep in req.delegate and (
            not real.startswith(tuple(d + os.sep for d in LIBRARY_DIRS))
            or real.startswith(os.path.realpath(state.root) + os.sep)
        ):
            raise RequestError(
                f"delegate {req.delegate!r}: a board library under {', '.join(LIBRARY_DIRS[:5])}..., or a bare "
                "name the loader finds",
                "bad-path",
            )
    for key, value in {**req.options, **req.delegate_options}.items():
        if "/" in value or "\\" in value:
            raise RequestError(f"option {key}={value[:80]!r}: a path in an option is not taken over the wire",
                               "bad-path")  # fmt: skip
    return doc


def run_child(job: Job, lock, send, cmd: list[str] | None = None) -> dict:
    """Run `job` in a child (`edge_runtime.agent.child`) and give its answer. Whatever the child prints or however it
    ends, this returns an answer: lines that are not the child's JSON are skipped, stderr is kept to its last lines,
    a cancel that the child does not heed within CANCEL_GRACE_S becomes SIGKILL, and the child never outlives this."""
    cmd = dies_with_parent(cmd or [sys.executable, "-m", "edge_runtime.agent.child"])
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except OSError as err:
        return {"ok": False, "error": {"kind": "internal", "message": f"cannot start the job: {err.strerror}"}}
    with lock:
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
            proc.stdin.write(json.dumps({"op": job.op, "request": job.args["request"]}).encode())
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
                send(wm.progress(job.rid, str(doc["progress"])[:500]))
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
    if final is None:
        if job.cancelled:
            return {"ok": False, "error": {"kind": "cancelled", "message": "cancelled before anything was measured"}}
        why = f"signal {-rc} ({signal_name(-rc)})" if rc < 0 else f"exit {rc}"
        last = " ".join("".join(list(stderr)[-3:])[-2000:].split())[-300:]  # its last words, not a flood before them
        kind = "crashed" if rc < 0 else "internal"
        return {"ok": False, "error": {"kind": kind, "message": f"the job died ({why}){': ' + last if last else ''}"}}
    if "error" in final:
        err = final["error"] if isinstance(final["error"], dict) else {"kind": "internal", "message": str(final)}
        return {"ok": False, "error": err, "warnings": warnings}
    return {"ok": True, "result": final["result"], "warnings": warnings}


def cancel(job: Job) -> None:
    """Ask the job's child to stop (SIGINT: a bench ends its loop at the next chunk and keeps what it measured); one
    that does not heed it within CANCEL_GRACE_S (a native library stuck in a call) is killed."""
    proc = job.proc
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)

    def escalate() -> None:
        try:
            proc.wait(timeout=CANCEL_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()

    threading.Thread(target=escalate, daemon=True).start()


def run_command(op: str, args: dict) -> dict:
    """`edge-runtime info|thermal|tune show --json` in a child: a backend library that crashes on import takes
    the child, not the agent."""
    argv = {"info": ["info"], "thermal": ["thermal"], "tune_show": ["tune", "show"]}[op]
    cpus = args.get("cpus")
    if op == "tune_show" and cpus is not None:
        if not isinstance(cpus, str) or not all(c.isdigit() or c in ",-" for c in cpus) or len(cpus) > 200:
            raise RequestError(f"cpus {str(cpus)[:80]!r}: a CPU list such as 2-3")
        argv += ["--cpus", cpus]
    cmd = dies_with_parent([sys.executable, "-m", "edge_runtime.cli", *argv, "--json"])
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RequestError(f"{op}: no answer in {COMMAND_TIMEOUT_S:g} s", "timeout") from None
    try:
        doc = json.loads(done.stdout)
        if not isinstance(doc, dict):
            raise ValueError("not an object")
        return doc
    except (ValueError, RecursionError):
        last = " ".join(done.stderr.split())[-300:]
        raise RequestError(f"{op} failed (exit {done.returncode}): {last}", "internal") from None


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


def stored_message(stored: dict) -> wm.Msg:
    """The response message of an answer kept in the outbox."""
    rid, op = stored["id"], stored["op"]
    if stored.get("ok"):
        msg = wm.ok(rid, op, stored["result"])
    else:
        err = stored.get("error") or {}
        msg = wm.failed(rid, op, err.get("kind", "internal"), err.get("message", "failed"))
    extra = {k: stored[k] for k in ("warnings", "rerun_after_restart") if stored.get(k)}
    return wm.Msg(msg.type, {**msg.fields, **extra}) if extra else msg
