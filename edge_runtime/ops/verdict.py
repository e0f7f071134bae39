"""From an engine's rows to what `edge-runtime ops` concludes: each op's share of the time, the overhead row that
names what no op accounts for, and the one-line verdict on placement.

Why an overhead row and not "the ops sum to the run within 10%": no engine's per-op times do (research 29: OpenVINO's
PERF_COUNT covers 70-87% of a run, ONNX Runtime's kernel times 56-84%); the rest is the engine's run loop, input and
output handling, the profiler's own bookkeeping and sub-microsecond truncation. So the ops plus a named overhead row
make up the measured time of the profiled run exactly, and the report says how large that row is.
"""

from __future__ import annotations

from dataclasses import replace

from edge_runtime.ops.record import EXECUTED, OVERHEAD, UNDER_1US, EngineProfile, OpRow

OVERHEAD_NAME = "(overhead)"


def finish(profile: EngineProfile) -> tuple[tuple[OpRow, ...], float | None, float | None]:
    """The rows with their shares, plus the overhead row when there are times; and (named_us, overhead_us)."""
    total = profile.profiled_us
    timed = [r for r in profile.rows if r.mean_us is not None]
    if total is None or total <= 0 or not timed:
        return profile.rows, None, None
    named = sum(r.mean_us for r in timed)  # type: ignore[misc]
    rows = tuple(replace(r, share=None if r.mean_us is None else round(r.mean_us / total, 5)) for r in profile.rows)
    overhead = total - named
    row = OpRow(
        name=OVERHEAD_NAME,
        type=OVERHEAD,
        where="-",
        kernel=None,
        precision=None,
        mean_us=round(overhead, 3),
        p99_us=None,
        share=round(overhead / total, 5),
        status=OVERHEAD,
    )
    return (*rows, row), named, overhead


def op_count(profile: EngineProfile) -> int:
    """How many ops the model has as the engine placed them: the partitions' count (before the engine's fusions),
    else the rows that are ops."""
    placed = sum(p.ops for p in profile.partitions)
    return placed or sum(1 for r in profile.rows if r.status != OVERHEAD)


def verdict(profile: EngineProfile, rows: tuple[OpRow, ...]) -> str:
    """One line: "CPU only: ...", "fully delegated: ...", "partial: 3 ops (RESIZE, SOFTMAX) on CPU cost 41% of the
    time" or "not delegated: ..."."""
    n = op_count(profile)
    target = profile.target
    if target == "CPU":
        return f"CPU only: all {n} ops on CPU (no accelerator asked)"
    on_target = sum(p.ops for p in profile.partitions if p.where == target)
    subgraphs = sum(1 for p in profile.partitions if p.where == target)
    if on_target == 0:
        return f"not delegated: all {n} ops on {_elsewhere(profile, target)}"
    fb = profile.fallback
    if fb.count == 0:
        return f"fully delegated: {n} ops in {subgraphs} subgraph(s) on {target}"
    types = ", ".join(sorted(fb.types))
    cost = _fallback_share(rows, target)
    said = f"{cost * 100:.0f}% of the time" if cost is not None else "an unknown share of the time (no per-op times)"
    return (
        f"partial: {fb.count} op{'s' if fb.count != 1 else ''} ({types}) on {_elsewhere(profile, target)} cost {said}"
    )


def _elsewhere(profile: EngineProfile, target: str) -> str:
    others = sorted({p.where for p in profile.partitions if p.where != target})
    return ", ".join(others) or "CPU"


def shares(profile: EngineProfile, rows: tuple[OpRow, ...]) -> tuple[float | None, float | None]:
    """(delegated share, fallback share) of the profiled run's time: the ops on the target asked for, and the ops
    elsewhere. Delegated is None on CPU only (nothing was asked of an accelerator); both None without times."""
    if profile.target == "CPU":
        return None, None
    fallback = _fallback_share(rows, profile.target)
    if fallback is None:
        return None, None
    on = [r for r in rows if r.status in (EXECUTED, UNDER_1US) and r.where == profile.target]
    return round(sum(r.share or 0.0 for r in on), 5), round(fallback, 5)


def _fallback_share(rows: tuple[OpRow, ...], target: str) -> float | None:
    """The share of the time of the ops not on `target` (None when the rows carry no times)."""
    ops = [r for r in rows if r.status in (EXECUTED, UNDER_1US) and r.where != target]
    if any(r.share is None for r in ops) or not any(r.share is not None for r in rows):
        return None
    return sum(r.share for r in ops)  # type: ignore[misc]


def coverage_note(named_us: float | None, profiled_us: float | None) -> str | None:
    """What part of the profiled run the ops account for, said once for people."""
    if named_us is None or not profiled_us:
        return None
    return (
        f"the ops account for {100 * named_us / profiled_us:.0f}% of the profiled run; the overhead row is the rest "
        "(the engine's run loop, input/output, the profiler, times under the counter's resolution)"
    )
