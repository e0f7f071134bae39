"""LoadGen's scenarios, as the host names them: what each takes, its label, and the request fields a board receives.

Board targets (local, agent) run the schedule themselves on their pinned cores (`edge_runtime.measure.schedule`, the
engine of `edge-runtime bench --scenario`), so a board result and a harness result mean the same thing. Server
targets will run the same schedules host-side (KServe v2), as a client sees them.

- single-stream: the next query when the last completes.
- server: Poisson arrivals at `rate_qps`; latency from each query's intended send time.
- multi-stream: a query of `samples_per_query` samples (8) every `interval_ms` (50).
- burst: Poisson at `rate_qps` for `burst_on_s` (1), nothing for `burst_off_s` (1), over and over.
- replay: inter-arrival times in ms from a file (`arrivals`; the request carries them as `arrivals_ms`).
- offline: every query at once (`samples_per_query`, 1); the measure is throughput.
"""

from __future__ import annotations

from dataclasses import dataclass

from edge_runtime.measure.request import SCENARIO_DEFAULTS, SCENARIO_KEYS
from edge_runtime.measure.schedule import KINDS

DEFAULTS = SCENARIO_DEFAULTS  # the same defaults as edge-runtime bench's flags
# The campaign's key for a request field (a replay names its file; the board gets the numbers).
CAMPAIGN_KEY = {"arrivals_ms": "arrivals"}


def keys_of(kind: str) -> tuple[str, ...]:
    """The campaign keys a scenario takes."""
    return tuple(CAMPAIGN_KEY.get(k, k) for k in SCENARIO_KEYS[kind])


ALL_KEYS = {k for kind in KINDS for k in keys_of(kind)}


@dataclass(frozen=True)
class Scenario:
    kind: str
    duration_s: float | None = None
    iterations: int | None = None  # queries
    warmup_s: float | None = None
    warmup: int | None = None
    rate_qps: float | None = None
    samples_per_query: int | None = None
    interval_ms: float | None = None
    burst_on_s: float | None = None
    burst_off_s: float | None = None
    arrivals: str | None = None  # the replay file (path)
    arrivals_ms: tuple[float, ...] | None = None  # its inter-arrival times, read when the campaign is loaded
    min_duration_s: float | None = None  # run rules (LoadGen's): a run shorter than this, or with fewer queries,
    min_queries: int | None = None  # is not a valid result, whatever its numbers
    concurrency: int | None = None  # queries in flight at once, for server targets (a board runs one at a time)

    @property
    def label(self) -> str:
        """How reports and the store name it: the kind, what sets its load, and /cN for N queries in flight."""
        base = {
            "server": lambda: f"server@{self.rate_qps:g}qps",
            "burst": lambda: f"burst@{self.rate_qps:g}qps/{self.burst_on_s:g}s-on/{self.burst_off_s:g}s-off",
            "multi-stream": lambda: f"multi-stream@{self.samples_per_query}x/{self.interval_ms:g}ms",
            "replay": lambda: f"replay:{(self.arrivals or '').rsplit('/', 1)[-1]}",
            "offline": lambda: f"offline@{self.samples_per_query}x" if (self.samples_per_query or 1) > 1 else "offline",
        }.get(self.kind, lambda: self.kind)()
        return base + (f"/c{self.concurrency}" if self.concurrency else "")

    def request_fields(self, server: bool = False) -> dict:
        """The BenchRequest fields of this scenario (None for single-stream: an older agent reads that); the
        concurrency only for a server target."""
        out: dict = {"scenario": None if self.kind == "single-stream" else self.kind}
        if server and self.concurrency:
            out["concurrency"] = self.concurrency
        for key in SCENARIO_KEYS[self.kind]:
            out[key] = getattr(self, key)
        return out
