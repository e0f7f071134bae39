"""A client process of the multi-process load engine (procs.py): it receives its share of a run (a Job) and a
picklable sender spec, builds its own clients, says ready, starts at the parent's instant, runs its share through the
ordinary engine and sends back its rows. It dies with its parent (PR_SET_PDEATHSIG) and stops when told, when its pipe
closes, or on SIGTERM; it ignores SIGINT (the parent decides what a Ctrl-C does).

Never: print (its stdout is the parent's terminal), or outlive the parent."""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import threading
import time
from multiprocessing.connection import Connection

from bench.scenarios.engine import closed_loop, open_loop
from bench.scenarios.procs import CHILD_START_TIMEOUT_S, Job, _cpu_s
from edge_runtime.measure.clock import SystemClock


class StartAt(SystemClock):
    """The system clock, except that the first reading after `pin` is set is `pin` itself: the engine's zero is
    then the parent's common start instant exactly, however late this child's thread wakes."""

    def __init__(self) -> None:
        self.pin: int | None = None

    def now_ns(self) -> int:  # type: ignore[override]
        if self.pin is not None:
            t, self.pin = self.pin, None
            self.now_ns = time.perf_counter_ns  # from now on the plain clock, read as fast as SYSTEM's
            return t
        return time.perf_counter_ns()


def _die_with_parent(parent: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG (prctl(2))
    if os.getppid() != parent:  # the parent died before the line above: nobody will collect this child's work
        os._exit(0)


def child_main(fd: int, parent: int) -> None:
    """A client process: receive (spec, job), build the senders, say ready, start at the parent's instant, run its
    share through the engine, send back the rows. Never raises: a failure is sent as one line."""
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(fd)
    stop, go = threading.Event(), queue.Queue()
    signal.signal(signal.SIGTERM, lambda *_: (stop.set(), go.put(None)))
    try:
        spec, job = conn.recv()
        make_sender, examples = spec.factory()
    except EOFError:
        return
    except Exception as err:  # noqa: BLE001 - said to the parent in one line, which refuses the run with it
        conn.send(("error", f"{type(err).__name__}: {err}"))
        return

    def listen() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):  # the parent is gone: stop, nobody is waiting for the rows
                stop.set()
                go.put(None)
                return
            if msg[0] == "go":
                go.put(msg[1])
            elif msg[0] == "stop":
                stop.set()
                go.put(None)

    threading.Thread(target=listen, daemon=True).start()
    try:
        conn.send(("done", _child_run(conn, job, make_sender, examples, stop, go)))
    except _Abort:
        pass
    except Exception as err:  # noqa: BLE001
        with contextlib.suppress(OSError):
            conn.send(("error", f"{type(err).__name__}: {err}"))


class _Abort(Exception):
    """Stopped, or the parent gone, before the start."""


def _child_run(conn, job: Job, make_sender, examples, stop, go) -> dict:
    from edge_runtime.measure.loop import warm_up
    from edge_runtime.measure.schedule import wait_until

    clock = StartAt()
    cpu: dict = {}
    senders = [make_sender() for _ in range(job.workers)]
    warm = 0
    if job.warmup_s:
        warm, _ = warm_up(make_sender(), 0, job.warmup_s, stop.is_set, check_every=1)
    warm += job.warmup_each * job.workers

    def on_start() -> None:
        conn.send(("ready",))
        try:
            t0 = go.get(timeout=CHILD_START_TIMEOUT_S + (job.warmup_s or 0))
        except queue.Empty:
            t0 = None
        if t0 is None:
            raise _Abort
        wait_until(t0)
        cpu["start"] = _cpu_s()
        clock.pin = t0

    def progress(done: int, _total, _el) -> None:
        conn.send(("progress", done))

    loop = dict(should_stop=stop.is_set, progress=progress, warmup_each=job.warmup_each, on_start=on_start,
                clock=clock)  # fmt: skip
    if job.closed:
        run = closed_loop(senders, queries=job.queries, duration_s=job.duration_s, **loop)
    else:
        run = open_loop(senders, job.schedule_ns, until_s=job.until_s, from_intended=job.from_intended, **loop)
    cpu_s = _cpu_s() - cpu.get("start", _cpu_s())
    return {"intended": run.intended_ns, "started": run.started_ns, "finished": run.finished_ns,
            "errors": run.errors, "wall_s": run.wall_s, "stopped": run.stopped, "warmup": warm,
            "examples": dict(examples), "cpu_s": cpu_s, "cut_off": run.cut_off, "pid": os.getpid()}  # fmt: skip
