"""A Prometheus endpoint scraped during a run (Triton's `/metrics`): GPU utilisation, memory, power and energy, and
its CPU figures where it has no GPU, on a thread of its own, bounded; the samples summed up for the record."""

from __future__ import annotations

import re
import threading
import time
import urllib.request

import numpy as np

SCRAPE_EVERY_S = 1.0
MAX_SCRAPES = 7200  # two hours of samples; a longer run keeps the first two hours' figures and says so
METRICS = {  # Triton's Prometheus names -> the result's (several GPUs: see COMBINE)
    "nv_gpu_utilization": "gpu_utilization",
    "nv_gpu_memory_used_bytes": "gpu_memory_used_bytes",
    "nv_gpu_power_usage": "gpu_power_w",
    "nv_energy_consumption": "gpu_energy_j",
    "nv_gpu_temperature": "gpu_temperature_c",
    "nv_cpu_utilization": "cpu_utilization",
    "nv_cpu_memory_used_bytes": "cpu_memory_used_bytes",
}

# Several GPUs (one label set each): memory, power and energy add up; utilisation is their mean; the temperature is
# the hottest one's (as a board's is its hottest sensor).
COMBINE = {"gpu_utilization": "mean", "gpu_temperature_c": "max", "cpu_utilization": "mean"}


def parse_prometheus(text: str) -> dict[str, float]:
    """name -> value over label sets (several GPUs, combined as COMBINE says), for the metric names we keep."""
    seen: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEnaifNI]+)", line)
        if not m or m.group(1) not in METRICS:
            continue
        try:
            v = float(m.group(3))
        except ValueError:
            continue
        if np.isfinite(v):
            seen.setdefault(METRICS[m.group(1)], []).append(v)
    how = {"mean": lambda vs: sum(vs) / len(vs), "max": max}
    return {k: how.get(COMBINE.get(k, ""), sum)(vs) for k, vs in seen.items()}


class MetricsSampler:
    """Scrapes `http://HOST:PORT/metrics` every second on its own thread during a run (bounded)."""

    def __init__(self, address: str | None, headers: dict[str, str]):
        self.address, self.headers = address, headers
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0: float | None = None

    def scrape(self) -> dict[str, float] | None:
        try:
            req = urllib.request.Request(f"http://{self.address}/metrics", headers=self.headers)
            with urllib.request.urlopen(req, timeout=2.0) as r:
                return parse_prometheus(r.read(8 << 20).decode("utf-8", "replace"))
        except Exception as err:  # noqa: BLE001 - a metrics endpoint that fails is said, not fatal
            self.error = f"{type(err).__name__}: {' '.join(str(err).split())[:120]}"
            return None

    def start(self) -> None:
        if self.address is None:
            return
        t0 = self._t0 = time.monotonic()

        def loop() -> None:
            while not self._stop.is_set() and len(self.samples) < MAX_SCRAPES:
                got = self.scrape()
                if got is not None:
                    self.samples.append((round(time.monotonic() - t0, 3), got))
                self._stop.wait(SCRAPE_EVERY_S)

        self._thread = threading.Thread(target=loop, name="metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            last = self.scrape()  # the end of the run, not up to a second before it (energy is a difference)
            if last is not None and self._t0 is not None:
                self.samples.append((round(time.monotonic() - self._t0, 3), last))

    def summary(self) -> dict:
        if self.address is None:
            return {"available": False, "reason": "no metrics endpoint given (?metrics=PORT in the target URL)"}
        if not self.samples:
            return {"available": False, "reason": f"no metrics read from {self.address}: {self.error or 'none'}"}
        names = sorted({k for _, s in self.samples for k in s})
        out: dict = {"available": True, "endpoint": self.address, "scrapes": len(self.samples)}
        for k in names:
            vals = [s[k] for _, s in self.samples if k in s]
            if k == "gpu_energy_j":
                if len(vals) >= 2:  # a difference of two readings; one reading says nothing about the run
                    out["gpu_energy_j"] = round(vals[-1] - vals[0], 3)
            else:
                out[k] = {"mean": round(float(np.mean(vals)), 3), "max": round(float(np.max(vals)), 3)}
        if not any(k.startswith("gpu_") for k in names):
            out["note"] = "the server reports no GPU metrics (no GPU, or it runs on CPU)"
        out["timeline"] = [{"t_s": t, **s} for t, s in self.samples[:: max(1, len(self.samples) // 200)]]
        return out
