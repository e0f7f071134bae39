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


def run_open_loop(call: Callable[[], object], schedule_ns: np.ndarray, clock=time.perf_counter_ns) -> OpenLoopRun:
    """Issue `call()` at each intended time (at once when behind), one at a time; times in ns from the start."""
    n = len(schedule_ns)
    started = np.empty(n, np.int64)
    finished = np.empty(n, np.int64)
    t0 = clock()
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
