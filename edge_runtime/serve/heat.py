"""Heat as part of serving (issue 26): a thread beside the server reads the board's hottest sensor; at or above the
limit the server stops taking new work (not ready, 503 with Retry-After) and takes it again once the temperature is
below the limit minus a hysteresis, so a board hovering at its limit does not flap between the two every reading.

Requests already queued still run: refusing new ones is what lets the board cool. The time spent refusing, the number
of crossings, the temperature and the headroom left are kept for the statistics and /metrics.
"""

from __future__ import annotations

import math
import threading
import time

from edge_runtime.errors import UserError
from edge_runtime.serve.kserve import Unavailable
from edge_runtime.system.root import SystemRoot
from edge_runtime.system.thermal import read_snapshot

DEFAULT_HYSTERESIS_C = 5.0
DEFAULT_INTERVAL_S = 0.5


def check_limit(limit_c, hysteresis_c) -> None:
    bounds = (("--thermal-limit", limit_c, 1.0, 200.0), ("--thermal-hysteresis", hysteresis_c, 0.1, 50.0))
    for name, v, low, high in bounds:
        if v is None and name == "--thermal-limit":
            continue
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or not low <= v <= high:
            raise UserError(f"{name} {v!r}: expected degrees Celsius from {low:g} to {high:g}")


class HeatGate:
    """Reads the hottest sensor every `interval_s`; `refusing` is true from a reading at or above `limit_c` until one
    below `limit_c - hysteresis_c`. Without a limit it only reports the temperature."""

    def __init__(
        self,
        root: SystemRoot,
        limit_c: float | None,
        *,
        hysteresis_c: float = DEFAULT_HYSTERESIS_C,
        interval_s: float = DEFAULT_INTERVAL_S,
        limit_source: str = "--thermal-limit",
    ) -> None:
        check_limit(limit_c, hysteresis_c)
        self.root = root
        self.limit_c = limit_c
        self.hysteresis_c = hysteresis_c
        self.interval_s = interval_s
        self.limit_source = limit_source
        self.refusing = False
        self.temperature_c: float | None = None
        self.crossings = 0
        self.readings = 0
        self._refused_s = 0.0
        self._since: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="serve-heat", daemon=True)

    def start(self) -> HeatGate:
        self.read_once()  # the first reading before the server answers anyone
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.read_once()
            except OSError:  # a sensor that vanished for a moment: keep the last state, read again next time
                continue

    def read_once(self) -> float | None:
        t = read_snapshot(self.root).max_c()
        now = time.monotonic()
        with self._lock:
            self.readings += 1
            if t is None:  # no sensor read this time (one vanished for a moment): the last reading and state stand
                return t
            self.temperature_c = t
            if self.limit_c is None:
                return t
            if not self.refusing and t >= self.limit_c:
                self.refusing, self._since = True, now
                self.crossings += 1
            elif self.refusing and t < self.limit_c - self.hysteresis_c:
                self._refused_s += now - (self._since or now)
                self.refusing, self._since = False, None
        return t

    def refused_s(self) -> float:
        with self._lock:
            return self._refused_s + (time.monotonic() - self._since if self.refusing and self._since else 0.0)

    def retry_after_s(self) -> int:
        return max(1, math.ceil(self.interval_s * 4))

    def check(self) -> None:
        if self.refusing:
            t = self.temperature_c
            raise Unavailable(
                f"board too hot: {t:.1f} C, at or above the limit {self.limit_c:g} C; new work resumes below "
                f"{self.limit_c - self.hysteresis_c:g} C",
                retry_after_s=self.retry_after_s(),
            )

    def state(self) -> dict:
        t = self.temperature_c
        return {
            "temperature_c": t,
            "limit_c": self.limit_c,
            "limit_source": self.limit_source,
            "hysteresis_c": self.hysteresis_c,
            "headroom_c": None if t is None or self.limit_c is None else round(self.limit_c - t, 3),
            "refusing": self.refusing,
            "refused_s": round(self.refused_s(), 3),
            "crossings": self.crossings,
        }
