"""Sections of a bench result that are built from several sources: thermal (snapshots at start and end, the sampler's
timeline; or the one reading that refused a run), power (the board's own rail), the config as run, the environment,
and the model's precision from its name."""

from __future__ import annotations

import itertools

import numpy as np

from edge_runtime import __version__
from edge_runtime.measure.loop import Measurement
from edge_runtime.measure.request import BenchRequest
from edge_runtime.results import Config, Environment, Power, Thermal, ThermalPoint, ZoneSection
from edge_runtime.system.environment import environment, packages
from edge_runtime.system.root import SystemRoot
from edge_runtime.system.sampler import Sampler
from edge_runtime.system.thermal import Snapshot, pick_rail, throttle_reasons

TIMED_CALL = (
    "Session.runner(): the backend's run call on inputs bound once (outputs not copied out), timed in Python around "
    "the call as an application sees it"
)


def _sample_index(chunks: list[tuple[int, float]] | None, t: float) -> int | None:
    """The latency sample being measured at time t (seconds since the measured part began), from chunk bounds."""
    if not chunks or t < 0:
        return None
    for (i0, t0), (i1, t1) in itertools.pairwise(chunks):
        if t0 <= t <= t1:
            return int(i0 + (i1 - i0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0))
    return chunks[-1][0]


def thermal_section(
    start: Snapshot, end: Snapshot, sampler: Sampler, m: Measurement, limit_c, limit_source: str, cooldown
) -> Thermal:
    """The thermal section: start/max/end, headroom to the limit, throttling and from when, the zones, and the
    sampler's timeline placed on the latency samples."""
    timeline = []
    for p in sampler.timeline:
        t = p["t_s"] - m.begin_perf_s
        timeline.append(ThermalPoint.from_dict({**p, "t_s": round(t, 4), "sample_index": _sample_index(m.chunks, t)}))
    temps = [p.max_c for p in timeline if p.max_c is not None]
    temps += [x for x in (start.max_c(), end.max_c()) if x is not None]
    on_measured = any(set(p.sampler_cpus or []) & sampler.measured for p in timeline)
    n = len(m.samples_ns)
    tenth = n // 10
    drift = None
    if tenth >= 10:
        first, last = float(np.median(m.samples_ns[:tenth])), float(np.median(m.samples_ns[-tenth:]))
        drift = round((last - first) / first * 100.0, 2) if first else None
    reasons = throttle_reasons(end, start, sorted(sampler.measured) or None)
    throttled = bool(sampler.throttle_started_s is not None or reasons)
    available = start.available or end.available or any(p.max_c is not None for p in timeline)
    max_c = max(temps) if temps else None
    return Thermal(
        available=available,
        start_c=start.max_c(),
        max_c=max_c,
        end_c=end.max_c(),
        limit_c=limit_c,
        limit_source=limit_source,
        headroom_c=round(limit_c - max_c, 2) if limit_c is not None and max_c is not None else None,
        throttled=throttled if available or reasons else None,
        throttle_started_s=round(sampler.throttle_started_s - m.begin_perf_s, 4)
        if sampler.throttle_started_s is not None
        else None,
        throttle_reasons=tuple(sampler.throttle_why or reasons),
        latency_drift_pct=drift,
        zones=_zones(start, end),
        firmware_throttled=end.throttled,
        sensors_skipped=start.skipped,
        cooldown=cooldown,
        sampler_warning=sampler.warning,
        sampler={
            "tid": sampler.tid,
            "cpus": sampler.cpus,
            "interval_s": sampler.interval_s,
            "on_measured_cpu": on_measured,
            "points": len(timeline),
        },
        timeline=tuple(timeline),
    )


def thermal_before_load(snap: Snapshot, limit_c, limit_source: str, cooldown, cpus: list[int] | None) -> Thermal:
    """The thermal section of a run refused before its model loaded: the reading that decided it (start, max and end
    are that one reading; no sampler ran), the limit and its source, the zones with their trip points, the wait."""
    hottest = snap.max_c()
    reasons = throttle_reasons(snap, None, cpus)
    return Thermal(
        available=snap.available,
        start_c=hottest,
        max_c=hottest,
        end_c=hottest,
        limit_c=limit_c,
        limit_source=limit_source,
        headroom_c=round(limit_c - hottest, 2) if limit_c is not None and hottest is not None else None,
        throttled=bool(reasons) if snap.available or reasons else None,
        throttle_reasons=tuple(reasons),
        zones=_zones(snap, snap),
        firmware_throttled=snap.throttled,
        sensors_skipped=snap.skipped,
        cooldown=cooldown,
    )


def _zones(start: Snapshot, end: Snapshot) -> tuple[ZoneSection, ...]:
    return tuple(
        ZoneSection(
            z.name,
            z.type,
            z.temp_c,
            next((e.temp_c for e in end.zones if e.name == z.name), None),
            tuple({"type": t.type, "temp_c": t.temp_c, "hysteresis_c": t.hysteresis_c} for t in z.trips),
        )
        for z in start.zones
    )


def power_section(start: Snapshot, sampler: Sampler, m: Measurement) -> Power:
    rail = pick_rail(start.rails)
    watts = [p["power_w"] for p in sampler.timeline if p.get("power_w") is not None]
    if rail is None or not watts:
        return Power(False, None, None, None)
    avg = float(np.mean(watts))
    n = len(m.samples_ns)
    return Power(
        True,
        f"{rail.label} ({rail.source})",
        round(avg, 4),
        round(avg * m.wall_s / n * 1e6, 3) if n else None,
        "the board's own rail: whole-board power unless the rail says otherwise, not the accelerator alone",
    )


def precision(path) -> str:
    """From the manifest naming convention where we can tell; the manifest itself says for reference models."""
    name = path.stem.lower()
    for p in ("int8", "fp32", "fp16"):
        if p in name:
            return p
    return "unknown"


def config_section(request: BenchRequest, warmup_calls: int, stress) -> Config:
    """The config section: what the request asked, with the warm-up calls made and the co-runners that ran."""
    cpus = request.cpus or None
    iterations, duration_s = request.length
    return Config(
        threads=request.threads if request.threads is not None else (len(cpus) if cpus else None),
        cpus=tuple(cpus) if cpus else None,
        rt_priority=request.rt_priority,
        mlock=request.mlock,
        warmup=warmup_calls,
        iterations=iterations,
        duration_s=duration_s,
        stress=tuple(stress),
        timed_call=TIMED_CALL,
        batch=request.batch,
    )


def environment_section(root: SystemRoot, cpus: list[int] | None, extra_packages: list[str]) -> Environment:
    """The environment section: the observed system and this process's packages (with the backend's own)."""
    versions = {"edge-runtime": __version__, "numpy": np.__version__, **packages(["psutil", *extra_packages])}
    return Environment.from_dict(environment(root, cpus, versions))
