"""FakeClock: virtual time for the host engine's tests (discrete events), injected where the engine takes a Clock
(edge_runtime/measure/clock.py). now_ns() moves only when every live thread that has used the clock waits on it,
asleep in sleep() or in parked() (a wait on another thread); time then jumps to the earliest wake-up, so a test of
the engine's pacing is exact and takes no wall time of its own. A thread that another releases from a parked wait (a
queue's get) gets SETTLE_S of real time to leave it before time moves on; WATCHDOG_S of real time with no way forward
fails the test instead of hanging it."""

from __future__ import annotations

import contextlib
import threading
import time


class FakeClock:
    spin_ns = 0  # its sleeps wake exactly: nothing to spin
    SETTLE_S = 0.02  # a loaded 2-vCPU machine may take ms to run a thread another released
    WATCHDOG_S = 10.0

    def __init__(self, start_ns: int = 1_000_000_000, wall_s: float = 1_700_000_000.0):
        self._cv = threading.Condition()
        self._now = self._start = start_ns
        self._wall = wall_s
        self._threads: set[threading.Thread] = set()
        self._waiting: dict[threading.Thread, int | None] = {}  # a sleeper's wake-up (ns); None: parked
        self._gen = 0  # changes whenever a thread starts or stops waiting, or time moves
        self.sleeps = 0  # calls of sleep() with a time to sleep (a test of a loop that must not spin counts them)

    def now_ns(self) -> int:
        with self._cv:
            self._threads.add(threading.current_thread())
            return self._now

    def wall_s(self) -> float:
        return self._wall + (self.now_ns() - self._start) / 1e9

    def sleep(self, seconds: float) -> None:
        me = threading.current_thread()
        with self._cv:
            self._threads.add(me)
            wake = self._now + max(0, round(seconds * 1e9))
            if wake <= self._now:
                return  # a sleep of 0: a yield, and virtual time has nothing to give
            self.sleeps += 1
            self._waiting[me] = wake
            self._changed()
            give_up = time.monotonic() + self.WATCHDOG_S
            while self._now < wake:
                seen = self._gen
                self._cv.wait(self.SETTLE_S)
                if seen == self._gen and self._all_waiting():
                    self._advance()
                elif seen != self._gen:
                    give_up = time.monotonic() + self.WATCHDOG_S
                assert time.monotonic() < give_up, f"fake clock: stuck at {self._now} ns, {self._who()}"
            self._waiting.pop(me, None)

    @contextlib.contextmanager
    def parked(self):
        me = threading.current_thread()
        with self._cv:
            self._threads.add(me)
            self._waiting[me] = None
            self._changed()
        try:
            yield
        finally:
            with self._cv:
                self._waiting.pop(me, None)
                self._changed()

    def _changed(self) -> None:
        self._gen += 1
        self._cv.notify_all()

    def _all_waiting(self) -> bool:
        return all(t in self._waiting for t in self._threads if t.is_alive())

    def _advance(self) -> None:
        wakes = [w for w in self._waiting.values() if w is not None]
        if wakes:
            self._now = max(self._now, min(wakes))
            for t, w in list(self._waiting.items()):
                if w is not None and w <= self._now:
                    del self._waiting[t]  # running again from now: time waits for it
            self._changed()

    def _who(self) -> str:
        return ", ".join(f"{t.name}: {self._waiting.get(t, 'running')}" for t in self._threads if t.is_alive())
