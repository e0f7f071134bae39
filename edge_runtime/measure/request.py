"""What a bench run *is*, as data: a `BenchRequest` holds everything that decides a measurement (the model, where and
how it runs, how long, under what load and thermal limits) and nothing that only a local caller has (a feeds
function, output files, a progress callback, a stop flag: those are arguments of `run_bench`). It round-trips
through JSON, so the host can send it to a board's agent and the board runs exactly what `edge-runtime bench`
would with the same flags.

The bounds on every number live here, once: the CLI's flag types and `BenchRequest.validate()` use the same ones.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from edge_runtime.errors import UserError
from edge_runtime.limits import MAX_DURATION_S, MAX_SEED, MAX_THREADS, MAX_WARMUP, MAX_WARMUP_S
from edge_runtime.measure.corunners import StressSpec
from edge_runtime.results import OMIT_NONE, Record
from edge_runtime.system.cpulist import MAX_CPUS

REQUEST_SCHEMA = "edge-runtime/bench-request/1"


SAMPLE_INTERVAL_S = (1e-3, 3600.0)
MAX_COOLDOWN_TIMEOUT_S = 86400.0
PLATFORM_LATENCY_S = (1.0, 3600.0)  # cyclictest runs whole seconds
DEFAULT_ITERATIONS = 1000
MAX_RATE_QPS = 1_000_000.0
MAX_SAMPLES_PER_QUERY = 4096
MAX_CONCURRENCY = 256
# What each scenario takes (a key of another scenario is refused: it would be silently ignored).
SCENARIO_KEYS = {
    "single-stream": (),
    "server": ("rate_qps",),
    "burst": ("rate_qps", "burst_on_s", "burst_off_s"),
    "multi-stream": ("samples_per_query", "interval_ms"),
    "offline": ("samples_per_query",),
    "replay": ("arrivals_ms",),
}
SCENARIO_OPTIONAL = {("offline", "samples_per_query")}  # 1 when not given
# Where a scenario has a natural default (LoadGen's multi-stream: 8 samples; the rest round numbers), for the CLI and
# campaigns; a key without one (a rate, a file) must be given.
SCENARIO_DEFAULTS = {
    ("multi-stream", "samples_per_query"): 8,
    ("multi-stream", "interval_ms"): 50.0,
    ("burst", "burst_on_s"): 1.0,
    ("burst", "burst_off_s"): 1.0,
}


@dataclass(frozen=True)
class BenchRequest(Record):
    """One bench run, as data. `model` is a path on the machine that runs it; `model_sha256`, when given, must match
    the file (the agent keeps models by hash). Without `iterations` and `duration_s`, 1000 iterations."""

    model: str
    model_sha256: str | None = None
    backend: str | None = None
    device: str | None = None
    delegate: str | None = None
    delegate_options: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, str] = field(default_factory=dict)
    fallback: bool = False
    threads: int | None = None
    cpus: tuple[int, ...] | None = None
    rt_priority: int | None = None
    mlock: bool = False
    warmup: int = 50
    warmup_s: float | None = None
    iterations: int | None = None
    duration_s: float | None = None
    stress: tuple[StressSpec, ...] = ()
    platform_latency_s: float | None = None
    seed: int = 0
    sandbox: bool = True  # load the model in the crash-check child first
    thermal_limit_c: float | None = None
    cooldown_to_c: float | None = None
    cooldown_timeout_s: float = 600.0
    sample_interval_s: float = 0.25
    # The load (LoadGen's scenarios, measure/schedule.py): None (single-stream: the next query when the last
    # completes) or an open loop: "server" (seeded Poisson arrivals at rate_qps), "burst" (the same during
    # burst_on_s, silent for burst_off_s), "multi-stream" (a query of samples_per_query samples every interval_ms),
    # "replay" (inter-arrival times arrivals_ms), "offline" (every query at once; throughput). iterations counts
    # queries. Each key is left out of the JSON when None, so an agent that predates scenarios still reads a
    # single-stream request.
    scenario: str | None = field(default=None, metadata=OMIT_NONE)
    rate_qps: float | None = field(default=None, metadata=OMIT_NONE)
    samples_per_query: int | None = field(default=None, metadata=OMIT_NONE)
    interval_ms: float | None = field(default=None, metadata=OMIT_NONE)
    burst_on_s: float | None = field(default=None, metadata=OMIT_NONE)
    burst_off_s: float | None = field(default=None, metadata=OMIT_NONE)
    arrivals_ms: tuple[float, ...] | None = field(default=None, metadata=OMIT_NONE)
    # Queries in flight at once: a server target's client connections (a board runs one query at a time and refuses
    # more than 1).
    concurrency: int | None = field(default=None, metadata=OMIT_NONE)
    # Samples per inference (measure/batch.py): latency per batch, throughput in samples; None is 1, left out of
    # the JSON so an agent that predates batches still reads the request.
    batch: int | None = field(default=None, metadata=OMIT_NONE)
    # Per-op placement and time (issue 29, edge_runtime/ops/): after the timed loop, a second, profiled session of
    # the same model gives the result its `ops` section. None is off, left out of the JSON so an agent that predates
    # it still reads the request (and one that predates it refuses `ops: true` in one line, never ignores it).
    ops: bool | None = field(default=None, metadata=OMIT_NONE)
    schema: str = REQUEST_SCHEMA

    def load_kwargs(self) -> dict[str, Any]:
        """The `load()` arguments this request names."""
        return {
            "backend": self.backend,
            "device": self.device,
            "delegate": self.delegate,
            "delegate_options": dict(self.delegate_options),
            "options": dict(self.options),
            "threads": self.threads,
            "cpus": list(self.cpus) if self.cpus else None,
            "fallback": self.fallback,
            "sandbox": self.sandbox,
        }

    @property
    def length(self) -> tuple[int | None, float | None]:
        """(iterations, duration_s) as the run uses them: the default is 1000 iterations."""
        if self.iterations is None and self.duration_s is None:
            return DEFAULT_ITERATIONS, None
        return self.iterations, self.duration_s

    def validate(self) -> BenchRequest:
        """Refuse what cannot be measured, naming the field (a request from the wire is as untrusted as a flag)."""
        from edge_runtime.measure.loop import max_samples
        from edge_runtime.results import parse_schema
        from edge_runtime.system.thermal import SILICON_RANGE_C

        try:
            name, major, _ = parse_schema(self.schema)
        except ValueError:
            name, major = "", 0
        if (name, major) != ("edge-runtime/bench-request", 1):  # a newer minor version of 1 reads as 1
            raise UserError(f"bench request: schema {self.schema!r} is not {REQUEST_SCHEMA}")
        if not isinstance(self.model, str) or not self.model:
            raise UserError("bench request: model: a path is needed")
        if self.iterations is not None and self.duration_s is not None:
            raise UserError("bench request: give iterations or duration_s, not both")
        _int("iterations", self.iterations, 1, max_samples(), "samples fit in this machine's memory")
        _int("warmup", self.warmup, 0, MAX_WARMUP)
        _int("threads", self.threads, 1, MAX_THREADS)
        _int("rt_priority", self.rt_priority, 1, 99)
        _int("seed", self.seed, 0, MAX_SEED)
        _int("concurrency", self.concurrency, 1, MAX_CONCURRENCY)
        _int("batch", self.batch, 1, MAX_SAMPLES_PER_QUERY)
        _real("duration_s", self.duration_s, 0.0, MAX_DURATION_S, low_open=True)
        _real("warmup_s", self.warmup_s, 0.0, MAX_WARMUP_S)
        _real("sample_interval_s", self.sample_interval_s, *SAMPLE_INTERVAL_S)
        _real("cooldown_timeout_s", self.cooldown_timeout_s, 0.0, MAX_COOLDOWN_TIMEOUT_S)
        _real("platform_latency_s", self.platform_latency_s, *PLATFORM_LATENCY_S)
        for name in ("thermal_limit_c", "cooldown_to_c"):
            _real(name, getattr(self, name), *SILICON_RANGE_C)
        if self.ops is not None and not isinstance(self.ops, bool):
            raise UserError(f"bench request: ops {self.ops!r}: expected true or false")
        for name in ("fallback", "mlock", "sandbox"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"bench request: {name} {getattr(self, name)!r}: expected true or false")
        if self.model_sha256 is not None and not _SHA256.fullmatch(str(self.model_sha256)):
            raise UserError(f"bench request: model_sha256 {self.model_sha256!r}: not a sha256 (64 hex digits)")
        if self.cpus is not None:
            if not self.cpus or not all(_cpu(c) for c in self.cpus):
                raise UserError(f"bench request: cpus {list(self.cpus)!r}: a list of CPU numbers (0 to {MAX_CPUS - 1})")
            if len(set(self.cpus)) != len(self.cpus):
                raise UserError(f"bench request: cpus {list(self.cpus)!r}: a CPU given twice")
        for s in self.stress:
            if not isinstance(s, StressSpec) or s.kind not in ("cpu", "memory") or not s.cpus:
                raise UserError(f"bench request: stress {s!r}: kind cpu|memory on at least one CPU")
            if not all(_cpu(c) for c in s.cpus):
                raise UserError(f"bench request: stress {s.to_dict()!r}: CPU numbers are 0 to {MAX_CPUS - 1}")
        self._check_scenario()
        if self.delegate_options and not self.delegate:
            raise UserError("bench request: delegate_options without a delegate: they would be ignored")
        if (
            self.cooldown_to_c is not None
            and self.thermal_limit_c is not None
            and self.cooldown_to_c > self.thermal_limit_c
        ):
            raise UserError(
                f"bench request: cooldown_to_c {self.cooldown_to_c} is above thermal_limit_c {self.thermal_limit_c}: "
                "the run would wait for a board it then refuses"
            )
        for name in ("delegate_options", "options"):
            value = getattr(self, name)
            if not isinstance(value, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise UserError(f"bench request: {name}: string keys and values")
        return self

    def _check_scenario(self) -> None:
        from edge_runtime.measure.schedule import KINDS, MAX_REPLAY

        kind = self.scenario or "single-stream"
        if kind not in KINDS:
            raise UserError(f"bench request: scenario {self.scenario!r}: one of {', '.join(KINDS)}")
        wants = SCENARIO_KEYS[kind]
        for key in ("rate_qps", "samples_per_query", "interval_ms", "burst_on_s", "burst_off_s", "arrivals_ms"):
            if getattr(self, key) is None:
                if key in wants and (kind, key) not in SCENARIO_OPTIONAL:
                    raise UserError(f"bench request: the {kind} scenario needs {key}")
            elif key not in wants:
                goes = ", ".join(k for k, v in SCENARIO_KEYS.items() if key in v)
                raise UserError(f"bench request: {key} does not go with the {kind} scenario (it goes with {goes})")
        _real("rate_qps", self.rate_qps, 0.0, MAX_RATE_QPS, low_open=True)
        _int("samples_per_query", self.samples_per_query, 1, MAX_SAMPLES_PER_QUERY)
        if self.batch and self.samples_per_query:
            from edge_runtime.measure.batch import queries_split

            queries_split(self.samples_per_query, self.batch)
        _real("interval_ms", self.interval_ms, 0.0, 3.6e6, low_open=True)
        _real("burst_on_s", self.burst_on_s, 0.0, MAX_DURATION_S, low_open=True)
        _real("burst_off_s", self.burst_off_s, 0.0, MAX_DURATION_S)
        if self.arrivals_ms is not None:
            if not 0 < len(self.arrivals_ms) <= MAX_REPLAY:
                raise UserError(f"bench request: arrivals_ms: 1 to {MAX_REPLAY:,} inter-arrival times")
            for i, v in enumerate(self.arrivals_ms):
                number = isinstance(v, (int, float)) and not isinstance(v, bool)
                if not number or not math.isfinite(v) or not 0 <= v <= 3.6e6:
                    raise UserError(f"bench request: arrivals_ms[{i}] {v!r}: milliseconds from 0 to 3,600,000")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BenchRequest:
        """From a decoded JSON object, checked: unknown keys are refused (a typo would silently change the run)."""
        req = cls.from_dict(data, "bench request")
        if req.extra:
            raise UserError(f"bench request: unknown key(s) {', '.join(map(repr, req.extra))}")
        return req.validate()


_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


def _cpu(c) -> bool:
    return isinstance(c, int) and not isinstance(c, bool) and 0 <= c < MAX_CPUS


def _int(name: str, value, low: int, high: int, why: str = "") -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise UserError(f"bench request: {name} {value!r}: not a whole number")
    if not low <= value <= high:
        raise UserError(f"bench request: {name} {value}: must be {low} to {high:,}" + (f" ({why})" if why else ""))


def _real(name: str, value, low: float, high: float, low_open: bool = False) -> None:
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise UserError(f"bench request: {name} {value!r}: not a finite number")
    if value < low or (low_open and value == low) or value > high:
        raise UserError(f"bench request: {name} {value}: must be {'above' if low_open else 'at least'} {low:g} "
                        f"and at most {high:g}")  # fmt: skip
