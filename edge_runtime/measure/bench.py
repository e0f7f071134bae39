"""`edge-runtime bench`: one model, measured on chosen CPUs, with everything that explains its numbers.

Order of a run (each step says why it is where it is):
1. isolation check and platform latency (cyclictest) first, so they see the system before the model loads it;
2. co-runners started (`--stress`), so load and warm-up already happen under the same conditions;
3. load with `--cpus` (the process and every thread pinned before the backend starts its pools);
4. one call, then SCHED_FIFO for every thread (pools are complete by then) and mlockall;
5. interference counters read, warm-up and measured loop, counters read again (so they cover the measured part only);
6. pinning verified from /proc/self/task, co-runners stopped whatever happened.
"""

from __future__ import annotations

import itertools
import os
import platform
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version

import numpy as np

from edge_runtime import __version__
from edge_runtime.errors import CheckFailedError, Interrupted, UserError
from edge_runtime.measure.corunners import CoRunner, StressSpec
from edge_runtime.measure.interference import interrupt_delta, parse_interrupts
from edge_runtime.measure.loop import Measurement, StopRequest, hdr_log_text, measure
from edge_runtime.measure.stats import PERCENTILE_METHOD, jitter, stability, summarize
from edge_runtime.system.cpulist import format_cpu_list
from edge_runtime.system.files import plan_output, write_output
from edge_runtime.system.process import (
    cpu_times_by_task,
    major_faults,
    mlock_all,
    munlock_all,
    own_threads,
    restore_affinity,
    restore_scheduling,
    schedstat,
    set_fifo,
    task_migrations,
    task_status,
)
from edge_runtime.system.root import SystemRoot
from edge_runtime.system.sampler import Sampler
from edge_runtime.system.thermal import pick_rail, read_snapshot, thermal_limit, throttle_reasons

SCHEMA = "edge-runtime/bench/1"
SHOWN = [
    ("min", "min"),
    ("p50", "p50"),
    ("p90", "p90"),
    ("p99", "p99"),
    ("p99.9", "p999"),
    ("p99.99", "p9999"),
    ("max", "max"),
]


@dataclass
class BenchConfig:
    model: str
    backend: str | None = None
    device: str | None = None
    delegate: str | None = None
    delegate_options: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    fallback: bool = False
    threads: int | None = None
    cpus: list[int] | None = None
    rt_priority: int | None = None
    mlock: bool = False
    warmup: int = 50
    warmup_s: float | None = None
    iterations: int | None = None
    duration_s: float | None = None
    stress: list[StressSpec] = field(default_factory=list)
    platform_latency_s: float | None = None
    feeds_fn: Callable | None = None  # session -> {name: array}; random (seeded) inputs when None
    seed: int = 0
    hdr_log: object = None  # a path, or an edge_runtime.files.Output planned by the caller
    isolate: bool = True
    thermal_limit_c: float | None = None
    cooldown_to_c: float | None = None
    cooldown_timeout_s: float = 600.0
    sample_interval_s: float = 0.25


# ------------------------------------------------------------------------------------------------- system checks
def isolation_report(root: SystemRoot, cpus: list[int] | None) -> dict:
    """Are the measured CPUs set apart, and can IRQs still land on them? Warnings, not errors."""
    iso = root.isolation()
    isolated = set(iso.get("isolcpus", [])) | set(iso.get("nohz_full", [])) | set(iso.get("sysfs_isolated", []))
    out: dict = {
        "isolcpus": iso.get("isolcpus", []),
        "nohz_full": iso.get("nohz_full", []),
        "rcu_nocbs": iso.get("rcu_nocbs", []),
        "irqaffinity": iso.get("irqaffinity", []),
        "sysfs_isolated": iso.get("sysfs_isolated", []),
        "warnings": [],
    }
    if not cpus:
        out["warnings"].append("not pinned: the scheduler may move the measuring thread (use --cpus)")
        return out
    not_isolated = [c for c in cpus if c not in isolated]
    for key, raw in iso.get("garbled", {}).items():
        out["warnings"].append(f"{key}={raw!r} on the kernel command line is not a CPU list: isolation unknown")
    if root.read("/proc/cmdline") is None and not root.is_live:
        out["warnings"].append(f"isolation unknown: no /proc/cmdline in {root.root}")
    elif not_isolated:
        out["warnings"].append(
            f"CPU {format_cpu_list(not_isolated)} not isolated (no isolcpus/nohz_full for it on the kernel command "
            "line): other tasks may run there"
        )
    irqs = {irq: aff for irq, aff in root.irq_affinities().items() if set(aff) & set(cpus)}
    out["irqs_routed_to_cpus"] = sorted(irqs, key=int)
    if irqs:
        shown = ", ".join(sorted(irqs, key=int)[:8]) + (" ..." if len(irqs) > 8 else "")
        out["warnings"].append(f"{len(irqs)} IRQ(s) may be delivered to CPU {format_cpu_list(cpus)} ({shown})")
    return out


def _packages(backend: str) -> dict[str, str]:
    names = {"onnxruntime": ["onnxruntime"], "openvino": ["openvino"], "tflite": ["ai-edge-litert", "tflite-runtime"]}
    out = {"edge-runtime": __version__, "numpy": np.__version__}
    for dist in ["psutil", *names.get(backend, [])]:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out


def environment(root: SystemRoot, cpus: list[int] | None, backend: str) -> dict:
    """Where the run happened. The observed system (board, kernel, command line, CPU, governors, isolation) comes from
    the system root and only from it: with --sysroot a captured tree describes a board, and nothing of this machine is
    mixed in. What belongs to the process (Python, packages, the kernel it really ran on) is this machine's, and
    `measured_on` says so whenever the two differ."""
    govs = root.governors()
    env = {
        "sysroot": str(root.root),
        "board": root.board_model() or None,
        "kernel": root.kernel() or (platform.release() if root.is_live else None),
        "cmdline": root.cmdline(),
        "cpu_model": root.cpu_model() or ((platform.processor() or None) if root.is_live else None),
        "governor": {str(c): govs[c] for c in (cpus or govs) if c in govs},
        "isolated_cpus": root.cpus("isolated") or [],
        "online_cpus": root.online_cpus(),
        "python": platform.python_version(),
        "packages": _packages(backend),
        "hostname": platform.node(),
    }
    if not root.is_live:
        live = SystemRoot("/")
        env["measured_on"] = {
            "note": "the model ran on this machine; board, kernel, cmdline, cpu_model, governor and CPU sets above "
            "were read from the --sysroot tree",
            "kernel": live.kernel() or platform.release(),
            "cpu_model": live.cpu_model() or platform.processor() or None,
            "online_cpus": live.online_cpus(),
        }
    return env


# --------------------------------------------------------------------------------------------------------- the run
def _random_feeds(session, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for t in session.inputs:
        shape = [d if d is not None else 1 for d in t.shape]
        if t.dtype.kind == "f":
            feeds[t.name] = rng.random(shape, dtype=np.float64).astype(t.dtype)
        elif t.dtype.kind in "iu":
            info = np.iinfo(t.dtype)
            feeds[t.name] = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=t.dtype)
        else:
            feeds[t.name] = np.zeros(shape, dtype=t.dtype)
    return feeds


def _counters(root: SystemRoot, tid: int) -> dict:
    st = task_status(tid)
    text = root.read("/proc/interrupts")
    rows = parse_interrupts(text) if text else None
    return {
        # None: no /proc/interrupts to read, or nothing in it parses (garbage): unknown, which is not zero
        "interrupts": rows or None,
        "interrupts_text": text,
        "nonvoluntary": int(st.get("nonvoluntary_ctxt_switches", 0) or 0),
        "voluntary": int(st.get("voluntary_ctxt_switches", 0) or 0),
        "migrations": task_migrations(tid),
        "majflt": major_faults(),
        "schedstat": schedstat(tid),
    }


def run_bench(
    cfg: BenchConfig,
    root: SystemRoot,
    progress: Callable[[str], None] | None = None,
    stop: StopRequest | None = None,
) -> dict:
    """Measure `cfg.model` as `cfg` says and return the result dict (schema edge-runtime/bench/1).

    `root` is the observed system (isolation, interrupts, thermal); pinning and scheduling act on this process.
    `stop`, when given, is armed for the measured part: a signal then ends the loop at the next chunk and the partial
    result comes back marked `aborted` (kind `interrupted`). The samples ride along as `_samples_ns` for the caller's
    histogram and are not part of the public result.
    """
    from edge_runtime.runtime.session import load

    say = progress or (lambda _msg: None)
    hdr_out = plan_output("hdr_log", cfg.hdr_log) if isinstance(cfg.hdr_log, str) else cfg.hdr_log
    iso = isolation_report(root, cfg.cpus)
    platform_latency = None
    if cfg.platform_latency_s:
        from edge_runtime.measure import platform_latency as pl

        if not pl.available():
            iso["warnings"].append("--platform-latency: cyclictest not installed (apt-get install rt-tests)")
        else:
            target = cfg.cpus or sorted(os.sched_getaffinity(0))  # CPUs of this machine, whatever --sysroot says
            say(f"platform latency: cyclictest on CPU {format_cpu_list(target)} for {cfg.platform_latency_s:g} s")
            try:
                platform_latency = pl.run_cyclictest(target, cfg.platform_latency_s, priority=cfg.rt_priority or 80)
            except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as err:
                iso["warnings"].append(f"--platform-latency: {err} (cyclictest needs root for SCHED_FIFO and mlock)")

    expected_s = cfg.duration_s or 0.0
    # Co-runners are bounded by their own timeout: three times a --duration run plus load time, or an hour for an
    # --iterations run (its length is not known in advance); stopped as soon as the run ends either way.
    bound_s = expected_s * 3 + 60.0 + (cfg.warmup_s or 0.0) if cfg.duration_s else 3600.0
    corunner = CoRunner(cfg.stress, max_seconds=bound_s, measured_cpus=cfg.cpus)
    from edge_runtime.system.boards import detect

    snap_start = read_snapshot(root, cfg.cpus)
    limit_c, limit_source = thermal_limit(cfg.thermal_limit_c, detect(root), snap_start)
    cooldown = _cool_down(root, cfg, snap_start, say, iso["warnings"]) if cfg.cooldown_to_c is not None else None
    if cooldown:
        snap_start = read_snapshot(root, cfg.cpus)
    hottest = snap_start.max_c()
    if limit_c is not None and hottest is not None and hottest > limit_c:
        raise CheckFailedError(
            f"already above the thermal limit before measuring: {hottest:.1f} C > {limit_c:g} C ({limit_source})",
            hint="let the board cool first (--cooldown-to C waits for it)",
        )
    use_tegra = root.is_live
    saved_affinity = os.sched_getaffinity(0)  # put back at the end: a library call must not leave its caller pinned
    saved_sched: dict = {}
    locked = False
    with corunner:
        session = load(
            cfg.model,
            backend=cfg.backend,
            device=cfg.device,
            delegate=cfg.delegate,
            delegate_options=cfg.delegate_options,
            options=cfg.options,
            threads=cfg.threads,
            cpus=cfg.cpus,
            fallback=cfg.fallback,
            isolate=cfg.isolate,
        )
        try:
            feeds = cfg.feeds_fn(session) if cfg.feeds_fn else _random_feeds(session, cfg.seed)
            session.bind(feeds)
            session.run()  # backend pools exist after one call
            tid = threading.get_native_id()
            if cfg.rt_priority:
                saved_sched = set_fifo(cfg.rt_priority)
            if cfg.mlock:
                mlock_all()
                locked = True
            marks: dict[str, dict] = {}

            def on_start() -> None:  # just before the first timed call: counters cover the measured part only
                marks["before"] = _counters(root, tid)
                marks["others_before"] = cpu_times_by_task(exclude_pid=os.getpid())

            def on_end() -> None:
                marks["after"] = _counters(root, tid)
                marks["others_after"] = cpu_times_by_task(exclude_pid=os.getpid())

            sampler = Sampler(root, cfg.sample_interval_s, cfg.cpus, limit_c, use_tegra, allowed_cpus=saved_affinity)
            sampler.start(t0=0.0)
            last = [0.0]

            def tick(done: int, total: int | None, elapsed: float) -> None:
                if elapsed - last[0] < 1.0:
                    return
                last[0] = elapsed
                if total:
                    say(f"measuring: {done:,}/{total:,} ({done / total:.0%}) {elapsed:.1f} s")
                else:
                    say(f"measuring: {elapsed:.1f}/{cfg.duration_s:g} s, {done:,} inferences")

            def should_stop() -> bool:
                return sampler.over_limit() or (stop is not None and stop.requested)

            if stop is not None:
                stop.armed = True
            try:
                m: Measurement = measure(
                    session.runner(),
                    iterations=cfg.iterations,
                    duration_s=cfg.duration_s,
                    warmup=cfg.warmup,
                    warmup_s=cfg.warmup_s,
                    progress=tick,
                    should_stop=should_stop,
                    chunk_s=min(0.5, cfg.sample_interval_s),
                    on_start=on_start,
                    on_end=on_end,
                )
            finally:
                if stop is not None:
                    stop.armed = False
            sampler.stop()
            threads = own_threads()
        finally:
            if "sampler" in locals():
                sampler.stop()
            if locked:
                munlock_all()
            restore_scheduling(saved_sched)
            model_info, backend_info = session.model, session.backend
            session.close()
            if cfg.cpus:
                restore_affinity(saved_affinity)
    if len(m.samples_ns) == 0:  # nothing was measured, so there is no result to keep
        if stop is not None and stop.requested:
            raise Interrupted(stop.signum or 2)
        if not m.stopped:
            per_call = f" (one inference takes about {m.per_call_ns / 1e3:.0f} us)" if m.per_call_ns else ""
            raise UserError(
                f"--duration {cfg.duration_s:g}: no inference completed in that time{per_call}",
                hint="give a longer --duration",
            )
        raise CheckFailedError(
            f"thermal limit {limit_c:g} C exceeded during warm-up ({sampler.over_limit_c:.1f} C): nothing measured",
            hint="let the board cool down first (--cooldown-to)",
        )
    snap_end = read_snapshot(root, cfg.cpus)

    lat = summarize(m.samples_ns)
    unstable, quality_warnings = stability(m.samples_ns, lat)
    if m.truncated:
        quality_warnings.append("the run filled its sample buffer before --duration ended")
    if limit_source == "--thermal-limit" and not (snap_start.available or snap_end.available):
        quality_warnings.append(f"thermal limit {limit_c:g} C not checked: no thermal sensors in {root.root}")
    measured_cpus = cfg.cpus or sorted(os.sched_getaffinity(0))
    before, after = marks["before"], marks["after"]
    if before["interrupts"] is None or after["interrupts"] is None:
        fired = None
        quality_warnings.append(
            f"interrupts unknown: no readable /proc/interrupts under {root.root} (not zero: unread)"
        )
    elif not root.is_live and before["interrupts_text"] == after["interrupts_text"]:
        fired = None  # a captured file that nobody updates: no count was observed
        quality_warnings.append(
            f"interrupts unknown: {root.root}/proc/interrupts did not change during the run (a capture, not a count)"
        )
    else:
        fired = interrupt_delta(before["interrupts"], after["interrupts"], measured_cpus)
    migrations = (
        after["migrations"] - before["migrations"]
        if after["migrations"] is not None and before["migrations"] is not None
        else None
    )
    others = competing_tasks(marks["others_before"], marks["others_after"], measured_cpus, before, after, m.wall_s)
    if others["warning"]:
        quality_warnings.append(others["warning"])
    if hdr_out is not None:
        write_output(
            hdr_out, hdr_log_text(m.samples_ns, m.start_ns, m.wall_s, f"edge-runtime bench {model_info.path.name}")
        )

    requested = set(cfg.cpus or [])
    thread_rows = [{"tid": t.tid, "name": t.name, "cpus": list(t.cpus)} for t in threads]
    result = {
        "schema": SCHEMA,
        "model": {
            "path": str(model_info.path),
            "sha256": model_info.sha256,
            "format": model_info.format,
            "precision": _precision(model_info.path),
        },
        "backend": {
            "name": backend_info.name,
            "version": backend_info.version,
            "device": backend_info.device,
            "delegate": backend_info.delegate,
            "fallback": backend_info.fallback,
            "fallback_reason": backend_info.fallback_reason,
            "details": backend_info.details,
        },
        "config": {
            "threads": cfg.threads if cfg.threads is not None else (len(cfg.cpus) if cfg.cpus else None),
            "cpus": cfg.cpus,
            "rt_priority": cfg.rt_priority,
            "mlock": cfg.mlock,
            "warmup": m.warmup_calls,
            "iterations": cfg.iterations,
            "duration_s": cfg.duration_s,
            "stress": corunner.describe(),
            "timed_call": "Session.runner(): the backend's run call on inputs bound once (outputs not copied out), "
            "timed in Python around the call as an application sees it",
        },
        "latency_us": lat,
        "jitter_us": jitter(lat),
        "throughput_ips": len(m.samples_ns) / m.wall_s if m.wall_s > 0 else None,
        "pinning": {
            "requested": cfg.cpus,
            "all_threads_pinned": bool(requested) and all(set(t.cpus) <= requested for t in threads),
            "threads": thread_rows,
        },
        "interference": {
            "cpus": measured_cpus,
            "interrupts": None if fired is None else sum(c for rows in fired.values() for _, _, c in rows),
            "interrupts_per_cpu": None
            if fired is None
            else {
                str(cpu): [{"source": n, "label": lbl, "count": c} for n, lbl, c in rows] for cpu, rows in fired.items()
            },
            "context_switches_involuntary": after["nonvoluntary"] - before["nonvoluntary"],
            "context_switches_voluntary": after["voluntary"] - before["voluntary"],
            "migrations": migrations,
            "page_faults_major": after["majflt"] - before["majflt"],
            "runqueue_wait_ms": others["runqueue_wait_ms"],
            "runqueue_wait_share": others["runqueue_wait_share"],
            "other_tasks": others["tasks"],
        },
        "isolation": iso,
        "platform_latency": platform_latency,
        "thermal": _thermal_section(snap_start, snap_end, sampler, m, limit_c, limit_source, cooldown, lat),
        "power": _power_section(snap_start, sampler, m),
        "quality": {
            "timer_overhead_ns": m.timer_overhead_ns,
            "percentile_method": PERCENTILE_METHOD,
            "unstable": unstable,
            "warnings": quality_warnings + iso["warnings"],
        },
        "environment": environment(root, cfg.cpus, backend_info.name),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(m.start_ns / 1e9)),
        "wall_s": m.wall_s,
    }
    if sampler.warning:
        result["quality"]["warnings"].append(sampler.warning)
    if corunner.ended_early:
        result["quality"]["warnings"].append(
            "a --stress co-runner ended before the run did: the end of the run was not under load"
        )
    if m.stopped and stop is not None and stop.requested:
        name = _signal_name(stop.signum or 2)
        result["aborted"] = {
            "kind": "interrupted",
            "reason": f"interrupted by {name}",
            "signal": name,
            "at_s": round(m.wall_s, 3),
            "partial": True,
        }
        result["quality"]["warnings"].append(
            f"interrupted by {name}: partial result of {len(m.samples_ns):,} inferences"
        )
    elif m.stopped:
        result["aborted"] = {
            "kind": "thermal",
            "reason": f"thermal limit {limit_c:g} C exceeded ({sampler.over_limit_c:.1f} C)",
            "at_s": round((sampler.over_limit_at or 0.0) - m.begin_perf_s, 3),
            "partial": True,
        }
        result["quality"]["warnings"].append(
            f"aborted above the thermal limit: partial result of {len(m.samples_ns):,} inferences"
        )
    result["_samples_ns"] = m.samples_ns  # for --histogram; dropped before writing JSON
    return result


def _signal_name(signum: int) -> str:
    import signal

    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


# Another task on a measured CPU is interference: it takes the CPU from the measuring thread. Two measures: the
# measuring thread's run-queue wait (schedstat: time it was runnable but another task ran), and the tasks that used
# CPU time while last seen on a measured CPU (from /proc/*/task/*/stat before and after). Below these, noise.
WAIT_SHARE_WARN = 0.02
OTHER_TASK_WARN_S = 0.05


def competing_tasks(before_tasks, after_tasks, cpus, before, after, wall_s: float) -> dict:
    """Who else ran on the measured CPUs during the measured part, and how long the measuring thread waited for them."""
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    tasks = []
    for key, (comm, ticks, cpu, _state) in after_tasks.items():
        if cpu not in cpus:
            continue
        prev = before_tasks.get(key)
        used = ticks - (prev[1] if prev else 0)
        if used > 0:
            tasks.append({"pid": key[0], "tid": key[1], "comm": comm, "cpu": cpu, "cpu_s": round(used / hz, 3)})
    # A task that was running on a measured CPU when the run began and has ended since: it competed, for how long
    # its /proc entry can no longer say.
    # (Gone from /proc, or a zombie its parent has not reaped yet.)
    ended = [
        {"pid": key[0], "tid": key[1], "comm": comm, "cpu": cpu, "cpu_s": None}
        for key, (comm, _ticks, cpu, state) in before_tasks.items()
        if (key not in after_tasks or after_tasks[key][3] in ("Z", "X")) and cpu in cpus and state == "R"
    ]
    by_pid: dict[int, dict] = {}
    for t in tasks + ended:
        row = by_pid.setdefault(
            t["pid"], {"pid": t["pid"], "comm": t["comm"], "cpus": set(), "cpu_s": 0.0, "ended": False}
        )
        row["cpus"].add(t["cpu"])
        if t["cpu_s"] is None:
            row["ended"] = True
        else:
            row["cpu_s"] = round(row["cpu_s"] + t["cpu_s"], 3)
    rows = sorted(by_pid.values(), key=lambda r: (-r["cpu_s"], not r["ended"]))
    for r in rows:
        r["cpus"] = sorted(r["cpus"])
    wait_ms = share = None
    if before.get("schedstat") and after.get("schedstat"):
        wait_ns = after["schedstat"][1] - before["schedstat"][1]
        wait_ms = round(wait_ns / 1e6, 3)
        share = round(wait_ns / 1e9 / wall_s, 4) if wall_s > 0 else None
    heavy = [r for r in rows if r["cpu_s"] >= OTHER_TASK_WARN_S or r["ended"]]
    warning = None
    if heavy or (share is not None and share >= WAIT_SHARE_WARN):
        named = (
            ", ".join(
                f"{r['comm']} (pid {r['pid']}, "
                + (f"{r['cpu_s']:.2f} s" if r["cpu_s"] else "ended during the run")
                + ")"
                for r in heavy[:4]
            )
            or "tasks that could not be named"
        )
        wait = f"the measuring thread waited {share:.0%} of the run for the CPU; " if share is not None else ""
        warning = f"other tasks ran on the measured CPU {format_cpu_list(cpus)}: {wait}{named}"
    return {"runqueue_wait_ms": wait_ms, "runqueue_wait_share": share, "tasks": rows[:20], "warning": warning}


def _cool_down(root: SystemRoot, cfg: BenchConfig, snap, say, warnings: list[str]) -> dict | None:
    """Wait, with progress, until the hottest sensor is below --cooldown-to."""
    if not snap.available:
        warnings.append("--cooldown-to: no thermal sensors here, nothing to wait for")
        return None
    target = cfg.cooldown_to_c
    t0 = time.monotonic()
    start_c = snap.max_c()
    while True:
        now_c = read_snapshot(root, cfg.cpus).max_c()
        waited = time.monotonic() - t0
        if now_c is None or now_c <= target:
            return {"to_c": target, "start_c": start_c, "reached_c": now_c, "waited_s": round(waited, 2)}
        if waited > cfg.cooldown_timeout_s:
            raise CheckFailedError(
                f"--cooldown-to {target:g}: still {now_c:.1f} C after {cfg.cooldown_timeout_s:g} s",
                hint="improve cooling or raise the target",
            )
        say(f"cooling down: {now_c:.1f} C > {target:g} C, waited {waited:.0f} s")
        time.sleep(min(1.0, max(0.1, cfg.sample_interval_s)))


def _sample_index(chunks: list[tuple[int, float]] | None, t: float) -> int | None:
    """The latency sample being measured at time t (seconds since the measured part began), from chunk bounds."""
    if not chunks or t < 0:
        return None
    for (i0, t0), (i1, t1) in itertools.pairwise(chunks):
        if t0 <= t <= t1:
            return int(i0 + (i1 - i0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0))
    return chunks[-1][0]


def _thermal_section(start, end, sampler, m: Measurement, limit_c, limit_source, cooldown, lat) -> dict:
    timeline = []
    for p in sampler.timeline:
        t = p["t_s"] - m.begin_perf_s
        timeline.append({**p, "t_s": round(t, 4), "sample_index": _sample_index(m.chunks, t)})
    temps = [p["max_c"] for p in timeline if p["max_c"] is not None]
    temps += [x for x in (start.max_c(), end.max_c()) if x is not None]
    on_measured = any(set(p.get("sampler_cpus") or []) & sampler.measured for p in timeline)
    n = len(m.samples_ns)
    tenth = n // 10
    drift = None
    if tenth >= 10:
        first, last = float(np.median(m.samples_ns[:tenth])), float(np.median(m.samples_ns[-tenth:]))
        drift = round((last - first) / first * 100.0, 2) if first else None
    reasons = throttle_reasons(end, start, sorted(sampler.measured) or None)
    throttled = bool(sampler.throttle_started_s is not None or reasons)
    available = start.available or end.available or any(p["max_c"] is not None for p in timeline)
    max_c = max(temps) if temps else None
    return {
        "available": available,
        "start_c": start.max_c(),
        "max_c": max_c,
        "end_c": end.max_c(),
        "limit_c": limit_c,
        "limit_source": limit_source,
        "headroom_c": round(limit_c - max_c, 2) if limit_c is not None and max_c is not None else None,
        "throttled": throttled if available or reasons else None,
        "throttle_started_s": round(sampler.throttle_started_s - m.begin_perf_s, 4)
        if sampler.throttle_started_s is not None
        else None,
        "throttle_reasons": sampler.throttle_why or reasons,
        "latency_drift_pct": drift,
        "zones": [
            {
                "name": z.name,
                "type": z.type,
                "start_c": z.temp_c,
                "end_c": next((e.temp_c for e in end.zones if e.name == z.name), None),
                "trips": [{"type": t.type, "temp_c": t.temp_c, "hysteresis_c": t.hysteresis_c} for t in z.trips],
            }
            for z in start.zones
        ],
        "firmware_throttled": end.throttled,
        "sensors_skipped": start.skipped,
        "cooldown": cooldown,
        "sampler_warning": sampler.warning,
        "sampler": {
            "tid": sampler.tid,
            "cpus": sampler.cpus,
            "interval_s": sampler.interval_s,
            "on_measured_cpu": on_measured,
            "points": len(timeline),
        },
        "timeline": timeline,
    }


def _power_section(start, sampler, m: Measurement) -> dict:
    rail = pick_rail(start.rails)
    watts = [p["power_w"] for p in sampler.timeline if p.get("power_w") is not None]
    if rail is None or not watts:
        return {"available": False, "rail": None, "avg_w": None, "energy_per_inference_uj": None}
    avg = float(np.mean(watts))
    n = len(m.samples_ns)
    return {
        "available": True,
        "rail": f"{rail.label} ({rail.source})",
        "avg_w": round(avg, 4),
        "energy_per_inference_uj": round(avg * m.wall_s / n * 1e6, 3) if n else None,
        "note": "the board's own rail: whole-board power unless the rail says otherwise, not the accelerator alone",
    }


def env_live(r: dict) -> bool:
    return not (r.get("environment") or {}).get("measured_on")


def _precision(path) -> str:
    """From the manifest naming convention where we can tell; the manifest itself says for reference models."""
    name = path.stem.lower()
    for p in ("int8", "fp32", "fp16"):
        if p in name:
            return p
    return "unknown"


# ---------------------------------------------------------------------------------------------------------- report
def format_report(r: dict) -> str:
    lat, b, cfg = r["latency_us"], r["backend"], r["config"]
    where = b["device"] + (f", delegate {b['delegate']}" if b["delegate"] else "")
    if b["details"].get("inference_precision"):
        where += f" ({b['details']['inference_precision']})"
    setup = [f"{cfg['threads']} thread(s)" if cfg["threads"] else "backend's threads"]
    setup.append(f"pinned to CPU {format_cpu_list(cfg['cpus'])}" if cfg["cpus"] else "not pinned")
    if cfg["rt_priority"]:
        setup.append(f"SCHED_FIFO {cfg['rt_priority']}")
    if cfg["mlock"]:
        setup.append("memory locked")
    for s in cfg["stress"]:
        setup.append(f"{s['kind']} stress on CPU {format_cpu_list(s['cpus'])} ({s['tool']})")
    lines = [
        f"model        {r['model']['path']}  ({r['model']['format']}, {r['model']['precision']})",
        f"backend      {b['name']} {b['version']} on {where}"
        + (f"  FALLBACK to CPU: {b['fallback_reason']}" if b["fallback"] else ""),
        f"setup        {', '.join(setup)}",
        "latency us   "
        + "  ".join(f"{k} {lat[key]:.1f}" for k, key in SHOWN)
        + f"   mean {lat['mean']:.1f} ± {lat['std']:.1f}",
        f"jitter us    p99-p50 {r['jitter_us']['p99_minus_p50']:.1f}   max-min {r['jitter_us']['max_minus_min']:.1f}",
        f"throughput   {r['throughput_ips']:,.0f} inferences/s, {lat['count']:,} timed in {r['wall_s']:.2f} s "
        f"(after {cfg['warmup']} warm-up); timer overhead {r['quality']['timer_overhead_ns']} ns",
    ]
    pin = r["pinning"]
    if pin["requested"]:
        off = [t for t in pin["threads"] if not set(t["cpus"]) <= set(pin["requested"])]
        strays = ", ".join("{}({}) on {}".format(t["name"], t["tid"], format_cpu_list(t["cpus"])) for t in off)
        if pin["all_threads_pinned"]:
            lines.append(f"pinning      all {len(pin['threads'])} threads on CPU {format_cpu_list(pin['requested'])}")
        else:
            lines.append(f"pinning      NOT all pinned: {strays}")
    inter = r["interference"]
    per_cpu = []
    if inter["interrupts_per_cpu"] is None:
        per_cpu.append("interrupts unknown (no /proc/interrupts to read)")
    else:
        for cpu, rows in inter["interrupts_per_cpu"].items():
            top = ", ".join(f"{x['count']} {x['label']}" for x in rows[:4]) or "no interrupts"
            per_cpu.append(f"CPU{cpu}: {top}")
    lines.append(f"interference {'; '.join(per_cpu)}")
    mig = inter["migrations"]
    wait = inter.get("runqueue_wait_share")
    lines.append(
        f"             {inter['context_switches_involuntary']} involuntary context switches, "
        f"{'?' if mig is None else mig} migrations, {inter['page_faults_major']} major page faults"
        + (f", waited {wait:.1%} of the run for the CPU" if wait is not None else "")
    )
    pl = r.get("platform_latency")
    if pl:
        lines.append(
            f"platform     cyclictest on CPU {format_cpu_list(pl['cpus'])}: min {pl['min_us']} avg {pl['avg_us']:.0f} "
            f"max {pl['max_us']} us ({pl['duration_s']} s, SCHED_FIFO {pl['priority']})"
        )
    t = r["thermal"]
    drift = t.get("latency_drift_pct")
    drift_txt = f"; latency drift first->last tenth {drift:+.1f}%" if drift is not None else ""
    if t["available"]:
        head = (
            f"headroom {t['headroom_c']:.1f} C to {t['limit_c']:g} C ({t['limit_source']})"
            if t["headroom_c"] is not None
            else "no limit known"
        )
        thr = (
            "THROTTLED"
            + (f" from {t['throttle_started_s']:.1f} s" if t["throttle_started_s"] is not None else "")
            + (f" ({'; '.join(t['throttle_reasons'])})" if t["throttle_reasons"] else "")
            if t["throttled"]
            else "not throttled"
        )

        def c(v):
            return f"{v:.1f} C" if v is not None else "?"

        temps = f"start {c(t['start_c'])}, max {c(t['max_c'])}, end {c(t['end_c'])}"
        lines.append(f"thermal      {temps}; {head}; {thr}{drift_txt}")
    else:
        where = "this machine" if env_live(r) else f"the tree {r['environment']['sysroot']}"
        lines.append(f"thermal      no thermal sensors in {where}{drift_txt}")
    pw = r.get("power") or {}
    if pw.get("available"):
        lines.append(
            f"power        {pw['avg_w']:.2f} W on {pw['rail']}: {pw['energy_per_inference_uj']:.1f} uJ per inference"
        )
    if r.get("aborted"):
        lines.append(f"ABORTED      {r['aborted']['reason']} at {r['aborted']['at_s']:.1f} s: partial result")
    env = r.get("environment") or {}
    if env.get("measured_on"):
        lines.append(
            f"observed     {env.get('board') or 'unknown board'} (kernel {env.get('kernel') or '?'}) from the tree "
            f"{env['sysroot']}; the model ran on this machine (kernel {env['measured_on']['kernel']})"
        )
    q = r["quality"]
    verdict = {True: "UNSTABLE", False: "stable", None: "stability unknown"}[q["unstable"]]
    lines.append(f"quality      {verdict}; percentiles: nearest rank")
    lines += [f"warning      {w}" for w in q["warnings"]]
    return "\n".join(lines) + "\n"
