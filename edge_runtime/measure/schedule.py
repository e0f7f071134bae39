"""LoadGen's scenarios, run on the board: a schedule of intended send times fixed before the run, whatever the system
under test does, and each query's latency counted from its *intended* send time, not from when it could actually be
sent. A target that stalls cannot hide the queue that builds behind the stall (coordinated omission, Gil Tene's term):
the queries that waited carry the wait in their latency.

The schedules (intended send times in ns from the start of the measured part):
- `server`: a seeded Poisson process at `rate_qps` (`poisson_schedule`).
- `burst`: the same process during `on_s`, nothing during `off_s`, over and over (`burst_schedule`).
- `multi-stream`: a query of `samples_per_query` samples every `interval_ms` (`interval_schedule`); its latency runs
  from its intended send to the end of its last sample.
- `replay`: inter-arrival times from a file (`replay_schedule`): the first gap counts from the start.
- `offline`: every query at once, at time 0; the measure is throughput, so each query's latency is timed from its
  own start (from time 0 it would only say where the query stood in the queue).
`single-stream` (the next query when the last completes) is the closed loop of `loop.measure`.

`run_open_loop` issues one query at a time (a board runs one inference at a time on its pinned cores), never before its
intended time, and records intended, started and finished times. The schedule's own error (started - intended when the
system was idle) says how well the issuer kept to the plan; the send lag of queries that queued is latency, not error.

A run by duration ends at its time (issue 22): no query is sent after it, the queries the target had no time for are
"not sent" (counted, with their share), and the one query in flight then finishes (a board cannot cut an inference).
A run whose target served under SATURATED_BELOW of the scheduled rate is `saturated`, and says so (scenario.py:
`load_keys`, the keys the host's engine writes too).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from edge_runtime.measure.clock import SYSTEM, Clock

MAX_QUERIES = 50_000_000
MAX_REPLAY = 1_000_000  # arrivals in one replay file
CHUNK_QUERIES = 256  # at most this many queries between progress and stop checks (offline sends them all at once)
OPEN_LOOP = ("server", "burst", "multi-stream", "replay", "offline")
KINDS = ("single-stream", *OPEN_LOOP)


def _guard(n: int, what: str) -> None:
    if n > MAX_QUERIES:
        raise ValueError(f"{what} is over {MAX_QUERIES:,} queries")


def poisson_schedule(rate_qps: float, duration_s: float, seed: int = 0) -> np.ndarray:
    """Intended send times (ns from the start) of a Poisson process at `rate_qps` over `duration_s`."""
    if not rate_qps > 0 or not duration_s > 0:
        raise ValueError("rate and duration must be positive")
    n_guess = int(rate_qps * duration_s * 1.2 + 10 * np.sqrt(rate_qps * duration_s) + 10)
    _guard(n_guess, f"{rate_qps:g} queries/s for {duration_s:g} s")
    gaps = np.random.default_rng(seed).exponential(1e9 / rate_qps, n_guess)
    times = np.cumsum(gaps)
    return times[times < duration_s * 1e9].astype(np.int64)


def burst_schedule(rate_qps: float, on_s: float, off_s: float, duration_s: float, seed: int = 0) -> np.ndarray:
    """Poisson arrivals at `rate_qps` during each `on_s`, none during the `off_s` after it, from 0 to `duration_s`."""
    if not on_s > 0 or not off_s >= 0:
        raise ValueError("a burst needs on_s > 0 and off_s >= 0")
    period = on_s + off_s
    cycles, rest = divmod(duration_s, period)
    on_total = cycles * on_s + min(rest, on_s)
    if on_total <= 0:
        return np.empty(0, np.int64)
    t = poisson_schedule(rate_qps, on_total, seed).astype(np.float64)  # times on the "on" clock
    on_ns, period_ns = on_s * 1e9, period * 1e9
    return (np.floor(t / on_ns) * period_ns + np.mod(t, on_ns)).astype(np.int64)


def interval_schedule(interval_s: float, duration_s: float) -> np.ndarray:
    """A query every `interval_s` from 0 while under `duration_s` (multi-stream)."""
    if not interval_s > 0:
        raise ValueError("the interval must be positive")
    n = int(np.ceil(duration_s / interval_s))
    _guard(n, f"a query every {interval_s * 1e3:g} ms for {duration_s:g} s")
    return np.arange(n, dtype=np.int64) * round(interval_s * 1e9)


def replay_schedule(gaps_ms) -> np.ndarray:
    """Send times from inter-arrival gaps in ms: the first gap counts from the start."""
    gaps = np.asarray(gaps_ms, np.float64)
    if gaps.ndim != 1 or not np.all(np.isfinite(gaps)) or np.any(gaps < 0):
        raise ValueError("inter-arrival times must be finite and not negative")
    return np.round(np.cumsum(gaps) * 1e6).astype(np.int64)


def read_arrivals(path: str, what: str = "arrivals") -> tuple[float, ...]:
    """Inter-arrival times in milliseconds from a text file: one number per line (blank lines and `#` comments
    skipped), or a CSV whose first column holds them (a header line is skipped). One-line UserError otherwise."""
    from edge_runtime.errors import UserError
    from edge_runtime.files.inputs import open_input

    where = f"{what} {path!r}"
    with open_input(path, what, max_bytes=64 << 20) as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{where}: not a text file of inter-arrival times in ms") from None
    out: list[float] = []
    for n, line in enumerate(text.splitlines(), 1):
        cell = line.split("#", 1)[0].split(",", 1)[0].strip()
        if not cell:
            continue
        try:
            v = float(cell)
        except ValueError:
            if not out and n == 1:
                continue  # a CSV header
            raise UserError(f"{where} line {n}: {cell[:40]!r} is not a number of milliseconds") from None
        if not np.isfinite(v) or v < 0 or v > 3.6e6:
            raise UserError(f"{where} line {n}: {cell[:40]!r}: an inter-arrival time from 0 to 3,600,000 ms")
        out.append(v)
        if len(out) > MAX_REPLAY:
            raise UserError(f"{where}: over {MAX_REPLAY:,} arrivals (split it into several runs)")
    if not out:
        raise UserError(f"{where}: no inter-arrival times in it (one number of ms per line)")
    return tuple(out)


@dataclass(frozen=True)
class Plan:
    """What an open-loop run sends: the intended times (None: offline for a duration, queries made as it goes),
    the samples per query, and where each latency is timed from."""

    kind: str
    intended_ns: np.ndarray | None
    samples_per_query: int = 1
    from_intended: bool = True
    end_s: float | None = None  # a run by duration: nothing is sent after it (None: a run by count sends every query)
    batch: int = 1  # samples per inference: a query runs samples_per_query / batch inferences (measure/batch.py)


def plan_for(request, iterations: int | None, duration_s: float | None) -> Plan:
    """The schedule a BenchRequest asks for, cut to its iterations (queries) or duration; a query holds one batch
    of samples unless the request says how many."""
    batch = getattr(request, "batch", None) or 1
    plan = _plan_for(request, iterations, duration_s, request.samples_per_query or batch)
    return replace(plan, batch=batch) if batch > 1 else plan


def _plan_for(request, iterations: int | None, duration_s: float | None, spq: int) -> Plan:
    kind = request.scenario
    if kind == "offline":
        if duration_s is not None:
            return Plan(kind, None, spq, from_intended=False)
        return Plan(kind, np.zeros(iterations or 1, np.int64), spq, from_intended=False)
    if kind == "replay":
        sched = replay_schedule(request.arrivals_ms)
        if duration_s is not None:
            sched = sched[sched < duration_s * 1e9]
        plan = Plan(kind, sched[:iterations] if iterations is not None else sched, spq, end_s=duration_s)
        return _nonempty(plan, request, duration_s)
    # for a number of queries, a schedule long enough to hold them, then cut
    length = duration_s
    if length is None:
        per_s = {
            "server": request.rate_qps,
            "burst": (request.rate_qps or 1) * request.burst_on_s / (request.burst_on_s + request.burst_off_s)
            if kind == "burst"
            else 1,
            "multi-stream": 1e3 / (request.interval_ms or 1),
        }[kind]
        length = (iterations or 1) / per_s * 1.5 + 1.0
    if kind == "server":
        sched = poisson_schedule(request.rate_qps, length, request.seed)
    elif kind == "burst":
        sched = burst_schedule(request.rate_qps, request.burst_on_s, request.burst_off_s, length, request.seed)
    else:
        sched = interval_schedule(request.interval_ms / 1e3, length)
    plan = Plan(kind, sched[:iterations] if iterations is not None else sched, spq, end_s=duration_s)
    return _nonempty(plan, request, length)


def _nonempty(plan: Plan, request, length_s: float | None) -> Plan:
    """A schedule with no query in it (a rate of 1e-9 per second over 10 s) is a mistake to say, not an empty run."""
    if plan.intended_ns is not None and len(plan.intended_ns) == 0:
        from edge_runtime.errors import UserError

        rate = f" at {request.rate_qps:g} queries/s" if request.rate_qps else ""
        raise UserError(
            f"the {plan.kind} schedule holds no query in {length_s:g} s{rate}: raise the rate or the duration"
        )
    return plan


@dataclass(frozen=True)
class OpenLoopRun:
    intended_ns: np.ndarray  # from the start, of the queries sent
    started_ns: np.ndarray
    finished_ns: np.ndarray
    t0_ns: int = 0  # the clock's reading at the start
    not_sent: int = 0  # queries of the schedule the run's time was over for

    @property
    def latency_ns(self) -> np.ndarray:
        """From the intended send time: what a client of this system would have waited."""
        return self.finished_ns - self.intended_ns

    @property
    def service_ns(self) -> np.ndarray:
        """From the actual start: what a closed-loop measurement would have reported."""
        return self.finished_ns - self.started_ns

    @property
    def send_error_ns(self) -> np.ndarray:
        """Started minus intended, for the queries that found the system idle (the issuer's own error)."""
        prev_done = np.concatenate(([np.iinfo(np.int64).min], self.finished_ns[:-1]))
        idle = prev_done <= self.intended_ns
        return (self.started_ns - self.intended_ns)[idle]


def wait_until(
    due_ns: int, clock: Clock = SYSTEM, should_stop: Callable[[], bool] | None = None, poll_s: float | None = None
) -> int | None:
    """Return at `due_ns` on `clock` (its now_ns()): sleep until its spin_ns (clock.SPIN_NS) before it, in slices of
    `poll_s` when given, then spin. With `should_stop` (a dispatcher that shares the interpreter with its workers) it
    is asked between slices and the spin yields (a sleep of 0). Returns the clock's reading at or past `due_ns` (what a
    send time is: no second read), or None when `should_stop` said stop before the time came."""
    now, spin_ns = clock.now_ns, clock.spin_ns
    while True:
        t = now()
        left = due_ns - t
        if left <= 0:
            return t
        if should_stop is not None and should_stop():
            return None
        if left > spin_ns:
            wait = (left - spin_ns) / 1e9
            clock.sleep(min(wait, poll_s) if poll_s else wait)
        elif should_stop is not None:
            clock.sleep(0)
        else:  # the board's spin: nothing else in the loop, so the send leaves within a clock read of its time
            while (t := now()) < due_ns:
                pass
            return t


def run_open_loop(
    call: Callable[[], object],
    schedule_ns: np.ndarray,
    clock: Clock = SYSTEM,
    t0: int | None = None,
    deadline_ns: int | None = None,
) -> OpenLoopRun:
    """Issue `call()` at each intended time (at once when behind), one at a time; times in ns from `t0` (default:
    now; a later chunk of one schedule passes the schedule's own start). From `deadline_ns` (from `t0`) on nothing is
    sent: the queries left are `not_sent`."""
    n = len(schedule_ns)
    started = np.empty(n, np.int64)
    finished = np.empty(n, np.int64)
    t0 = clock.now_ns() if t0 is None else t0
    cut = None if deadline_ns is None else t0 + deadline_ns
    sent = n
    for i in range(n):
        s = wait_until(t0 + int(schedule_ns[i]), clock)
        if cut is not None and s >= cut:
            sent = i
            break
        call()
        e = clock.now_ns()
        started[i] = s - t0
        finished[i] = e - t0
    intended = np.asarray(schedule_ns, np.int64)[:sent]
    return OpenLoopRun(intended, started[:sent], finished[:sent], t0, n - sent)


def query_of(fn: Callable[[], object], samples: int) -> Callable[[], None]:
    """One query of `samples` inferences, back to back (multi-stream's N samples on a board that runs one at a time)."""
    if samples == 1:
        return fn

    def query() -> None:
        for _ in range(samples):
            fn()

    return query


def _chunks(plan: Plan, step_ns: int):
    """The plan in pieces of about `step_ns` of schedule time and at most CHUNK_QUERIES queries."""
    sched = plan.intended_ns
    if sched is None:  # offline for a duration: everything at 0, as many as time allows
        while True:  # (a query of a batch of N is N samples: the time is checked as often as at batch 1)
            yield np.zeros(max(1, CHUNK_QUERIES // plan.batch), np.int64)
    done = 0
    while done < len(sched):
        end = int(np.searchsorted(sched, sched[done] + step_ns, side="left"))
        end = min(max(end, done + 1), done + CHUNK_QUERIES)
        yield sched[done:end]
        done = end


def measure_open_loop(
    fn: Callable[[], object],
    plan: Plan,
    *,
    until_s: float | None = None,
    warmup: int = 10,
    warmup_s: float | None = None,
    progress: Callable[[int, int | None, float], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    chunk_s: float = 0.5,
    on_start: Callable[[], None] | None = None,
    on_end: Callable[[], None] | None = None,
):
    """An open-loop scenario with the contract of `loop.measure`: warm-up (closed loop, single samples, untimed),
    then the plan in chunks, progress and stop checks between chunks; `until_s` ends an offline run by time, and a
    plan's `end_s` a scheduled one (the queries it leaves are the run's `not_sent`).
    Returns (Measurement whose samples are the query latencies, OpenLoopRun)."""
    from edge_runtime.measure.loop import Measurement, gc_paused, timer_overhead_ns, warm_up

    overhead = timer_overhead_ns()
    warm, _ = warm_up(fn, warmup, warmup_s, should_stop)
    if should_stop is not None and should_stop():
        empty = np.empty(0, np.int64)
        return Measurement(empty, time.time_ns(), 0.0, warm, overhead, stopped=True), OpenLoopRun(empty, empty, empty)
    call = query_of(fn, plan.samples_per_query // plan.batch)  # a whole number of batches (request.validate)
    total = None if plan.intended_ns is None else len(plan.intended_ns)
    deadline_ns = round(plan.end_s * 1e9) if plan.end_s is not None and plan.from_intended else None
    if on_start is not None:
        on_start()
    with gc_paused():  # collected now; no collection inside the timed part
        start_wall = time.time_ns()
        begin = time.perf_counter_ns()
        parts: list[OpenLoopRun] = []
        chunks: list[tuple[int, float]] = [(0, 0.0)]
        done, stopped, not_sent = 0, False, 0
        for piece in _chunks(plan, int(chunk_s * 1e9)):
            part = run_open_loop(call, piece, t0=begin, deadline_ns=deadline_ns)
            parts.append(part)
            done += len(part.intended_ns)
            elapsed = (time.perf_counter_ns() - begin) / 1e9
            chunks.append((done, elapsed))
            if progress:
                progress(done, total, elapsed)
            if part.not_sent:  # the run's time is over: the rest of this piece and of the plan are not sent
                not_sent = (total or 0) - done
                break
            if should_stop is not None and should_stop():
                stopped = True
                break
            if until_s is not None and elapsed >= until_s:
                break
    wall_s = (time.perf_counter_ns() - begin) / 1e9
    if on_end is not None:
        on_end()

    def joined(name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in parts]) if parts else np.empty(0, np.int64)

    run = OpenLoopRun(joined("intended_ns"), joined("started_ns"), joined("finished_ns"), begin, not_sent)
    samples = (run.latency_ns if plan.from_intended else run.service_ns).copy()
    m = Measurement(samples, start_wall, wall_s, warm, overhead, False, stopped, chunks, begin / 1e9, 0)
    return m, run
