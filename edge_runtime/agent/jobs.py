"""The agent's jobs, each in a child process: a model job (bench, load check) and the read-only commands
(`edge-runtime info|thermal|tune show --json`). A backend library that crashes on import, a delegate that segfaults or
a bench that hangs takes its child, never the agent. The running is measure/child.py's (the host's `local:` target
runs the same way); this adapts it to the agent: request ids, progress messages, `RequestError`. Also here: the host's
bench request made a request on this board, with every path it names checked.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field

from edge_runtime.agent.models import check_sha
from edge_runtime.agent.state import StateDir
from edge_runtime.errors import RequestError
from edge_runtime.measure import child
from edge_runtime.measure.child import ChildJob, run_in_child
from edge_runtime.wire import messages as wm

CANCEL_GRACE_S = child.CANCEL_GRACE_S  # a cancelled job that has not stopped by then is killed
LIBRARY_DIRS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib", "/opt", "/vendor", "/system")


@dataclass
class Job:
    """A request the agent runs in a child: its id and op, and the `ChildJob` that runs it (whose `cancelled` and
    `proc` it shows as its own)."""

    rid: str
    op: str
    args: dict
    rerun: bool = False
    child: ChildJob = field(init=False)

    def __post_init__(self) -> None:
        self.child = ChildJob(self.op, self.args.get("request"))

    @property
    def cancelled(self) -> bool:
        return self.child.cancelled

    @cancelled.setter
    def cancelled(self, value: bool) -> None:
        self.child.cancelled = value

    @property
    def proc(self) -> subprocess.Popen | None:
        return self.child.proc


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
    """Run `job` in a child (measure/child.py, `run_in_child`), its progress sent to the host as the request's; the
    answer, whatever the child prints or however it ends."""
    return run_in_child(job.child, on_progress=lambda text: send(wm.progress(job.rid, text[:500])), lock=lock, cmd=cmd)


def cancel(job: Job) -> None:
    """Ask the job's child to stop; killed if it has not within CANCEL_GRACE_S (measure/child.py, `cancel`)."""
    child.cancel(job.child, CANCEL_GRACE_S)


def run_command(op: str, args: dict) -> dict:
    """`edge-runtime info|thermal|tune show --json` in a child: a backend library that crashes on import takes
    the child, not the agent."""
    argv = {"info": ["info"], "thermal": ["thermal"], "tune_show": ["tune", "show"]}[op]
    cpus = args.get("cpus")
    if op == "tune_show" and cpus is not None:
        if not isinstance(cpus, str) or not all(c.isdigit() or c in ",-" for c in cpus) or len(cpus) > 200:
            raise RequestError(f"cpus {str(cpus)[:80]!r}: a CPU list such as 2-3")
        argv += ["--cpus", cpus]
    try:
        return child.command_in_child(argv, op)
    except child.ChildError as err:
        raise RequestError(err.message, err.kind) from None


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
