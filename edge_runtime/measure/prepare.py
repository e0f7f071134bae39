"""Phase 1 of a bench run: what is looked at before the model loads. The isolation report and the platform latency
(cyclictest) first, so they see the system without the model; then the thermal limit, the wait for a cool board,
and a refusal when the board is already above its limit or never cooled down (returned, not raised: the caller
raises it with `refused_record`, the record of the refused run, for a --json asked for)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edge_runtime.errors import CheckFailedError, UserError
from edge_runtime.measure.request import BenchRequest
from edge_runtime.measure.sections import config_section, environment_section, precision, thermal_before_load
from edge_runtime.measure.stats import PERCENTILE_METHOD
from edge_runtime.results import Aborted, BackendSection, BenchResult, Interference, ModelInfo, Pinning, Quality
from edge_runtime.system.cpulist import format_cpu_list
from edge_runtime.system.isolation import isolation_report
from edge_runtime.system.root import SystemRoot
from edge_runtime.system.thermal import Snapshot, read_snapshot, thermal_limit


@dataclass
class Prepared:
    """What phase 1 found, for the later phases."""

    isolation: dict
    platform_latency: dict | None
    limit_c: float | None
    limit_source: str
    cooldown: dict | None
    snap_start: Snapshot  # the last reading before the model loads (after the cool-down wait, if any)
    refused: CheckFailedError | None = None  # the run must not go on: too hot, or it never cooled down


def prepare(request: BenchRequest, root: SystemRoot, say: Callable[[str], None]) -> Prepared:
    from edge_runtime.system.boards import detect

    iso = isolation_report(root, list(request.cpus) if request.cpus else None)
    platform_latency = None
    if request.platform_latency_s:
        from edge_runtime.measure import platform_latency as pl

        if not pl.available():
            iso["warnings"].append("--platform-latency: cyclictest not installed (apt-get install rt-tests)")
        else:
            target = list(request.cpus or sorted(os.sched_getaffinity(0)))  # this machine's CPUs, whatever the root
            say(f"platform latency: cyclictest on CPU {format_cpu_list(target)} for {request.platform_latency_s:g} s")
            try:
                platform_latency = pl.run_cyclictest(
                    target, request.platform_latency_s, priority=request.rt_priority or 80
                )
            except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as err:
                iso["warnings"].append(f"--platform-latency: {err} (cyclictest needs root for SCHED_FIFO and mlock)")
    cpus = list(request.cpus) if request.cpus else None
    snap_start = read_snapshot(root, cpus)
    limit_c, limit_source = thermal_limit(request.thermal_limit_c, detect(root), snap_start)
    cooldown = refused = None
    if request.cooldown_to_c is not None:
        cooldown, refused = _cool_down(root, request, snap_start, say, iso["warnings"])
        if cooldown:
            snap_start = read_snapshot(root, cpus)
    hottest = snap_start.max_c()
    if refused is None and limit_c is not None and hottest is not None and hottest > limit_c:
        refused = CheckFailedError(
            f"already above the thermal limit before measuring: {hottest:.1f} C > {limit_c:g} C ({limit_source})",
            hint="let the board cool first (--cooldown-to C waits for it)",
        )
    return Prepared(iso, platform_latency, limit_c, limit_source, cooldown, snap_start, refused)


def _cool_down(
    root: SystemRoot, cfg: BenchRequest, snap, say, warnings: list[str]
) -> tuple[dict | None, CheckFailedError | None]:
    """Wait, with progress, until the hottest sensor is below --cooldown-to: (what the wait saw, the refusal when the
    board never got there within --cooldown-timeout)."""
    if not snap.available:
        warnings.append("--cooldown-to: no thermal sensors here, nothing to wait for")
        return None, None
    target = cfg.cooldown_to_c
    t0 = time.monotonic()
    start_c = snap.max_c()
    while True:
        now_c = read_snapshot(root, list(cfg.cpus) if cfg.cpus else None).max_c()
        waited = time.monotonic() - t0
        seen = {"to_c": target, "start_c": start_c, "reached_c": now_c, "waited_s": round(waited, 2)}
        if now_c is not None and now_c <= target:
            return seen, None
        if waited > cfg.cooldown_timeout_s:
            # A sensor that stopped answering is not a cool board: say which it was.
            now = f"still {now_c:.1f} C" if now_c is not None else "no temperature reading (the sensors went away)"
            refused = CheckFailedError(
                f"--cooldown-to {target:g}: {now} after {cfg.cooldown_timeout_s:g} s",
                hint="improve cooling or raise the target",
            )
            return {**seen, "reached_c": None, "last_c": now_c, "timed_out": True}, refused
        now = f"{now_c:.1f} C > {target:g} C" if now_c is not None else "no temperature reading"
        say(f"cooling down: {now}, waited {waited:.0f} s")
        time.sleep(min(1.0, max(0.1, cfg.sample_interval_s)))


def refused_record(request: BenchRequest, root: SystemRoot, prep: Prepared) -> BenchResult:
    """The record of a run refused before its model loaded: what was asked, the readings that refused it, nothing
    measured. The backend is the one that would have run; it was never loaded, so it has no version."""
    from edge_runtime.runtime.model import DEFAULT_BACKEND, FORMATS, inspect_model

    cpus = list(request.cpus) if request.cpus else None
    path = Path(request.model)
    try:
        model = inspect_model(path)
        sha256, fmt = model.sha256, model.format
    except UserError:  # a bad model is refused when it loads; the board refused the run before that
        sha256, fmt = "", FORMATS.get(path.suffix.lower(), "")
    reason = prep.refused.message
    return BenchResult(
        model=ModelInfo(str(path), sha256, fmt, precision(path)),
        backend=BackendSection(request.backend or DEFAULT_BACKEND.get(fmt, "")),
        config=config_section(request, 0, ()),
        pinning=Pinning(requested=tuple(cpus) if cpus else None),
        interference=Interference(cpus=tuple(cpus or ())),
        isolation=prep.isolation,
        platform_latency=prep.platform_latency,
        thermal=thermal_before_load(prep.snap_start, prep.limit_c, prep.limit_source, prep.cooldown, cpus),
        quality=Quality(None, PERCENTILE_METHOD, None, (*prep.isolation["warnings"], "refused: nothing measured")),
        environment=environment_section(root, cpus, []),
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        aborted=Aborted("thermal", reason, None, None, False, "before load"),
    )
