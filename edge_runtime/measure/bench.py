"""`run_bench`: one model, measured on chosen CPUs, with everything that explains its numbers.

A run is four phases, each in its own function:
1. `prepare` (measure/prepare.py): isolation report and platform latency (cyclictest) first, so they see the system
   before the model loads it; the thermal limit, the cool-down wait, and a refusal when the board is already above
   the limit (or never cooled down): raised here as `NothingMeasured`, with the record of the refused run;
2. `_measure`: an ExitStack of resources, each undone whatever happens, in this order: co-runners (so load and
   warm-up run under the same load), the session (loaded with `cpus`: the process and every thread pinned before the
   backend starts its pools; affinity put back after it closes), SCHED_FIFO for every thread (after one call, when
   the pools exist) and mlockall, the thermal sampler on a housekeeping CPU; then warm-up and the timed loop, with
   the interference counters read just around the timed part;
3. `_build`: the typed result record (edge_runtime.results.BenchResult), statistics, interference, thermal, power;
4. the samples go back beside the record (`BenchRun`), never inside it.

A failed check that leaves nothing measured (refused before load, the limit crossed in load or warm-up) still has a
record: `NothingMeasured.result`, marked `aborted` with the phase, for the caller's --json.

The request (`BenchRequest`) is pure data; what only a local caller has (a feeds function, an HDR log output, a
progress callback, a stop flag) are arguments here.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from edge_runtime.errors import CheckFailedError, Interrupted, UserError
from edge_runtime.files.outputs import Output, check_distinct, plan_output, write_output
from edge_runtime.measure.batch import bind_batch
from edge_runtime.measure.corunners import CoRunner
from edge_runtime.measure.interference import counters, interference_section
from edge_runtime.measure.loop import Measurement, StopRequest, hdr_log_text, measure
from edge_runtime.measure.ops_section import check as check_ops
from edge_runtime.measure.ops_section import profile_after
from edge_runtime.measure.ops_section import warning as ops_warning
from edge_runtime.measure.prepare import Prepared, prepare, refused_record
from edge_runtime.measure.request import BenchRequest
from edge_runtime.measure.scenario import saturation_text, scenario_section
from edge_runtime.measure.schedule import OPEN_LOOP, measure_open_loop, plan_for
from edge_runtime.measure.sections import (
    config_section,
    environment_section,
    power_section,
    precision,
    thermal_section,
)
from edge_runtime.measure.stats import (
    PERCENTILE_METHOD,
    histogram_us,
    jitter,
    latency_timeline,
    stability,
    summarize,
)
from edge_runtime.results import (
    Aborted,
    BackendSection,
    BenchResult,
    Jitter,
    Latency,
    ModelInfo,
    Pinning,
    Quality,
    ThreadPin,
)
from edge_runtime.runtime.feeds import random_feeds
from edge_runtime.system.process import (
    cpu_times_by_task,
    mlock_all,
    munlock_all,
    own_threads,
    restore_affinity,
    restore_scheduling,
    set_fifo,
    signal_name,
)
from edge_runtime.system.root import SystemRoot
from edge_runtime.system.sampler import Sampler
from edge_runtime.system.thermal import read_snapshot


class NothingMeasured(CheckFailedError):
    """A failed check that ended a run before its first timed call (the board above the thermal limit, or never cooled
    down, before the model loaded; the limit crossed during load or warm-up): exit 1 with one line, and `result`, the
    record that says why (`aborted` with its phase, the temperatures, no latency), for a --json asked for."""

    def __init__(self, refused: CheckFailedError, result: BenchResult):
        super().__init__(refused.message, hint=refused.hint)
        self.result = result


@dataclass(frozen=True)
class BenchRun:
    """A result and, beside it, every latency in nanoseconds in the order measured (for histograms and logs)."""

    result: BenchResult
    samples_ns: np.ndarray
    start_ns: int = 0  # time.time_ns() when the measured part began (for logs that need more than whole seconds)


@dataclass
class _Measured:
    m: Measurement
    marks: dict
    threads: list
    model: object
    backend: object
    sampler: Sampler
    stress: list[dict]
    stress_ended_early: bool
    extra_packages: list[str] = field(default_factory=list)
    open_loop: object = None  # an open-loop scenario's OpenLoopRun
    plan: object = None  # and its schedule.Plan
    ops: dict | None = None  # the `ops` section (bench --ops: measure/ops_section.py)


def run_bench(
    request: BenchRequest,
    root: SystemRoot,
    *,
    feeds: Callable[[object], Mapping[str, np.ndarray]] | None = None,
    hdr_log: Output | str | None = None,
    progress: Callable[[str], None] | None = None,
    stop: StopRequest | None = None,
) -> BenchRun:
    """Measure `request.model` as the request says; `root` is the observed system (isolation, interrupts, thermal),
    while pinning and scheduling act on this process.

    `feeds(session)` gives the inputs (default: seeded random data of the request's seed). `hdr_log` receives an
    HdrHistogram interval log. `stop`, armed for the measured part, ends the loop at the next chunk when a signal sets
    it, and the partial result comes back marked `aborted` (kind `interrupted`). Raises Interrupted when stopped
    before anything was measured, NothingMeasured (a CheckFailedError, with the record) above the thermal limit before
    the measured part.
    """
    request.validate()
    if (request.concurrency or 1) > 1:
        raise UserError(f"concurrency {request.concurrency}: a board runs one query at a time on its pinned CPUs "
                        "(concurrency goes with server targets)")  # fmt: skip
    if request.ops:  # before anything loads: a backend or option `ops` cannot profile is refused in one line
        check_ops(request)
    say = progress or (lambda _msg: None)
    hdr_out = plan_output("hdr_log", hdr_log) if isinstance(hdr_log, str) else hdr_log
    if hdr_out is not None:
        from edge_runtime.runtime.model import model_files

        check_distinct([hdr_out], model_files(request.model))  # the log never replaces the model it measures
    prep = prepare(request, root, say)
    if prep.refused is not None:
        raise NothingMeasured(prep.refused, refused_record(request, root, prep))
    got = _measure(request, root, prep, feeds, say, stop)
    m = got.m
    if len(m.samples_ns) == 0:  # nothing was measured: no latency to keep
        if stop is not None and stop.requested:
            raise Interrupted(stop.signum or 2)
        if not m.stopped:
            per_call = f" (one inference takes about {m.per_call_ns / 1e3:.0f} us)" if m.per_call_ns else ""
            raise UserError(
                f"--duration {request.duration_s:g}: no inference completed in that time{per_call}",
                hint="give a longer --duration",
            )
        # Stopped at the limit in load or warm-up: the measured part would have begun now, after every reading.
        m.begin_perf_s = m.begin_perf_s or time.perf_counter()
        phase, _ = got.sampler.crossing(m.begin_perf_s)
        refused = CheckFailedError(
            f"thermal limit {prep.limit_c:g} C exceeded during {phase} ({got.sampler.over_limit_c:.1f} C): "
            "nothing measured",
            hint="let the board cool down first (--cooldown-to)",
        )
        raise NothingMeasured(refused, _build(request, root, prep, got, stop))
    result = _build(request, root, prep, got, stop)
    if hdr_out is not None:
        comment = f"edge-runtime bench {os.path.basename(result.model.path)}"
        write_output(hdr_out, hdr_log_text(m.samples_ns, m.start_ns, m.wall_s, comment))
    return BenchRun(result, m.samples_ns, m.start_ns)


# ------------------------------------------------------------------------------------------------- 2. measure
def _measure(
    request: BenchRequest,
    root: SystemRoot,
    prep: Prepared,
    feeds: Callable[[object], Mapping[str, np.ndarray]] | None,
    say: Callable[[str], None],
    stop: StopRequest | None,
) -> _Measured:
    from edge_runtime.runtime.load import load

    cpus = list(request.cpus) if request.cpus else None
    iterations, duration_s = request.length
    # Co-runners are bounded by their own timeout: three times a --duration run plus load time, or an hour for an
    # --iterations run (its length is not known in advance); stopped as soon as the run ends either way.
    bound_s = (duration_s or 0.0) * 3 + 60.0 + (request.warmup_s or 0.0) if duration_s else 3600.0
    saved_affinity = os.sched_getaffinity(0)  # put back at the end: a library call must not leave its caller pinned
    with contextlib.ExitStack() as stack:
        corunner = stack.enter_context(CoRunner(list(request.stress), max_seconds=bound_s, measured_cpus=cpus))
        if cpus:
            stack.callback(restore_affinity, saved_affinity)  # after the session closes (the stack unwinds in reverse)
        session = stack.enter_context(load(request.model, **request.load_kwargs()))
        if request.model_sha256 and session.model.sha256 != request.model_sha256.lower():
            raise UserError(
                f"model {request.model!r}: sha256 {session.model.sha256[:12]}... is not the requested "
                f"{request.model_sha256[:12]}..."
            )
        given = feeds(session) if feeds is not None else random_feeds(session.inputs, request.seed)[0]
        bound = bind_batch(session, given, request.batch or 1, request.model)  # N samples per inference (batch.py)
        session.run()  # backend pools exist after one call
        tid = threading.get_native_id()
        if request.rt_priority:
            stack.callback(restore_scheduling, set_fifo(request.rt_priority))
        if request.mlock:
            mlock_all()
            stack.callback(munlock_all)
        sampler = stack.enter_context(
            Sampler(root, request.sample_interval_s, cpus, prep.limit_c, root.is_live, allowed_cpus=saved_affinity)
        )
        marks: dict[str, object] = {}

        # Just before the first timed call and just after the last: the counters cover the measured part only. The
        # slow /proc scan for other tasks goes outside the counters' window, not inside it.
        def on_start() -> None:
            marks["others_before"] = cpu_times_by_task(exclude_pid=os.getpid())
            marks["before"] = counters(root, tid)

        def on_end() -> None:
            marks["after"] = counters(root, tid)
            marks["others_after"] = cpu_times_by_task(exclude_pid=os.getpid())

        last = [0.0]

        def tick(done: int, total: int | None, elapsed: float) -> None:
            if elapsed - last[0] < 1.0:
                return
            last[0] = elapsed
            if total:
                say(f"measuring: {done:,}/{total:,} ({done / total:.0%}) {elapsed:.1f} s")
            else:
                say(f"measuring: {elapsed:.1f}/{duration_s:g} s, {done:,} inferences")

        def should_stop() -> bool:
            return sampler.over_limit() or (stop is not None and stop.requested)

        if stop is not None:
            stop.armed = True
        if request.warmup_s:  # a timed warm-up: say it is under way (a count of calls is over before anyone looks)
            say(f"warming up: {request.warmup_s:g} s")
        open_loop = plan = None
        common = dict(  # the warm-up, progress, stop checks and counter marks both loops share
            warmup=request.warmup,
            warmup_s=request.warmup_s,
            progress=tick,
            should_stop=should_stop,
            chunk_s=min(0.5, request.sample_interval_s),
            on_start=on_start,
            on_end=on_end,
        )
        try:
            if request.scenario in OPEN_LOOP:
                plan = plan_for(request, iterations, duration_s)
                m, open_loop = measure_open_loop(
                    session.runner(), plan, until_s=duration_s if plan.intended_ns is None else None, **common
                )
            else:
                m = measure(session.runner(), iterations=iterations, duration_s=duration_s, **common)
        finally:
            if stop is not None:
                stop.armed = False
        sampler.stop()
        # The sampler runs on a housekeeping CPU by design: it is not one of the threads that must be pinned (and
        # one that has not ended yet, on a loaded machine, must not read as a pinning failure).
        threads = [t for t in own_threads() if t.tid != sampler.tid]
        model, backend = session.model, session.backend
        dists = session.distributions
        ops = profile_after(request, session, bound, m, stop, say) if request.ops else None  # after the loop, not in it
    got = _Measured(m, marks, threads, model, backend, sampler, corunner.describe(), corunner.ended_early, dists)
    got.open_loop, got.plan, got.ops = open_loop, plan, ops
    return got


# ------------------------------------------------------------------------------------------------- 3. the record
def _build(request: BenchRequest, root: SystemRoot, prep: Prepared, got: _Measured, stop) -> BenchResult:
    m = got.m
    cpus = list(request.cpus) if request.cpus else None
    snap_end = read_snapshot(root, cpus)
    lat = summarize(m.samples_ns) if len(m.samples_ns) else None  # None: stopped before the measured part
    unstable, quality_warnings = stability(m.samples_ns, lat)
    if m.truncated:
        quality_warnings.append("the run filled its sample buffer before --duration ended")
    if prep.limit_source == "--thermal-limit" and not (prep.snap_start.available or snap_end.available):
        quality_warnings.append(f"thermal limit {prep.limit_c:g} C not checked: no thermal sensors in {root.root}")
    if not root.is_live and (prep.snap_start.available or snap_end.available):
        # The model ran here; the temperatures, clocks and rails came from the tree: say so beside the numbers.
        quality_warnings.append(
            f"thermal and power read from the --sysroot tree {root.root}, not from the machine that ran the model"
        )
    measured_cpus = cpus or sorted(os.sched_getaffinity(0))
    interference = interference_section(root, got.marks, measured_cpus, m.wall_s, quality_warnings)
    sampler = got.sampler
    warnings = quality_warnings + prep.isolation["warnings"]
    if sampler.warning:
        warnings.append(sampler.warning)
    if got.stress_ended_early:
        warnings.append("a --stress co-runner ended before the run did: the end of the run was not under load")
    scenario = scenario_section(request, got.plan, got.open_loop, m.wall_s, m.stopped)
    saturated = saturation_text(scenario or {})
    if saturated:
        warnings.append(saturated)
    if ops_warning(got.ops):
        warnings.append(ops_warning(got.ops))
    aborted = _aborted(m, stop, prep, sampler)
    if aborted is not None:
        what = (
            "interrupted by " + aborted.signal if aborted.kind == "interrupted" else "aborted above the thermal limit"
        )
        n = len(m.samples_ns)
        warnings.append(f"{what}: partial result of {n:,} inferences" if n else f"{what}: nothing measured")
    requested = set(cpus or [])
    model, backend = got.model, got.backend
    # throughput counts samples (inferences x batch), not queries
    spq = got.plan.samples_per_query if got.plan is not None else (request.batch or 1)
    return BenchResult(
        model=ModelInfo(str(model.path), model.sha256, model.format, precision(model.path)),
        backend=BackendSection(
            backend.name,
            backend.version,
            backend.device,
            backend.delegate,
            backend.fallback,
            backend.fallback_reason,
            backend.details,
        ),
        config=config_section(request, m.warmup_calls, got.stress),
        latency_us=Latency(**lat) if lat else Latency(),
        jitter_us=Jitter(**jitter(lat)) if lat else Jitter(),
        throughput_ips=len(m.samples_ns) * spq / m.wall_s if m.wall_s > 0 else None,
        pinning=Pinning(
            requested=tuple(cpus) if cpus else None,
            all_threads_pinned=bool(requested) and all(set(t.cpus) <= requested for t in got.threads),
            threads=tuple(ThreadPin(t.tid, t.name, tuple(t.cpus)) for t in got.threads),
        ),
        interference=interference,
        isolation=prep.isolation,
        platform_latency=prep.platform_latency,
        thermal=thermal_section(prep.snap_start, snap_end, sampler, m, prep.limit_c, prep.limit_source, prep.cooldown),
        power=power_section(prep.snap_start, sampler, m),
        quality=Quality(m.timer_overhead_ns, PERCENTILE_METHOD, unstable, tuple(warnings)),
        environment=environment_section(root, cpus, got.extra_packages),
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(m.start_ns / 1e9)),
        wall_s=m.wall_s,
        aborted=aborted,
        scenario=scenario,
        timeline_us=latency_timeline(m),
        histogram_us=histogram_us(m.samples_ns),
        ops=got.ops,
    )


def _aborted(m: Measurement, stop: StopRequest | None, prep: Prepared, sampler: Sampler) -> Aborted | None:
    if not m.stopped:
        return None
    partial = len(m.samples_ns) > 0
    if stop is not None and stop.requested:
        name = signal_name(stop.signum or 2)
        return Aborted("interrupted", f"interrupted by {name}", name, round(m.wall_s, 3), partial)
    phase, at_s = sampler.crossing(m.begin_perf_s)
    where = "" if phase == "measure" else f" during {phase}"
    reason = f"thermal limit {prep.limit_c:g} C exceeded{where} ({sampler.over_limit_c:.1f} C)"
    return Aborted("thermal", reason, None, at_s, partial, phase)
