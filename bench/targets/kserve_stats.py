"""What a KServe v2 server says about a run, beside what the client measured: the statistics extension read before and
after (queue, compute input, compute infer and compute output per request; the rest of the client's latency is
network and client, as perf_analyzer splits it), and a Prometheus endpoint scraped during the run (Triton's GPU
utilisation, memory, power and energy; its CPU figures where it has no GPU)."""

from __future__ import annotations

import re
import threading
import time
import urllib.request

import numpy as np

STAGES = ("queue", "compute_input", "compute_infer", "compute_output")
SCRAPE_EVERY_S = 1.0
MAX_SCRAPES = 7200  # two hours of samples; a longer run keeps the first two hours' figures and says so


class StatsReader:
    """The model's cumulative inference statistics, read through the target's own client (its headers carry the
    access token a server may ask for)."""

    def __init__(self, target, client):
        self.target, self.client = target, client
        self.reason: str | None = None

    def read(self) -> dict | None:
        from bench.targets.kserve import _plain, _why

        o = self.target.opts
        try:
            raw = _plain(self.client.get_inference_statistics(o["model"], o["version"], headers=self.target.headers,
                                                              **self.target.limit))  # fmt: skip
        except Exception as err:  # noqa: BLE001 - a server without the extension (MLServer: 404), or no token
            self.reason = f"no server statistics ({_why(err)})"
            return None
        stats = (raw.get("model_stats") or [{}])[0].get("inference_stats") or {}
        out = {}
        for key in ("success", "fail", *STAGES):
            d = stats.get(key) or {}
            out[key] = (int(d.get("count", 0) or 0), int(d.get("ns", 0) or 0))
        return out

    def split(self, before: dict | None, after: dict | None, run) -> dict:
        """Per request, in us: each server stage, the server's own total, the client's latency and their difference
        (network + client); from the requests the server counted during the run."""
        if before is None or after is None:
            return {"available": False, "reason": self.reason or "no server statistics"}
        n = after["success"][0] - before["success"][0]
        if n <= 0:
            return {"available": False, "reason": "the server counted no successful request during the run"}
        per = {k: round((after[k][1] - before[k][1]) / max(1, after[k][0] - before[k][0]) / 1e3, 2) for k in STAGES}
        server_us = round((after["success"][1] - before["success"][1]) / n / 1e3, 2)
        ok = run.ok
        spq = max(1, run.samples_per_query)
        service = (run.finished_ns - run.started_ns)[ok] / spq
        client_us = round(float(np.mean(service)) / 1e3, 2) if len(service) else None
        return {
            "available": True,
            "requests": n,
            "failed": after["fail"][0] - before["fail"][0],
            "stages_us": per,
            "server_us": server_us,
            "client_us": client_us,
            "network_client_us": round(client_us - server_us, 2) if client_us is not None else None,
            "method": "the server's statistics extension read before and after the run (means per request); network "
            "+ client = the client's mean time per request (from its send) minus the server's",
        }


# Several GPUs (one label set each): memory, power and energy add up; utilisation is their mean; the temperature is
# the hottest one's (as a board's is its hottest sensor).
COMBINE = {"gpu_utilization": "mean", "gpu_temperature_c": "max", "cpu_utilization": "mean"}


def parse_prometheus(text: str) -> dict[str, float]:
    """name -> value over label sets (several GPUs, combined as COMBINE says), for the metric names we keep."""
    from bench.targets.kserve import METRICS

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
