"""The records of `edge-runtime ops` (issue 29): one row per op, the partitions, and the report around them.

Plain frozen dataclasses, the same for every engine: an engine's module (openvino_ops.py, onnxruntime_ops.py) fills
them, verdict.py judges them, trace.py and the CLI show them. Never: import an engine here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

SCHEMA = "edge-runtime/ops/1"

# What a row's `status` may say, the same words for every engine.
EXECUTED = "executed"  # ran, and its time is in mean_us
FUSED = "fused"  # folded into the op before it by the engine's graph compiler: no time of its own
IN_PLACE = "in-place"  # a no-op at run time (a reshape of a view, a layout change the next kernel reads directly)
UNDER_1US = "under 1 us"  # ran, but the engine's counter (whole microseconds) read 0
OVERHEAD = "overhead"  # the row that names what no op accounts for (the engine's run loop, the profiler, I/O)
STATUSES = (EXECUTED, FUSED, IN_PLACE, UNDER_1US, OVERHEAD)

SUMMARY_ROWS = 200  # op rows a bench result keeps (the slowest): a report's chart, not the full table

# time_source: where the per-op times come from.
PROFILER = "profiler"
PLACEMENT_ONLY = "placement only"


@dataclass(frozen=True)
class OpRow:
    """One op as the engine ran it. `where`: the device, provider or delegate (short: "CPU", "OpenVINO", "GPU");
    `kernel`: the engine's kernel name where it has one (OpenVINO's exec type, e.g. brgconv_avx512_amx_I8), None
    where it names none (ONNX Runtime); `precision`: "int8", "uint8", "fp32", "bf16", ... or "a->b" for an op that
    converts; `share`: of the profiled run's mean time (0..1), None without a time; `fused_into`: the op a fused
    one is part of."""

    name: str
    type: str
    where: str
    kernel: str | None
    precision: str | None
    mean_us: float | None
    p99_us: float | None
    share: float | None
    status: str
    fused_into: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Partition:
    """A part of the graph one device, provider or delegate runs: `ops` how many ops (as the engine placed them,
    before its own fusions), `op_types` how many of each type."""

    where: str
    ops: int
    op_types: dict[str, int]

    def to_dict(self) -> dict:
        return {"where": self.where, "ops": self.ops, "op_types": dict(sorted(self.op_types.items()))}


@dataclass(frozen=True)
class Counted:
    """How many ops of a kind (fell back, copies), and how many of each type. `count` None: unknown (an external
    LiteRT delegate copies inside its own nodes, which LiteRT does not show)."""

    count: int | None = 0
    types: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"count": self.count, "types": dict(sorted(self.types.items()))}

    @classmethod
    def of(cls, types: list[str]) -> Counted:
        out: dict[str, int] = {}
        for t in types:
            out[t] = out.get(t, 0) + 1
        return cls(len(types), out)


@dataclass(frozen=True)
class EngineProfile:
    """What an engine's module measured on the profiled session: the rows (no overhead row yet: shares are set by
    verdict.finish), the partitions, what fell back and what copies, the profiled run's mean per inference as timed
    from Python (`profiled_us`), the engine's own per-run total where it reports one (`engine_us`: ONNX Runtime's
    model_run), how many runs the per-op times cover, and notes for people."""

    rows: tuple[OpRow, ...]
    partitions: tuple[Partition, ...]
    fallback: Counted
    copies: Counted
    profiled_us: float | None
    engine_us: float | None
    runs: int
    time_source: str
    target: str  # the device, provider or delegate asked for ("CPU" when none was)
    notes: tuple[str, ...] = ()
    profiled_p50_us: float | None = None  # the profiled run's median, to set against the median with profiling off


@dataclass(frozen=True)
class OpsReport:
    """`edge-runtime ops`' result. `total_us`: the inference time of a session with profiling off ({p50, mean,
    p99}); `profiled_us`: the profiled session's mean per inference; `named_us`: the sum of the op rows' means;
    `overhead_us`: profiled_us - named_us, the overhead row (named + overhead == profiled, by construction)."""

    engine: dict  # {name, version, device, delegate, fallback}
    model: dict  # {path, sha256, format}
    device: str
    runs: int
    ops: tuple[OpRow, ...]
    partitions: tuple[Partition, ...]
    fallback: Counted
    copies: Counted
    total_us: dict
    profiled_us: float | None
    named_us: float | None
    overhead_us: float | None
    engine_us: float | None
    time_source: str
    verdict: str
    notes: tuple[str, ...] = ()
    profiled_p50_us: float | None = None
    target: str = "CPU"  # the device, provider or delegate asked for ("CPU" when none was)
    # Of the profiled run's time: the ops on `target` (None on CPU only, or without per-op times) and the ops that
    # ran elsewhere (the fallback's cost; None without per-op times).
    delegated_share: float | None = None
    fallback_share: float | None = None

    @property
    def profiling_overhead_pct(self) -> float | None:
        """How much slower the profiled session ran than the one with profiling off, median against median (a
        mean moves with every preemption of a busy machine; the median does not)."""
        p50 = self.total_us.get("p50")
        if self.profiled_p50_us is None or not p50:
            return None
        return round(100.0 * (self.profiled_p50_us / p50 - 1.0), 1)

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "engine": dict(self.engine),
            "model": dict(self.model),
            "device": self.device,
            "runs": self.runs,
            "ops": [r.to_dict() for r in self.ops],
            "partitions": [p.to_dict() for p in self.partitions],
            "fallback": self.fallback.to_dict(),
            "copies": self.copies.to_dict(),
            "total_us": dict(self.total_us),
            "profiled_us": self.profiled_us,
            "profiled_p50_us": self.profiled_p50_us,
            "named_us": self.named_us,
            "overhead_us": self.overhead_us,
            "engine_us": self.engine_us,
            "profiling_overhead_pct": self.profiling_overhead_pct,
            "time_source": self.time_source,
            "target": self.target,
            "delegated_share": self.delegated_share,
            "fallback_share": self.fallback_share,
            "verdict": self.verdict,
            "notes": list(self.notes),
        }

    def summary(self) -> dict:
        """What a bench result carries as its `ops` section (`bench --ops`): the verdict, partitions, fallback op
        types, copies, the delegated share, the time split and the profiler's own cost, and the op rows (at most
        SUMMARY_ROWS, the slowest first, the overhead row always kept) for a report's per-op chart. The model and
        engine are the result's own sections; the latency with profiling off is the result's latency."""
        rows = [r for r in self.ops if r.status != OVERHEAD]
        rows.sort(key=lambda r: -(r.mean_us or 0.0))
        kept = rows[:SUMMARY_ROWS] + [r for r in self.ops if r.status == OVERHEAD]
        return {
            "schema": SCHEMA,
            "verdict": self.verdict,
            "target": self.target,
            "time_source": self.time_source,
            "runs": self.runs,
            "partitions": [p.to_dict() for p in self.partitions],
            "fallback": self.fallback.to_dict(),
            "copies": self.copies.to_dict(),
            "delegated_share": self.delegated_share,
            "fallback_share": self.fallback_share,
            "profiled_us": self.profiled_us,
            "named_us": self.named_us,
            "overhead_us": self.overhead_us,
            "profiling_overhead_pct": self.profiling_overhead_pct,
            "ops_total": len(rows),
            "ops": [r.to_dict() for r in kept],
            "notes": list(self.notes),
        }


def median_us(samples_ns) -> float | None:
    """The nearest-rank median of ns samples, in us (None for none): the p50 of measure/stats.py."""
    if len(samples_ns) == 0:
        return None
    import numpy as np

    from edge_runtime.measure.stats import nearest_rank

    return round(nearest_rank(np.sort(samples_ns), 50.0) / 1e3, 3)
