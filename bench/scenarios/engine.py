"""The host-side load generator, for server targets: the harness's scenarios run here, as a client sees them (network
included), like perf_analyzer. A board runs its scenarios itself (`edge_runtime.measure.schedule`); a server cannot,
so the host generates the load with the same schedules and the same rule: in an open loop, latency runs from each
query's *intended* send time.

- closed loop (`single-stream` with concurrency 1, or N queries in flight): N workers, each sending its next query
  when its last one completes;
- open loop (`server`, `burst`, `multi-stream`, `replay`): a dispatcher hands each query to a pool of workers at its
  intended time; a query that finds every worker busy waits, and the wait is latency (the pool is the client's
  connections: its size is the concurrency, by default enough that the client is not the bottleneck);
- `offline`: every query queued at time 0 for N workers; the measure is throughput, each latency from its own start.

Each worker owns its `send` (one client, one connection: tritonclient's clients are not shared across threads).
`send()` returns None on success or an error kind ("timeout", "HTTP 503", "unreachable", ...): a failed query is
counted, never fatal, and the run reports the share against the SLO's error budget.

An open loop by duration ends at its time (issue 22): no query is sent after it, what is still queued is "not sent"
(counted, with its share: the record keeps them out of the failed queries), and the queries in flight get END_GRACE_S
to come back ("no answer" after it). A saturated server cannot stretch a run of 8 s into minutes of its backlog.
A closed loop by duration ends the same way (issue 24): no query starts after its time, and the run returns at its
time plus END_GRACE_S whatever the server does (a server that trickles its answers once held a run of 3 s for
minutes); the queries still out are "no answer", counted, and `cut_off` says how many (the record says the run was
ended by its deadline). A closed loop stopped by a signal waits END_GRACE_S for its queries in flight, no longer.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from edge_runtime.measure.clock import SYSTEM, Clock
from edge_runtime.measure.loop import warm_up
from edge_runtime.measure.schedule import wait_until

Sender = Callable[[], str | None]
MAX_WORKERS = 256
JOIN_GRACE_S = 60.0  # after the schedule: how long in-flight queries may still take before the run gives up on them
# After an open loop's end by duration: far beyond any latency an SLO here is about, short beside a run
# (docs/harness.md).
END_GRACE_S = 5.0
NOT_SENT = "not sent"  # the error kind of a query the run ended (or gave up) before sending


@dataclass
class HostRun:
    """Per query, in the order issued: intended, started and finished times (ns from the start; finished is -1 for
    a query that never came back), and its error kind (None: answered)."""

    intended_ns: np.ndarray
    started_ns: np.ndarray
    finished_ns: np.ndarray
    errors: list[str | None]
    wall_s: float
    from_intended: bool
    concurrency: int
    stopped: bool = False
    warmup: int = 0
    kinds: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)  # kind -> the first message of that kind (set by the target)
    interrupted: int | None = None  # the signal that stopped the run (Ctrl-C, SIGTERM); None: it ran to its end
    samples_per_query: int = 1  # requests per query (multi-stream): the server's statistics count requests
    cut_off: int = 0  # queries still out when the run ended at its time + END_GRACE_S ("no answer")

    @property
    def ok(self) -> np.ndarray:
        return np.array([e is None for e in self.errors], bool) & (self.finished_ns >= 0)

    @property
    def latency_ns(self) -> np.ndarray:
        """Of the answered queries, in the order they finished."""
        ok = self.ok
        start = self.intended_ns if self.from_intended else self.started_ns
        lat = (self.finished_ns - start)[ok]
        return lat[np.argsort(self.finished_ns[ok], kind="stable")]

    @property
    def failed(self) -> int:
        return int(len(self.errors) - self.ok.sum())


class _Start:
    """Each worker warms up in its own thread (its connection is made there, not in the timed part), then all start
    together: the clock's zero is read once every worker is ready."""

    def __init__(self, n: int, warmup_each: int, duration_s: float | None = None, clock: Clock = SYSTEM):
        self.warmup_each = warmup_each
        self.duration_s = duration_s
        self.clock = clock
        self.ready = threading.Barrier(n + 1)
        self.go = threading.Event()
        self.t0 = 0
        self.deadline: int | None = None

    def worker_ready(self, send: Sender) -> None:
        for _ in range(self.warmup_each):
            if _call(send) is not None:
                break  # a server that fails now fails the run's queries too: counted there, not waited for here
        with self.clock.parked():
            self.ready.wait()
            self.go.wait()

    def start(self, on_start: Callable[[], None] | None = None) -> int:
        with self.clock.parked():
            self.ready.wait()
        if on_start is not None:  # e.g. the server's statistics, read after the warm-up and before the first query
            on_start()
        self.t0 = self.clock.now_ns()
        if self.duration_s is not None:
            self.deadline = self.t0 + int(self.duration_s * 1e9)
        self.go.set()
        return self.t0


def closed_loop(
    senders: list[Sender],
    *,
    queries: int | None = None,
    duration_s: float | None = None,
    should_stop: Callable[[], bool] | None = None,
    progress: Callable[[int, int | None, float], None] | None = None,
    warmup_each: int = 0,
    on_start: Callable[[], None] | None = None,
    clock: Clock = SYSTEM,
) -> HostRun:
    """len(senders) workers, each sending its next query when its last completes, until `queries` were sent or
    `duration_s` passed; each first sends `warmup_each` untimed queries in its own thread."""
    n = len(senders)
    lock = threading.Lock()
    rows: list[tuple[int, int, str | None]] = []
    issued = [0]
    gate = _Start(n, warmup_each, duration_s, clock)
    stop = threading.Event()

    def worker(send: Sender) -> None:
        gate.worker_ready(send)
        t0 = gate.t0
        while not stop.is_set():
            with lock:
                if queries is not None and issued[0] >= queries:
                    return
                issued[0] += 1
            s = clock.now_ns()
            if gate.deadline is not None and s >= gate.deadline:
                return
            with lock:
                row = [s - t0, -1, "no answer"]  # in flight: a query the run gives up on stays counted
                rows.append(row)
            err = _call(send)
            e = clock.now_ns()
            with lock:
                row[1], row[2] = e - t0, err

    threads = [threading.Thread(target=worker, args=(s,), daemon=True) for s in senders]
    for t in threads:
        t.start()
    t0 = gate.start(on_start)
    interrupted = None
    end = None if gate.deadline is None else gate.deadline + int(END_GRACE_S * 1e9)
    try:
        stopped = _wait(threads, stop, queries, t0, rows, should_stop, progress, clock, end)
    except KeyboardInterrupt as err:  # Ctrl-C, SIGTERM: the queries in flight get the grace, what came back is kept
        stop.set()
        _join_all(threads, END_GRACE_S, clock)
        stopped, interrupted = True, getattr(err, "signum", None) or 2
    stop.set()  # a worker still out past the grace sends nothing more once its query returns
    wall = (clock.now_ns() - t0) / 1e9
    with lock:  # a straggler past the grace cannot change what is returned
        done = sorted(tuple(r) for r in rows)
    cut_off = 0 if stopped else sum(1 for r in done if r[1] < 0)
    started = np.array([r[0] for r in done], np.int64)
    finished = np.array([r[1] for r in done], np.int64)
    return HostRun(started.copy(), started, finished, [r[2] for r in done], wall, False, n, stopped,
                   kinds=Counter(r[2] for r in done if r[2]), interrupted=interrupted, cut_off=cut_off)  # fmt: skip


def _join_all(threads, grace_s: float | None = None, clock: Clock = SYSTEM) -> None:
    """Join every thread against one deadline (a hung server costs the grace once, not once per worker). The grace is
    real seconds whatever the clock: a safety net against a hung server, not the run's time. An open loop's grace is
    the run's time left on its clock, taken at face value, plus END_GRACE_S (with a fake clock: virtual seconds left
    counted as real ones, plus END_GRACE_S real ones)."""
    end = time.monotonic() + (JOIN_GRACE_S if grace_s is None else grace_s)
    with clock.parked():  # the workers may be asleep on the clock: time moves while this thread waits for them
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))


def open_loop(
    senders: list[Sender],
    schedule_ns: np.ndarray,
    *,
    from_intended: bool = True,
    until_s: float | None = None,
    should_stop: Callable[[], bool] | None = None,
    progress: Callable[[int, int | None, float], None] | None = None,
    warmup_each: int = 0,
    on_start: Callable[[], None] | None = None,
    clock: Clock = SYSTEM,
) -> HostRun:
    """Each query handed to the pool of len(senders) workers at its intended time (all at once when behind); with
    `from_intended` False (offline) latency is timed from each query's own start. `until_s` ends the run at its time:
    no query starts after it, and those in flight then get END_GRACE_S. The queries it leaves are NOT_SENT queries of
    the run (an offline run leaves them out: its queue is not a schedule)."""
    n_q = len(schedule_ns)
    started = np.full(n_q, -1, np.int64)
    finished = np.full(n_q, -1, np.int64)
    errors: list[str | None] = [NOT_SENT] * n_q
    jobs: queue.Queue = queue.Queue()
    abandon = threading.Event()
    gate = _Start(len(senders), warmup_each, until_s, clock)
    done = [0]
    lock = threading.Lock()

    def worker(send: Sender) -> None:
        gate.worker_ready(send)
        t0, cut = gate.t0, gate.deadline
        while True:
            with clock.parked():
                i = jobs.get()
            if i is None:
                return
            if abandon.is_set():
                return  # the run is over: what is still queued is not sent
            s = clock.now_ns()
            if cut is not None and s >= cut:
                return  # the run's time is over: this query and the rest of the queue are not sent
            started[i] = s - t0  # before the send: a query in flight at the end is "no answer", not "not sent"
            err = _call(send)
            e = clock.now_ns()
            finished[i], errors[i] = e - t0, err
            with lock:
                done[0] += 1

    threads = [threading.Thread(target=worker, args=(s,), daemon=True) for s in senders]
    for t in threads:
        t.start()
    t0 = gate.start(on_start)
    cut = gate.deadline
    stopped, interrupted = False, None
    try:
        report = (lambda el: progress(done[0], n_q, el)) if progress is not None else (lambda _el: None)
        stopped = _dispatch(jobs, schedule_ns, t0, cut, clock, should_stop, report)
    except KeyboardInterrupt as err:  # Ctrl-C, SIGTERM: nothing more is sent; what was sent is waited for and kept
        stopped, interrupted = True, getattr(err, "signum", None) or 2
    if stopped:  # the queries queued but not started are not sent
        while True:
            try:
                jobs.get_nowait()
            except queue.Empty:
                break
    for _ in threads:
        jobs.put(None)
    _join_all(threads, None if cut is None else max(0.0, (cut - clock.now_ns()) / 1e9) + END_GRACE_S, clock)
    abandon.set()  # workers still busy past the grace send nothing more once their query returns
    wall = (clock.now_ns() - t0) / 1e9
    started, finished, errors = started.copy(), finished.copy(), list(errors)  # what stragglers write is not ours
    sent = started >= 0
    cut_off = int((sent & (finished < 0)).sum()) if cut is not None and not stopped else 0
    # queries never sent are not queries of this run when it was stopped, nor of an offline one cut by time;
    # otherwise they are its NOT_SENT ones: the schedule asked for them and no connection was free in the run's time
    keep = sent if stopped or (cut is not None and not from_intended) else np.ones(n_q, bool)
    errors = [e if finished[i] >= 0 or e != NOT_SENT or not sent[i] else "no answer" for i, e in enumerate(errors)]
    idx = np.flatnonzero(keep)
    errs = [errors[i] for i in idx]
    return HostRun(np.asarray(schedule_ns, np.int64)[idx], started[idx], finished[idx], errs, wall, from_intended,
                   len(senders), stopped, kinds=Counter(e for e in errs if e), interrupted=interrupted,
                   cut_off=cut_off)  # fmt: skip


def _dispatch(jobs: queue.Queue, schedule_ns: np.ndarray, t0: int, cut: int | None, clock: Clock,
              should_stop: Callable[[], bool] | None, report: Callable[[float], None]) -> bool:  # fmt: skip
    """Hand each query to the workers at its intended time (`wait_until`: slept in slices of 50 ms with stop checks,
    the last SPIN_NS spun), until the run's `cut`; progress each second. True when stopped."""
    last_report = 0.0
    for i in range(len(schedule_ns)):
        due = t0 + int(schedule_ns[i])
        if cut is not None and max(due, clock.now_ns()) >= cut:
            return False  # the run's time is over (or the dispatcher itself fell behind it): the rest are not sent
        if wait_until(due, clock, should_stop, poll_s=0.05) is None or (should_stop is not None and should_stop()):
            return True
        jobs.put(i)
        el = (clock.now_ns() - t0) / 1e9
        if el - last_report >= 1.0:
            last_report = el
            report(el)
    return False


def _call(send: Sender) -> str | None:
    try:
        return send()
    except Exception as err:  # noqa: BLE001 - a query that failed in a way the sender did not name: counted, not fatal
        return type(err).__name__


def _wait(
    threads, stop, queries, t0, rows, should_stop, progress, clock: Clock = SYSTEM, end: int | None = None
) -> bool:
    """Wait for the workers of a closed loop, with progress and stop checks, until they end or the clock reaches
    `end` (the run's time + END_GRACE_S: then the queries still out are left to their workers); True when stopped."""
    last = 0.0
    while True:
        alive = [t for t in threads if t.is_alive()]
        if not alive or (end is not None and clock.now_ns() >= end):
            return False
        with clock.parked():
            alive[0].join(0.1)  # a live one: never a spin on one that has already ended
        el = (clock.now_ns() - t0) / 1e9
        if should_stop is not None and should_stop():
            stop.set()
            _join_all(threads, END_GRACE_S, clock)
            return True
        if progress is not None and el - last >= 1.0:
            last = el
            progress(len(rows), queries, el)


def run_request(
    request,
    make_sender: Callable[[], Sender],
    *,
    workers: int,
    should_stop: Callable[[], bool] | None = None,
    say: Callable[[str], None] | None = None,
    on_start: Callable[[], None] | None = None,
    clock: Clock = SYSTEM,
) -> HostRun:
    """A BenchRequest run on `workers` connections, each with its own sender from `make_sender()`: a warm-up by time
    first when the request has one (on one more sender, checked for a stop after each query; then one query per
    connection), else its warm-up queries shared among the connections in their own threads; then a closed loop
    (single-stream; offline, N in flight, each the moment one returns) or the request's open-loop schedule
    (`plan_for`). `say` hears the progress, `on_start` runs after the warm-up, just before the first timed query. The
    run carries its warm-up count and samples per query."""
    from edge_runtime.measure.schedule import plan_for

    say = say or (lambda _text: None)
    kind = request.scenario or "single-stream"
    iterations, duration_s = request.length
    senders = [make_sender() for _ in range(workers)]
    warm = 0
    if request.warmup_s:  # a warm-up by time first (the server's), then one query per connection
        say(f"warming up ({request.warmup_s:g} s)")
        warm, _ = warm_up(make_sender(), 0, request.warmup_s, should_stop, check_every=1, clock=clock)
    each = 1 if request.warmup_s else max(1, -(-request.warmup // workers))  # in each worker's own thread
    warm += each * workers

    def tick(done: int, total: int | None, elapsed: float) -> None:
        say(f"measuring: {done:,}" + (f"/{total:,}" if total else "") + f" queries, {elapsed:.1f} s")

    loop = dict(should_stop=should_stop, progress=tick, warmup_each=each, on_start=on_start, clock=clock)
    if kind in ("single-stream", "offline"):
        run = closed_loop(senders, queries=iterations, duration_s=duration_s, **loop)
    else:
        plan = plan_for(request, iterations, duration_s)
        run = open_loop(senders, plan.intended_ns, until_s=plan.end_s, **loop)
    run.warmup, run.samples_per_query = warm, request.samples_per_query or 1
    return run
