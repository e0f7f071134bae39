"""The agent's jobs, each in a child process: a model job (bench, load check: `edge_runtime.agent.child`) and the
read-only commands (`edge-runtime info|thermal|tune show --json`). A backend library that crashes on import, a
delegate that segfaults or a bench that hangs takes its child, never the agent. Also here: the host's bench request
made a request on this board, with every path it names checked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass

from edge_runtime.agent.state import RequestError, StateDir, check_name, check_sha
from edge_runtime.system.process import dies_with_parent
from edge_runtime.wire import messages as wm

COMMAND_TIMEOUT_S = 120.0
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
    doc = {**request, "model": state.model_path(check_sha(sha))}
    if name is not None and os.path.basename(doc["model"]) != check_name(os.path.basename(str(name)), "model"):
        raise RequestError(f"model {name!r} is not the name model {sha[:12]} was uploaded under")
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


def run_child(job: Job, lock, send) -> dict:
    cmd = dies_with_parent([sys.executable, "-m", "edge_runtime.agent.child"])
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
        )
    except OSError as err:
        return {"ok": False, "error": {"kind": "internal", "message": f"cannot start the job: {err.strerror}"}}
    with lock:
        job.proc = proc
        if job.cancelled:
            proc.send_signal(signal.SIGINT)
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)
    reader.start()
    proc.stdin.write(json.dumps({"op": job.op, "request": job.args["request"]}))
    proc.stdin.close()
    final, warnings = None, []
    for line in proc.stdout:
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if "progress" in doc:
            send(wm.progress(job.rid, str(doc["progress"])))
        elif "warning" in doc:
            warnings.append(str(doc["warning"]))
        else:
            final = doc
    rc = proc.wait()
    reader.join(timeout=5)
    if final is None or ("result" not in final and "error" not in final):
        why = f"signal {-rc}" if rc < 0 else f"exit {rc}"
        last = " ".join("".join(stderr[-3:]).split())[:300]
        kind = "crashed" if rc < 0 else "internal"
        return {
            "ok": False,
            "error": {"kind": kind, "message": f"the job died ({why}){': ' + last if last else ''}"},
        }
    if "error" in final:
        return {"ok": False, "error": final["error"], "warnings": warnings}
    return {"ok": True, "result": final["result"], "warnings": warnings}


def run_command(op: str, args: dict) -> dict:
    """`edge-runtime info|thermal|tune show --json` in a child: a backend library that crashes on import takes
    the child, not the agent."""
    argv = {"info": ["info"], "thermal": ["thermal"], "tune_show": ["tune", "show"]}[op]
    cpus = args.get("cpus")
    if op == "tune_show" and cpus is not None:
        if not isinstance(cpus, str) or not all(c.isdigit() or c in ",-" for c in cpus) or len(cpus) > 200:
            raise RequestError(f"cpus {str(cpus)[:80]!r}: a CPU list such as 2-3")
        argv += ["--cpus", cpus]
    cmd = [sys.executable, "-m", "edge_runtime.cli", *argv, "--json"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RequestError(f"{op}: no answer in {COMMAND_TIMEOUT_S:g} s", "timeout") from None
    try:
        return json.loads(done.stdout)
    except ValueError:
        last = " ".join(done.stderr.split())[-300:]
        raise RequestError(f"{op} failed (exit {done.returncode}): {last}", "internal") from None
