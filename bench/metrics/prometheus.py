"""A Prometheus endpoint scraped during a run (Triton's `/metrics`): GPU utilisation, memory, power and energy, and
its CPU figures where it has no GPU; the samples summed up for the record.

The scrapes run in a child process (bench/metrics/scrape_child.py), each bounded as a whole in time and size
(bench/metrics/fetch.py: 2 s, 4 MiB), so an endpoint that trickles, hangs or answers 10 MB can neither delay the
threads that time the queries nor hold the run after it: a scrape that fails is counted by kind and said in the
record (`server.metrics.failed`, `warnings`), a body over the cap is refused unparsed, and what was measured is
stored whatever the endpoint does (issue 24)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter

import numpy as np

from bench.metrics.fetch import DEADLINE_S, MAX_BYTES

SCRAPE_EVERY_S = 1.0
READY_WAIT_S = 10.0  # the child's imports, at most (~0.3 s here): after it the run starts anyway
STOP_WAIT_S = 2 * DEADLINE_S + 1.0  # a scrape under way, then the last one, then the child's exit
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
    """Scrapes `http://HOST:PORT/metrics` every second during a run from a child (bench/metrics/scrape_child.py),
    each scrape bounded (bench/metrics/fetch.py: 2 s, 4 MiB). The child starts when the sampler is made (its imports
    overlap the warm-up, not the measured part), scrapes from `start()` and stops at `stop()`, which waits for its last
    scrape at most STOP_WAIT_S and then kills it: what was measured never waits on a hung endpoint."""

    def __init__(self, address: str | None, headers: dict[str, str]):
        self.address, self.headers = address, headers
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.failed: Counter = Counter()  # kind of failed scrape -> how many
        self.first: dict[str, str] = {}  # kind -> its first message
        self.error: str | None = None
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self._t0: float | None = None
        self._ready = threading.Event()
        if address is not None:
            self._spawn()

    def _spawn(self) -> None:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # a checkout too
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        settings = {"address": self.address, "headers": self.headers, "every_s": SCRAPE_EVERY_S,
                    "deadline_s": DEADLINE_S, "max_bytes": MAX_BYTES, "max_scrapes": MAX_SCRAPES}  # fmt: skip
        try:
            self._proc = subprocess.Popen([sys.executable, "-m", "bench.metrics.scrape_child"], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)  # fmt: skip
        except OSError as err:
            self.error = f"the metrics scraper did not start: {err}"
            return
        self._send(json.dumps(settings))
        self._reader = threading.Thread(target=self._read, name="metrics", daemon=True)
        self._reader.start()

    def _send(self, line: str) -> None:
        try:
            self._proc.stdin.write(line.encode() + b"\n")
            self._proc.stdin.flush()
        except (OSError, ValueError):  # the child is gone: what it sent is kept
            pass

    def _read(self) -> None:
        for line in self._proc.stdout:
            try:
                got = json.loads(line)
                t = round(got.get("t", 0.0) - (self._t0 or 0.0), 3)
            except (ValueError, KeyError, TypeError):
                continue
            if got.get("ready"):
                self._ready.set()
            elif isinstance(got.get("values"), dict):
                self.samples.append((t, got["values"]))
            else:
                kind = str(got.get("kind"))
                self.failed[kind] += 1
                self.first.setdefault(kind, str(got.get("error")))
                self.error = str(got.get("error"))

    def start(self) -> None:
        if self._proc is None:
            return
        self._ready.wait(READY_WAIT_S)  # its imports done: none of its start-up overlaps the measured part
        self._t0 = time.monotonic()
        self._send("go")

    def stop(self, cut: threading.Event | None = None) -> None:
        """The last scrape (the end of the run: energy is a difference), waited for at most STOP_WAIT_S, or until
        `cut` is set (a signal: the run is stored at once); then the child is killed if still there. Safe twice."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        self._send_to(proc, b"stop\n")
        end = time.monotonic() + STOP_WAIT_S
        try:
            while proc.poll() is None and time.monotonic() < end and not (cut is not None and cut.is_set()):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(0.1)
        finally:
            if proc.poll() is None:
                proc.kill()
                self.failed["killed"] += 1
                self.first.setdefault("killed", f"the last scrape did not end within {STOP_WAIT_S:g} s: stopped")
            proc.wait(5.0)
            if self._reader is not None:
                self._reader.join(2.0)

    @staticmethod
    def _send_to(proc: subprocess.Popen, data: bytes) -> None:
        try:
            proc.stdin.write(data)
            proc.stdin.close()
        except (OSError, ValueError):
            pass

    def warnings(self) -> list[str]:
        """The scrapes that failed, by kind, in one line each (a body over the cap: refused, not parsed)."""
        out = []
        for kind, n in self.failed.items():
            what = "refused (not parsed)" if kind == "too large" else "killed" if kind == "killed" else "failed"
            out.append(f"{n} scrape{'s' if n > 1 else ''} of /metrics {what}: {self.first.get(kind)}")
        return out

    def summary(self) -> dict:
        if self.address is None:
            return {"available": False, "reason": "no metrics endpoint given (?metrics=PORT in the target URL)"}
        failed = {"failed": dict(self.failed), "warnings": self.warnings()} if self.failed else {}
        if not self.samples:
            return {"available": False, "reason": f"no metrics read from {self.address}: {self.error or 'none'}",
                    **failed}  # fmt: skip
        names = sorted({k for _, s in self.samples for k in s})
        out: dict = {"available": True, "endpoint": self.address, "scrapes": len(self.samples), **failed}
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
