"""The load engine over several client processes, for server targets fast enough that one interpreter is the limit
(issue 24: one Python process tops out near 3,300 queries/s whatever the concurrency, and its own queueing is
reported as the server's latency).

The parent splits the run: N connections over P processes (default: one per connection, at most the CPUs this
process may use: `default_processes`), a closed loop's query count in proportion, an open loop's schedule query by
query (query i goes to connection i mod N's process, with its intended time unchanged). Each child is a fresh
interpreter (`python -c`, never a fork of a process that has threads) that builds its own clients from a picklable
spec (`spec.factory()`), runs the ordinary engine (bench/scenarios/engine.py: closed_loop / open_loop, the same
warm-up and end rules) on its share, and sends back its per-query intended, started and finished times and errors.

- One clock: every process times with perf_counter_ns, which is CLOCK_MONOTONIC on Linux, one clock for the whole
  machine, so the parent names one start instant and every child's times are taken from it: the child's engine
  reads that instant as its zero (procs_child.py: `StartAt`), after sleeping (then spinning) until it. The merge is
  exact: the rows are concatenated, nothing is resampled or binned (no histogram merge is needed: the record's
  histogram is built from the exact merged latencies).
- Open loops keep timing from the intended send: each child's intended times are the plan's own values.
- Stopping: the run's end, the target's stop, Ctrl-C or SIGTERM in the parent send "stop" to every child, which
  ends its run as the engine ends a stopped one and sends what it measured. Children ignore SIGINT (a terminal's
  Ctrl-C reaches the whole process group: the parent decides) and take SIGTERM as "stop". A child dies with its
  parent: PR_SET_PDEATHSIG (SIGKILL) through prctl, and it also stops when its pipe to the parent closes.
- Every wait is bounded: a child must be ready within CHILD_START_TIMEOUT_S (plus the warm-up), and must answer
  within the engine's own grace plus RESULT_GRACE_S after the run's end or its stop; then it is killed.
- A child that dies (or is killed) loses what it measured: its queries are counted as failed, of kind
  CHILD_DIED, with a message saying which process and how it ended; the run goes on and is stored.
- The client's own CPU (each child's getrusage over its timed part, plus the parent's) is measured: see client.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

import numpy as np

from bench.scenarios.engine import END_GRACE_S, JOIN_GRACE_S, HostRun
from edge_runtime.errors import EdgeRuntimeError

CHILD_START_TIMEOUT_S = 60.0  # a client process ready: a fresh interpreter's imports, its connections, its warm-up
RESULT_GRACE_S = 15.0  # after the run's end (or its stop) and the engine's own grace: then a child is killed
LEAD_NS = 30_000_000  # the common start is this long after "go" is sent (every child has it before it comes)
CHILD_DIED = "client process died"


class ClientProcessError(EdgeRuntimeError):
    """A client process could not start its share of the run (exit 3: the harness's own failure)."""


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_processes(workers: int) -> int:
    """One process per connection, at most the CPUs this process may use."""
    return max(1, min(workers, usable_cpus()))


@dataclass
class Job:
    """One child's share of a run."""

    index: int
    workers: int
    closed: bool
    queries: int | None = None
    duration_s: float | None = None
    schedule_ns: np.ndarray | None = None
    until_s: float | None = None
    from_intended: bool = True
    warmup_each: int = 1
    warmup_s: float | None = None


@dataclass
class Child:
    job: Job
    proc: subprocess.Popen
    conn: Connection
    ready: bool = False
    done: dict | None = None
    progress: int = 0
    error: str | None = None
    closed: bool = False


def split_jobs(request, workers: int, processes: int, closed: bool, plan=None) -> list[Job]:
    """The run's connections, queries or schedule divided among `processes` children."""
    processes = max(1, min(processes, workers))
    each = [workers // processes + (1 if i < workers % processes else 0) for i in range(processes)]
    iterations, duration_s = request.length
    warm_each = 1 if request.warmup_s else max(1, -(-request.warmup // workers))
    jobs = []
    owner = np.repeat(np.arange(processes), each)  # connection -> its process
    for i, w in enumerate(each):
        job = Job(i, w, closed, warmup_each=warm_each, warmup_s=request.warmup_s)
        if closed:
            job.duration_s = duration_s
            if iterations is not None:
                job.queries = iterations * w // workers + (1 if i < iterations * w % workers else 0)
        else:
            mine = owner[np.arange(len(plan.intended_ns)) % workers] == i
            job.schedule_ns, job.until_s = np.asarray(plan.intended_ns, np.int64)[mine], plan.end_s
            job.from_intended = True
        jobs.append(job)
    if closed and iterations is not None:  # exactly `iterations` in all, whatever the rounding
        jobs[0].queries += iterations - sum(j.queries for j in jobs)
    return jobs


@dataclass
class Spawned:
    children: list[Child] = field(default_factory=list)

    def kill_all(self) -> None:
        for c in self.children:
            if c.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    c.proc.kill()
        for c in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                c.proc.wait(5)
            with contextlib.suppress(OSError):
                c.conn.close()

    def send_all(self, msg) -> None:
        for c in self.children:
            if not c.closed and c.done is None:
                with contextlib.suppress(OSError, ValueError):
                    c.conn.send(msg)


def spawn(spec, jobs: list[Job]) -> Spawned:
    """One fresh interpreter per job, a socket pair to each (the child's end passed as an inherited fd)."""
    import bench

    root = os.path.dirname(os.path.dirname(os.path.abspath(bench.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    out = Spawned()
    for job in jobs:
        mine, theirs = socket.socketpair()
        code = f"from bench.scenarios.procs_child import child_main; child_main({theirs.fileno()}, {os.getpid()})"
        proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(theirs.fileno(),), env=env,
                                stdin=subprocess.DEVNULL, close_fds=True)  # fmt: skip
        theirs.close()
        conn = Connection(mine.detach())
        child = Child(job, proc, conn)
        out.children.append(child)
        try:
            conn.send((spec, job))
        except OSError as err:  # it died at once (a broken interpreter?): said when the run starts
            child.error, child.closed = f"could not be given its share: {err}", True
    return out


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system


# ---------------------------------------------------------------------------------------------------- the parent
def run_processes(request, spec, jobs: list[Job], *, should_stop=None, say=None, on_start=None):
    """Run `jobs` in child processes and merge them: (the run, each process's CPU seconds over the timed part with
    the parent's last; None for a child that sent nothing)."""
    say = say or (lambda _t: None)
    spawned = spawn(spec, jobs)
    try:
        return _drive(spawned, request, should_stop, say, on_start)
    finally:
        spawned.kill_all()


def _receive(c: Child) -> None:
    try:
        msg = c.conn.recv()
    except (EOFError, OSError):
        c.closed = True
        return
    except Exception as err:  # noqa: BLE001 - a message cut by a signal mid-read: this child's rows are lost
        c.error, c.closed = f"unreadable message ({type(err).__name__})", True
        return
    if msg[0] == "ready":
        c.ready = True
    elif msg[0] == "progress":
        c.progress = msg[1]
    elif msg[0] == "done":
        c.done = msg[1]
    elif msg[0] == "error":
        c.error = msg[1]
        c.closed = True


def _pump(spawned: Spawned, timeout: float) -> None:
    live = {c.conn: c for c in spawned.children if not c.closed and c.done is None}
    if not live:
        time.sleep(min(timeout, 0.05))
        return
    for conn in wait(list(live), timeout):
        _receive(live[conn])


def _drive(spawned: Spawned, request, should_stop, say, on_start) -> HostRun:
    children = spawned.children
    deadline = time.monotonic() + CHILD_START_TIMEOUT_S + (request.warmup_s or 0)
    say(f"starting {len(children)} client processes")
    while not all(c.ready for c in children):
        bad = next((c for c in children if c.error or c.closed), None)
        if bad is not None:
            why = bad.error or f"exited {bad.proc.poll()}"
            raise ClientProcessError(f"client process {bad.job.index} failed before the run: {why}")
        if time.monotonic() > deadline:
            raise ClientProcessError(f"client processes not ready within {CHILD_START_TIMEOUT_S:g} s")
        if should_stop is not None and should_stop():
            raise KeyboardInterrupt
        _pump(spawned, 0.1)
    if on_start is not None:
        on_start()
    cpu0 = _cpu_s()
    t0 = time.perf_counter_ns() + LEAD_NS
    spawned.send_all(("go", t0))
    interrupted, stopped, told = None, False, False
    iterations, duration_s = request.length
    # bounded: the run's time, the engine's grace for queries in flight (a run by duration ends at its time +
    # END_GRACE_S), and RESULT_GRACE_S for the rows to arrive; a child still silent then is killed, its queries lost
    end = None if duration_s is None else time.monotonic() + LEAD_NS / 1e9 + duration_s + END_GRACE_S + RESULT_GRACE_S
    last_say = time.monotonic()
    while any(c.done is None and not c.closed for c in children):
        try:  # all of it: a Ctrl-C may land anywhere here (in the progress line just printed, as often as not)
            _pump(spawned, 0.1)
            stopped = stopped or (should_stop is not None and should_stop())
            if stopped and not told:
                spawned.send_all(("stop",))
                told = True
                late = time.monotonic() + JOIN_GRACE_S + RESULT_GRACE_S
                end = late if end is None else min(end, late)
            if end is not None and time.monotonic() > end:
                break
            if time.monotonic() - last_say >= 1.0:
                last_say = time.monotonic()
                total = sum(c.progress for c in children)
                say(f"measuring: {total:,}" + (f"/{iterations:,}" if iterations else "") + " queries, "
                    f"{(time.perf_counter_ns() - t0) / 1e9:.1f} s, {len(children)} client processes")  # fmt: skip
        except KeyboardInterrupt as err:  # Ctrl-C, SIGTERM: every child stops, what they measured is kept
            interrupted, stopped = getattr(err, "signum", None) or 2, True
    parent_cpu = _cpu_s() - cpu0
    run = merge(children, request)
    run.interrupted = interrupted or run.interrupted
    run.stopped = run.stopped or stopped
    return run, [c.done["cpu_s"] if c.done else None for c in children] + [parent_cpu]


def merge(children: list[Child], request) -> HostRun:
    """Every child's rows in one run: a closed loop's in the order sent, an open loop's in the schedule's order. A
    child without rows (dead, killed, unanswering) adds its queries as failed CHILD_DIED ones."""
    closed = children[0].job.closed
    parts, examples, warm, wall, stopped, cut_off = [], {}, 0, 0.0, False, 0
    for c in children:
        if c.done is not None:
            d = c.done
            parts.append((d["intended"], d["started"], d["finished"], list(d["errors"])))
            for k, v in d["examples"].items():
                examples.setdefault(k, v)
            warm += d["warmup"]
            wall = max(wall, d["wall_s"])
            stopped = stopped or d["stopped"]
            cut_off += d.get("cut_off", 0)
            continue
        how = _how_ended(c)
        if closed:
            n = max(c.progress, c.job.workers)
            intended = np.full(n, -1, np.int64)
        else:
            intended = c.job.schedule_ns
            n = len(intended)
        examples.setdefault(CHILD_DIED, f"client process {c.job.index} (pid {c.proc.pid}) {how}: its {n:,} queries "
                                        "are counted as failed")  # fmt: skip
        parts.append((intended, np.full(n, -1, np.int64), np.full(n, -1, np.int64), [CHILD_DIED] * n))
    intended = np.concatenate([p[0] for p in parts]).astype(np.int64)
    started = np.concatenate([p[1] for p in parts]).astype(np.int64)
    finished = np.concatenate([p[2] for p in parts]).astype(np.int64)
    errors = [e for p in parts for e in p[3]]
    key = started if closed else intended
    order = np.lexsort((finished, key))
    if closed:  # the queries a dead child lost have no send time: last, in the run's order
        order = np.concatenate([order[started[order] >= 0], order[started[order] < 0]])
        intended = started.copy()
        intended[intended < 0] = -1
    errors = [errors[i] for i in order]
    run = HostRun(intended[order], started[order], finished[order], errors, wall, not closed,
                  sum(c.job.workers for c in children), stopped, kinds=Counter(e for e in errors if e))  # fmt: skip
    run.examples, run.warmup, run.cut_off = examples, warm, cut_off
    run.samples_per_query = request.samples_per_query or 1
    return run


def _how_ended(c: Child) -> str:
    with contextlib.suppress(subprocess.TimeoutExpired):
        c.proc.wait(1)
    rc = c.proc.poll()
    if rc is None:
        return "did not answer in time (killed)"
    if rc < 0:
        return f"died of {signal.Signals(-rc).name}"
    return c.error or f"exited {rc} without its results"
