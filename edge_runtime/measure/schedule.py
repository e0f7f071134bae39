"""Open-loop load: MLPerf LoadGen's server scenario. Queries arrive on a schedule fixed before the run (a seeded Poisson
process at the target rate), whatever the system under test does; each query's latency is counted from its *intended*
arrival, not from when it could actually be sent. A target that stalls cannot hide the queue that builds behind the
stall (coordinated omission, Gil Tene's term): the queries that waited carry the wait in their latency.

`poisson_schedule` gives the intended send times; `run_open_loop` issues one query at a time (a board runs one
inference at a time on its pinned cores), never before its intended time, and records intended, started and finished
times in nanoseconds. The schedule's own error (started - intended when the system was idle) says how well the
issuer kept to the plan; the send lag of queries that queued is latency, not error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

MAX_QUERIES = 50_000_000
SPIN_NS = 200_000  # the last 0.2 ms before a send are spun, not slept (sleep wakes late by ~50-100 us)


def poisson_schedule(rate_qps: float, duration_s: float, seed: int = 0) -> np.ndarray:
    """Intended send times (ns from the start) of a Poisson process at `rate_qps` over `duration_s`."""
    if not rate_qps > 0 or not duration_s > 0:
        raise ValueError("rate and duration must be positive")
    n_guess = int(rate_qps * duration_s * 1.2 + 10 * np.sqrt(rate_qps * duration_s) + 10)
    if n_guess > MAX_QUERIES:
        raise ValueError(f"{rate_qps:g} queries/s for {duration_s:g} s is over {MAX_QUERIES:,} queries")
    gaps = np.random.default_rng(seed).exponential(1e9 / rate_qps, n_guess)
    times = np.cumsum(gaps)
    return times[times < duration_s * 1e9].astype(np.int64)


@dataclass(frozen=True)
class OpenLoopRun:
    intended_ns: np.ndarray  # from the start
    started_ns: np.ndarray
    finished_ns: np.ndarray
    t0_ns: int = 0  # the clock's reading at the start

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

    def achieved_rate(self) -> float:
        if len(self.intended_ns) < 2:
            return 0.0
        span = (self.started_ns[-1] - self.started_ns[0]) / 1e9
        return (len(self.started_ns) - 1) / span if span > 0 else 0.0


def run_open_loop(
    call: Callable[[], object], schedule_ns: np.ndarray, clock=time.perf_counter_ns, t0: int | None = None
) -> OpenLoopRun:
    """Issue `call()` at each intended time (at once when behind), one at a time; times in ns from `t0` (default:
    now; a later chunk of one schedule passes the schedule's own start)."""
    n = len(schedule_ns)
    started = np.empty(n, np.int64)
    finished = np.empty(n, np.int64)
    t0 = clock() if t0 is None else t0
    for i in range(n):
        due = t0 + int(schedule_ns[i])
        now = clock()
        if now < due:
            if due - now > SPIN_NS:
                time.sleep((due - now - SPIN_NS) / 1e9)
            while clock() < due:
                pass
        s = clock()
        call()
        e = clock()
        started[i] = s - t0
        finished[i] = e - t0
    return OpenLoopRun(np.asarray(schedule_ns, np.int64), started, finished, t0)


def measure_open_loop(
    fn: Callable[[], object],
    *,
    rate_qps: float,
    duration_s: float | None = None,
    queries: int | None = None,
    seed: int = 0,
    warmup: int = 10,
    warmup_s: float | None = None,
    progress: Callable[[int, int | None, float], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    chunk_s: float = 0.5,
    on_start: Callable[[], None] | None = None,
    on_end: Callable[[], None] | None = None,
):
    """The server scenario with the contract of `loop.measure`: warm-up (closed loop, untimed), then the schedule in
    chunks of about `chunk_s` of schedule time, progress and stop checks between chunks. Returns (Measurement whose
    samples are latencies from the intended send times, OpenLoopRun)."""
    import gc

    from edge_runtime.measure.loop import Measurement, timer_overhead_ns, warm_up

    length_s = duration_s if duration_s is not None else (queries or 1) / rate_qps * 1.5 + 1.0
    sched = poisson_schedule(rate_qps, length_s, seed)
    if queries is not None:
        sched = sched[:queries]
    overhead = timer_overhead_ns()
    warm, _ = warm_up(fn, warmup, warmup_s, should_stop)
    if should_stop is not None and should_stop():
        empty = np.empty(0, np.int64)
        return Measurement(empty, time.time_ns(), 0.0, warm, overhead, stopped=True), OpenLoopRun(empty, empty, empty)
    if on_start is not None:
        on_start()
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    start_wall = time.time_ns()
    begin = time.perf_counter_ns()
    parts: list[OpenLoopRun] = []
    chunks: list[tuple[int, float]] = [(0, 0.0)]
    done, stopped = 0, False
    step_ns = int(chunk_s * 1e9)
    try:
        while done < len(sched):
            # the next chunk: the queries intended within the next chunk_s of the schedule
            end = int(np.searchsorted(sched, sched[done] + step_ns, side="left"))
            end = max(end, done + 1)
            part = run_open_loop(fn, sched[done:end], t0=begin)
            parts.append(part)
            done = end
            elapsed = (time.perf_counter_ns() - begin) / 1e9
            chunks.append((done, elapsed))
            if progress:
                progress(done, len(sched), elapsed)
            if should_stop is not None and should_stop():
                stopped = True
                break
    finally:
        if was_enabled:
            gc.enable()
    wall_s = (time.perf_counter_ns() - begin) / 1e9
    if on_end is not None:
        on_end()
    run = OpenLoopRun(
        np.concatenate([p.intended_ns for p in parts]) if parts else np.empty(0, np.int64),
        np.concatenate([p.started_ns for p in parts]) if parts else np.empty(0, np.int64),
        np.concatenate([p.finished_ns for p in parts]) if parts else np.empty(0, np.int64),
        begin,
    )
    m = Measurement(run.latency_ns.copy(), start_wall, wall_s, warm, overhead, False, stopped, chunks, begin / 1e9, 0)
    return m, run


def scenario_section(rate_qps: float, run: OpenLoopRun | None) -> dict | None:
    """The server scenario's own numbers for the result record: rate asked and achieved, the schedule's error when
    the board was free, and latency timed from the actual send (what a closed loop would have said) beside the
    record's latency_us (from the intended send)."""
    if run is None or len(run.intended_ns) == 0:
        return None
    from edge_runtime.measure.stats import nearest_rank

    def pct(values: np.ndarray, p: float) -> float | None:
        return round(nearest_rank(np.sort(values), p) / 1e3, 3) if len(values) else None

    err, service = run.send_error_ns, run.service_ns
    return {
        "kind": "server",
        "rate_qps": rate_qps,
        "achieved_qps": round(run.achieved_rate(), 2),
        "queries": len(run.intended_ns),
        "latency_from": "intended send time (open loop; no coordinated omission)",
        "send_error_us": {"p50": pct(err, 50), "p99": pct(err, 99)},
        "service_us": {"p50": pct(service, 50), "p99": pct(service, 99)},
    }
