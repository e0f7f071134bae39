"""What a KServe v2 server says about a run, beside what the client measured: the statistics extension
(`/v2/models/MODEL/stats`) read before and after the run (queue, compute input, compute infer and compute output per
request); the rest of the client's latency is network and client, as perf_analyzer splits it.

Never: import a target (the target gives its client's call; this module only reads and splits the figures)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

STAGES = ("queue", "compute_input", "compute_infer", "compute_output")


class StatsReader:
    """The model's cumulative inference statistics: `fetch()` answers the extension's document (through the target's
    own client, whose headers carry the access token a server may ask for), `why(err)` says a failure in one line."""

    def __init__(self, fetch: Callable[[], dict], why: Callable[[Exception], str]):
        self.fetch, self.why = fetch, why
        self.reason: str | None = None

    def read(self) -> dict | None:
        try:
            raw = self.fetch()
        except Exception as err:  # noqa: BLE001 - a server without the extension (MLServer: 404), or no token
            self.reason = f"no server statistics ({self.why(err)})"
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
