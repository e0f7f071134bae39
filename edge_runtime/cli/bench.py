"""`edge-runtime bench`: measure latency and jitter on pinned CPUs, with the interference that caused them.

Builds a `BenchRequest` from the flags, runs `measure.bench.run_bench`, writes the outputs, and renders the text
report (the one place a result is turned into words for people).
"""

from __future__ import annotations

import sys
import warnings

import numpy as np

from edge_runtime.cli.common import add_model_options, input_paths, load_inputs, load_kwargs, sysroot
from edge_runtime.cli.scenarios import add_scenario_arguments, scenario_fields, scenario_text
from edge_runtime.errors import EdgeRuntimeError, UsageError
from edge_runtime.files.outputs import write_output
from edge_runtime.limits import MAX_DURATION_S, MAX_WARMUP, MAX_WARMUP_S
from edge_runtime.measure.request import MAX_COOLDOWN_TIMEOUT_S, PLATFORM_LATENCY_S, SAMPLE_INTERVAL_S
from edge_runtime.program.args import (
    PROG,
    add_debug,
    add_json,
    add_sysroot,
    celsius,
    integer,
    path_arg,
    plan_outputs,
    real,
    samples_bound,
)
from edge_runtime.system.cpulist import format_cpu_list

SHOWN = [("min", "min"), ("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p99.9", "p999"), ("p99.99", "p9999"),
         ("max", "max")]  # fmt: skip


def add_arguments(p) -> None:
    add_model_options(p)
    p.add_argument("--rt-priority", type=integer(1, 99), metavar="P", help="SCHED_FIFO priority (1-99) for all threads")
    p.add_argument("--mlock", action="store_true", help="lock all memory (mlockall) for the run")
    p.add_argument(
        "--warmup", type=integer(0, MAX_WARMUP), default=50, metavar="N", help="untimed calls first (default 50)"
    )
    p.add_argument(
        "--warmup-time",
        type=real(0.0, MAX_WARMUP_S, "seconds"),
        metavar="SECONDS",
        help="warm up for this long instead of --warmup",
    )
    length = p.add_mutually_exclusive_group()
    length.add_argument("--iterations", type=integer(1, samples_bound), metavar="N", help="timed calls (default 1000)")
    length.add_argument(
        "--duration",
        type=real(0.0, MAX_DURATION_S, "seconds", low_open=True, why=" (7 days)"),
        metavar="SECONDS",
        help="time calls for this long instead",
    )
    add_scenario_arguments(p)
    p.add_argument(
        "--stress",
        action="append",
        metavar="KIND:CPUS",
        help="co-runner on other CPUs during the run: cpu:LIST or memory:LIST (repeatable)",
    )
    p.add_argument(
        "--platform-latency",
        type=real(*PLATFORM_LATENCY_S, "seconds", why=" (cyclictest runs whole seconds, at least 1)"),
        nargs="?",
        const=3.0,
        metavar="SECONDS",
        help="run cyclictest on the same CPUs first (default 3 s) and report it beside the model",
    )
    p.add_argument(
        "--histogram",
        type=integer(0, 100_000),
        nargs="?",
        const=0,
        metavar="BUCKETS",
        help="print a histogram in cyclictest's layout (1 us buckets)",
    )
    p.add_argument("--hdr-log", type=path_arg, metavar="FILE", help="write an HdrHistogram interval log (values in ns)")
    p.add_argument(
        "--thermal-limit",
        type=celsius,
        metavar="C",
        help="abort above this temperature (default: board profile, else lowest passive/critical trip)",
    )
    p.add_argument("--cooldown-to", type=celsius, metavar="C", help="wait until the board is below C before measuring")
    p.add_argument(
        "--cooldown-timeout",
        type=real(0.0, MAX_COOLDOWN_TIMEOUT_S, "seconds"),
        default=600.0,
        metavar="SECONDS",
        help="give up waiting for --cooldown-to after this long (default 600; exit 1)",
    )
    p.add_argument(
        "--sample-interval",
        type=real(*SAMPLE_INTERVAL_S, "seconds"),
        default=0.25,
        metavar="SECONDS",
        help="thermal/frequency/power sampling period during the run (default 0.25)",
    )
    p.add_argument(
        "--prom", type=path_arg, metavar="FILE", help="also write the result as a Prometheus textfile (node_exporter)"
    )
    add_sysroot(p, "read the observed system (/proc, /sys) below DIR (default /); pinning acts on this process")
    add_json(p)
    add_debug(p)


def request_from_args(args):
    """The flags as a BenchRequest: what the run is, as data (the agent sends the same)."""
    from edge_runtime.measure.corunners import StressSpec
    from edge_runtime.measure.request import BenchRequest

    kw = load_kwargs(args)  # the same names as the request's fields
    return BenchRequest(
        model=args.model,
        **{**kw, "cpus": tuple(kw["cpus"]) if kw["cpus"] else None},
        rt_priority=args.rt_priority,
        mlock=args.mlock,
        warmup=args.warmup,
        warmup_s=args.warmup_time,
        iterations=args.iterations,
        duration_s=args.duration,
        stress=tuple(StressSpec.parse(s) for s in args.stress or []),
        platform_latency_s=args.platform_latency,
        seed=args.seed,
        thermal_limit_c=args.thermal_limit,
        cooldown_to_c=args.cooldown_to,
        cooldown_timeout_s=args.cooldown_timeout,
        sample_interval_s=args.sample_interval,
        **scenario_fields(args),
    )


def run(args) -> int:
    from edge_runtime.measure.bench import NothingMeasured, run_bench
    from edge_runtime.measure.loop import StopRequest, hdr_log_text
    from edge_runtime.program.signals import SIGNALS

    root = sysroot(args.sysroot)
    # Before the run, not after it: a result is never lost to a bad path.
    outs = plan_outputs(
        [("--json", args.json), ("--hdr-log", args.hdr_log), ("--prom", args.prom)], input_paths(args), root=root
    )
    on_stdout = [flag for flag, o in outs.items() if o.is_stdout]
    if on_stdout and args.histogram is not None:
        raise UsageError(f"--histogram prints text, and {on_stdout[0]} - already takes standard output")
    request = request_from_args(args)
    tty = sys.stderr is not None and sys.stderr.isatty()

    def progress(msg: str) -> None:
        print(f"\r{msg}\033[K" if tty else msg, end="" if tty else "\n", file=sys.stderr, flush=True)

    feeds = (lambda session: load_inputs(args.input, session, args.seed)[0]) if args.input else None
    stop = StopRequest()  # a signal during the measured loop ends it at the next chunk, keeping the samples
    SIGNALS.stop = stop
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            bench = run_bench(request, root, feeds=feeds, progress=progress, stop=stop)
    except NothingMeasured as err:  # exit 1 like every failed check, and the --json asked for says why
        if "--json" in outs:
            from edge_runtime.files.outputs import write_json

            write_json(err.result.to_dict(), outs["--json"])
        raise
    finally:
        SIGNALS.stop = None
        if tty:
            print("\r\033[K", end="", file=sys.stderr)
    for w in caught:
        print(f"{PROG}: warning: {w.message}", file=sys.stderr)
    doc = bench.result.to_dict()
    aborted = doc.get("aborted")
    # A run stopped at the thermal limit is a failed check; one stopped by a signal exits as that signal says.
    code = (128 + stop.signum if stop.signum else 1) if aborted else 0
    _write_outputs(outs, doc, bench, hdr_log_text)
    if not on_stdout:  # standard output holds the one data stream asked for, or the report for people
        sys.stdout.write(format_report(doc))
        if args.histogram is not None:
            sys.stdout.write(cyclictest_histogram(bench.samples_ns, args.histogram or None))
    if aborted and (stop.signum or on_stdout):
        print(f"{PROG}: {aborted['reason']}: partial result written", file=sys.stderr)
    return code


def _write_outputs(outs, doc: dict, bench, hdr_log_text) -> None:
    """Write every output that can be written, then report the ones that could not: a full disk under the HDR log
    must not cost the JSON result. Raises the first failure after trying them all."""
    from edge_runtime.files.outputs import write_json

    def prom() -> bytes:
        from edge_runtime.files.prom import textfile

        return textfile(doc)

    def hdr() -> str:
        m = bench.result
        comment = f"edge-runtime bench {m.model.path.rsplit('/', 1)[-1]}"
        return hdr_log_text(bench.samples_ns, bench.start_ns, m.wall_s or 0.0, comment)

    failures = []
    for flag, make in (("--json", None), ("--prom", prom), ("--hdr-log", hdr)):
        if flag not in outs:
            continue
        try:
            if make is None:
                write_json(doc, outs[flag])
            else:
                write_output(outs[flag], make())
        except EdgeRuntimeError as err:
            failures.append(err)
    for err in failures[1:]:
        print(f"{PROG}: error: {err.one_line()}", file=sys.stderr)
    if failures:
        raise failures[0]


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
        per_cpu.append("interrupts unknown (see the warning below)")
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
        live = not (r.get("environment") or {}).get("measured_on")
        where = "this machine" if live else f"the tree {r['environment']['sysroot']}"
        lines.append(f"thermal      no thermal sensors in {where}{drift_txt}")
    pw = r.get("power") or {}
    if pw.get("available"):
        lines.append(
            f"power        {pw['avg_w']:.2f} W on {pw['rail']}: {pw['energy_per_inference_uj']:.1f} uJ per inference"
        )
    sc = r.get("scenario")
    if sc:
        lines.append("scenario     " + scenario_text(sc))
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


def cyclictest_histogram(samples_ns: np.ndarray, buckets: int | None = None) -> str:
    """A text histogram in cyclictest's `-h` layout: 1 us buckets, `%06d %06lu` rows, then the summary lines."""
    us = (np.asarray(samples_ns) // 1000).astype(np.int64)
    top = int(us.max()) + 1
    n = min(top, buckets) if buckets else min(top, 100_000)
    counts = np.bincount(np.minimum(us, n), minlength=n + 1)
    lines = ["# Histogram"]
    lines += [f"{i:06d} {int(c):06d}" for i, c in enumerate(counts[:n])]
    lines.append(f"# Total: {len(us):09d}")
    lines.append(f"# Min Latencies: {int(us.min()):05d}")
    lines.append(f"# Avg Latencies: {round(float(us.mean())):05d}")
    lines.append(f"# Max Latencies: {int(us.max()):05d}")
    lines.append(f"# Histogram Overflows: {int(counts[n]):05d}")
    return "\n".join(lines) + "\n"
