"""The clock the timing code reads and sleeps on: the system's by default (SYSTEM), a fake one in tests (virtual time,
tests/host/clock.py). The board's open loop (schedule.py), the warm-up (loop.py) and the host's engine
(bench/scenarios/engine.py) take one, so a test of the engine's pacing runs on virtual time, exactly and at once."""

from __future__ import annotations

import contextlib
import time
from typing import Protocol

SPIN_NS = 200_000  # the last 0.2 ms before a send are spun, not slept (the system's sleep wakes late by ~50-100 us)


class Clock(Protocol):
    # How long before a due time a wait stops sleeping and spins: a sleep wakes late by up to this much (0: exact).
    spin_ns: int

    def now_ns(self) -> int: ...  # monotonic ns (perf_counter_ns): what latencies are taken with

    def sleep(self, seconds: float) -> None: ...

    def wall_s(self) -> float: ...  # seconds since the epoch, for started_at

    def parked(self) -> contextlib.AbstractContextManager[None]: ...  # around a wait on another thread


class SystemClock:
    spin_ns = SPIN_NS
    now_ns = staticmethod(time.perf_counter_ns)
    sleep = staticmethod(time.sleep)
    wall_s = staticmethod(time.time)

    @staticmethod
    def parked() -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


SYSTEM = SystemClock()
