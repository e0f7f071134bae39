"""A sampler thread that records temperature, frequency and power at a fixed rate during a measured run.

It runs on a housekeeping CPU, never on a measured one (it pins itself first), reads through the system root, and
raises a flag when the thermal limit is crossed so the measuring loop can stop cleanly between chunks. Reading a
few sysfs files takes well under a millisecond, at 4 Hz by default: the GIL it takes is a small, known cost.
"""

from __future__ import annotations

import os
import threading
import time

from edge_runtime.system.root import SystemRoot
from edge_runtime.system.thermal import TegraStats, pick_rail, read_snapshot, throttle_reasons


class Sampler:
    """Samples temperature, frequency and power every `interval_s` on a housekeeping CPU while a run measures.

    `timeline` collects the points; `over_limit()` turns true once the hottest sensor passes `limit_c` (the run then
    stops between chunks); `throttle_started_s`/`throttle_why` record when and why throttling began. Use as a context
    manager around the measured part, or start()/stop(); stop() is idempotent.
    """

    def __init__(
        self,
        root: SystemRoot,
        interval_s: float,
        measured_cpus: list[int] | None,
        limit_c: float | None,
        tegrastats: bool = False,
        allowed_cpus: set[int] | None = None,
    ):
        self.root = root
        self.interval_s = interval_s
        self.measured = set(measured_cpus or [])
        self.limit_c = limit_c
        self.use_tegra = tegrastats
        self.tegra: TegraStats | None = None
        self.allowed = set(allowed_cpus) if allowed_cpus else set(os.sched_getaffinity(0))
        self.warning: str | None = None
        self.timeline: list[dict] = []
        self.tid: int | None = None
        self.cpus: list[int] | None = None
        self.over_limit_at: float | None = None
        self.over_limit_c: float | None = None
        self.throttle_started_s: float | None = None
        self.throttle_why: list[str] = []
        self._stop = threading.Event()
        self._first = threading.Event()  # set once the first reading is in the timeline
        self._t0 = time.perf_counter()
        self._base = None
        self._thread = threading.Thread(target=self._run, name="edge-sampler", daemon=True)

    def start(self, t0: float | None = None) -> None:
        self._t0 = t0 if t0 is not None else time.perf_counter()
        self._thread.start()

    def over_limit(self) -> bool:
        return self.over_limit_at is not None

    def crossing(self, measure_from: float) -> tuple[str, float]:
        """(phase, at_s) of the limit crossing against the measured part's start (`thermal_phase`)."""
        first = self.timeline[0]["t_s"] if self.timeline else None
        return thermal_phase(self.over_limit_at, first, measure_from)

    def _pin(self) -> None:
        self.tid = threading.get_native_id()
        housekeeping = sorted(self.allowed - self.measured)
        if self.measured and not housekeeping:
            self.warning = "no housekeeping CPU left for the thermal sampler: it shares the measured CPUs"
        elif self.measured:
            try:
                os.sched_setaffinity(self.tid, housekeeping)
            except OSError as err:
                self.warning = f"thermal sampler could not leave the measured CPUs: {err.strerror or err}"
        self.cpus = sorted(os.sched_getaffinity(self.tid))
        # Named after it is pinned: anything called edge-sampler in /proc/PID/task is already off the measured CPUs.
        try:
            import ctypes

            ctypes.CDLL(None).prctl(15, b"edge-sampler", 0, 0, 0)  # PR_SET_NAME
        except (OSError, AttributeError):
            pass

    def _run(self) -> None:
        self._pin()
        if self.use_tegra:
            self.tegra = TegraStats()  # its reader thread inherits this thread's housekeeping CPUs
        cpus = sorted(self.measured) or None
        while not self._stop.is_set():
            snap = read_snapshot(self.root, cpus, self.tegra)
            if self._base is None:
                self._base = snap
            t = time.perf_counter() - self._t0
            rail = pick_rail(snap.rails)
            why = throttle_reasons(snap, self._base, cpus)
            if why and self.throttle_started_s is None:
                self.throttle_started_s, self.throttle_why = t, why
            point = {
                "t_s": t,  # raw: the run subtracts its own start, then rounds
                "max_c": snap.max_c(),
                "temps_c": snap.temperatures(),
                "freq_khz": {str(f.cpu): f.cur_khz for f in snap.cpufreq},
                "power_w": rail.power_w if rail else None,
                "throttled": bool(why),
                # the sampler's own CPUs at this moment: the run checks it never sat on a measured one
                "sampler_cpus": sorted(os.sched_getaffinity(self.tid)) if self.tid else None,
            }
            self.timeline.append(point)
            mx = point["max_c"]
            if self.limit_c is not None and mx is not None and mx > self.limit_c and self.over_limit_at is None:
                self.over_limit_at, self.over_limit_c = t, mx
            self._first.set()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Sampler:
        self.start(t0=0.0)  # raw perf_counter times: the run subtracts its own start
        # The first reading is the board as the model left it, before the warm-up: wait for it (bounded: a sensor
        # that hangs is reported at the end, not waited on), so a limit already crossed is told from one crossed later.
        self._first.wait(timeout=2.0)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
            if self._thread.is_alive() and self.warning is None:
                self.warning = "the thermal sampler did not stop within 5 s of the run's end (a sensor read hangs?)"
        if self.tegra is not None:
            self.tegra.close()
            self.tegra = None


def thermal_phase(over_at: float | None, first_reading_at: float | None, measure_from: float) -> tuple[str, float]:
    """(phase, at_s) of a thermal stop, from raw perf_counter times: "load" when the sampler's first reading (taken
    once the model is loaded and has run once) was already over the limit, "warm-up" when the limit was crossed
    before the measured part began (the loop only notices between chunks, so a run can stop with samples after a
    warm-up crossing), else "measure". at_s counts from the measured part's start and is never negative: a crossing
    before it is at 0."""
    if over_at is None:
        return "measure", 0.0
    if first_reading_at is not None and over_at <= first_reading_at:
        phase = "load"
    elif over_at < measure_from:
        phase = "warm-up"
    else:
        phase = "measure"
    return phase, round(max(0.0, over_at - measure_from), 3)
