"""A bench result for people: `format_report`, the text `edge-runtime bench` prints and `edge-bench run` prints for a
board's run (the one place a result is turned into words), and an open-loop scenario's line."""

from __future__ import annotations

from edge_runtime.system.cpulist import format_cpu_list

SHOWN = [("min", "min"), ("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p99.9", "p999"), ("p99.99", "p9999"),
         ("max", "max")]  # fmt: skip


# The samples a percentile needs before it is more than the run's maximum: one beyond it (p99: 100, p99.99: 10,000);
# with fewer it is shown as "-" (the JSON keeps every value).
NEEDS = {"p99": 100, "p99.9": 1_000, "p99.99": 10_000}


def _percentile(lat: dict, label: str, key: str) -> str:
    return "-" if lat.get("count", 0) < NEEDS.get(label, 0) else f"{lat[key]:.1f}"


def format_report(r: dict) -> str:
    lat, b, cfg = r["latency_us"], r["backend"], r["config"]
    where = b["device"] + (f", delegate {b['delegate']}" if b["delegate"] else "")
    if b["details"].get("inference_precision"):
        where += f" ({b['details']['inference_precision']})"
    lines = [
        f"model        {r['model']['path']}  ({r['model']['format']}, {r['model']['precision']})",
        f"backend      {b['name']} {b['version']} on {where}"
        + (f"  FALLBACK to CPU: {b['fallback_reason']}" if b["fallback"] else ""),
        _setup_line(cfg),
        "latency us   "
        + "  ".join(f"{k} {_percentile(lat, k, key)}" for k, key in SHOWN)
        + f"   mean {lat['mean']:.1f} ± {lat['std']:.1f}",
        f"jitter us    p99-p50 {r['jitter_us']['p99_minus_p50']:.1f}   max-min {r['jitter_us']['max_minus_min']:.1f}",
        (
            f"throughput   {r['throughput_ips']:,.0f} samples/s at batch {cfg['batch']} (latency per batch), "
            if (cfg.get("batch") or 1) > 1
            else f"throughput   {r['throughput_ips']:,.0f} inferences/s, "
        )
        + f"{lat['count']:,} timed in {r['wall_s']:.2f} s "
        f"(after {cfg['warmup']} warm-up); timer overhead {r['quality']['timer_overhead_ns']} ns",
        *_pinning_lines(r["pinning"]),
        *_interference_lines(r["interference"]),
    ]
    pl = r.get("platform_latency")
    if pl:
        lines.append(
            f"platform     cyclictest on CPU {format_cpu_list(pl['cpus'])}: min {pl['min_us']} avg {pl['avg_us']:.0f} "
            f"max {pl['max_us']} us ({pl['duration_s']} s, SCHED_FIFO {pl['priority']})"
        )
    lines.append(_thermal_line(r))
    return "\n".join(lines + _tail_lines(r)) + "\n"


def _setup_line(cfg: dict) -> str:
    setup = [f"{cfg['threads']} thread(s)" if cfg["threads"] else "backend's threads"]
    setup.append(f"pinned to CPU {format_cpu_list(cfg['cpus'])}" if cfg["cpus"] else "not pinned")
    if cfg["rt_priority"]:
        setup.append(f"SCHED_FIFO {cfg['rt_priority']}")
    if cfg["mlock"]:
        setup.append("memory locked")
    for s in cfg["stress"]:
        setup.append(f"{s['kind']} stress on CPU {format_cpu_list(s['cpus'])} ({s['tool']})")
    return f"setup        {', '.join(setup)}"


def _pinning_lines(pin: dict) -> list[str]:
    if not pin["requested"]:
        return []
    off = [t for t in pin["threads"] if not set(t["cpus"]) <= set(pin["requested"])]
    strays = ", ".join("{}({}) on {}".format(t["name"], t["tid"], format_cpu_list(t["cpus"])) for t in off)
    if pin["all_threads_pinned"]:
        return [f"pinning      all {len(pin['threads'])} threads on CPU {format_cpu_list(pin['requested'])}"]
    return [f"pinning      NOT all pinned: {strays}"]


def _interference_lines(inter: dict) -> list[str]:
    per_cpu = []
    if inter["interrupts_per_cpu"] is None:
        per_cpu.append("interrupts unknown (see the warning below)")
    else:
        for cpu, rows in inter["interrupts_per_cpu"].items():
            top = ", ".join(f"{x['count']} {x['label']}" for x in rows[:4]) or "no interrupts"
            per_cpu.append(f"CPU{cpu}: {top}")
    mig = inter["migrations"]
    wait = inter.get("runqueue_wait_share")
    return [
        f"interference {'; '.join(per_cpu)}",
        f"             {inter['context_switches_involuntary']} involuntary context switches, "
        f"{'?' if mig is None else mig} migrations, {inter['page_faults_major']} major page faults"
        + (f", waited {wait:.1%} of the run for the CPU" if wait is not None else ""),
    ]


def _thermal_line(r: dict) -> str:
    t = r["thermal"]
    drift = t.get("latency_drift_pct")
    drift_txt = f"; latency drift first->last tenth {drift:+.1f}%" if drift is not None else ""
    if not t["available"]:
        live = not (r.get("environment") or {}).get("measured_on")
        where = "this machine" if live else f"the tree {r['environment']['sysroot']}"
        return f"thermal      no thermal sensors in {where}{drift_txt}"
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
    return f"thermal      {temps}; {head}; {thr}{drift_txt}"


def _tail_lines(r: dict) -> list[str]:
    """Power, the scenario, an abort, a captured tree, the quality verdict and the warnings."""
    lines = []
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
    lines += ops_lines(r.get("ops"))
    q = r["quality"]
    verdict = {True: "UNSTABLE", False: "stable", None: "stability unknown"}[q["unstable"]]
    lines.append(f"quality      {verdict}; percentiles: nearest rank")
    lines += [f"warning      {w}" for w in q["warnings"]]
    return lines


def counted_text(c: dict, none: str = "none") -> str:
    """An ops section's count by type ({count, types}: fallback, copies) in words: "3 (Memcpy 2, Reorder 1)"."""
    if c.get("count") is None:  # an engine that cannot count them (an external LiteRT delegate's copies)
        return "unknown"
    if not c["count"]:
        return none
    return f"{c['count']} ({', '.join(f'{t} {n}' for t, n in c['types'].items())})"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"


def ops_lines(ops: dict | None, slowest: int = 5) -> list[str]:
    """A result's `ops` section (bench --ops) in a few lines: the verdict, partitions, fallback op types, copies, the
    delegated share, the time split with the profiler's cost, and the slowest ops. A section that is not as a board
    writes it (a broken or lying agent) is one line saying so, never a failed report."""
    if not ops:
        return []
    try:
        return _ops_lines(ops, slowest)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        return [f"ops          unreadable ops section ({type(err).__name__}: {err})"]


def _ops_lines(ops: dict, slowest: int) -> list[str]:
    if "error" in ops:
        return [f"ops          {ops['error']}"]
    parts = ", ".join(f"{p['where']} {p['ops']} op{'' if p['ops'] == 1 else 's'}" for p in ops["partitions"]) or "none"
    placed = f"partitions: {parts}; fallback: {counted_text(ops['fallback'])}; copies: {counted_text(ops['copies'])}"
    if ops.get("delegated_share") is not None:
        placed += f"; {_pct(ops['delegated_share'])} of the time on {ops['target']}"
    lines = [f"ops          {ops['verdict']}", f"             {placed}"]
    if ops.get("profiled_us") is None:
        lines.append(f"             per-op times: {ops['time_source']} (no op profiler for this engine)")
        return lines
    cost = ops.get("profiling_overhead_pct")
    lines.append(
        f"             profiled {ops['profiled_us']:.1f} us a run ({ops['runs']} runs) = ops {ops['named_us']:.1f} "
        f"+ overhead {ops['overhead_us']:.1f} us; the profiler's cost on p50 "
        + ("unknown" if cost is None else f"{cost:+.1f}%")
    )
    rows = [o for o in ops["ops"] if o["status"] != "overhead" and o["mean_us"] is not None][:slowest]
    for o in rows:
        lines.append(
            f"  slowest    {o['mean_us']:8.1f} us {_pct(o['share']):>6}  {o['type']:<16} {o['name']} ({o['where']})"
        )
    return lines


def scenario_text(sc: dict) -> str:
    """An open-loop run's scenario section in one line."""
    from edge_runtime.measure.scenario import load_text

    kind = sc.get("kind", "?")
    asked = {
        "server": lambda: f"{sc.get('rate_qps', 0):g}/s Poisson",
        "burst": lambda: f"{sc.get('rate_qps', 0):g}/s for {sc.get('burst_on_s'):g} s, off {sc.get('burst_off_s'):g} s",
        "multi-stream": lambda: f"every {sc.get('interval_ms'):g} ms",
        "replay": lambda: f"{sc.get('arrivals', 0):,} arrivals from a file",
        "offline": lambda: "all at once",
    }.get(kind, lambda: "")()
    spq = sc.get("samples_per_query") or 1
    text = f"{kind}: {sc['queries']:,} queries{f' of {spq} samples' if spq > 1 else ''} ({asked}), "
    since = sc["latency_from"].split(" (")[0]
    since = "the " + since if since.startswith("intended") else since
    text += f"{load_text(sc)}; latency from {since}"
    if sc.get("service_us"):
        err, svc = sc["send_error_us"], sc["service_us"]
        over = f" over {err['queries']:,} queries" if "queries" in err else ""
        text += (f"; from the actual send p50 {svc['p50']:.1f} p99 {svc['p99']:.1f} us; send error p50 {err['p50']} "
                 f"p99 {err['p99']} us{over}")  # fmt: skip
    if sc.get("queries_over_interval"):
        text += f"; {sc['queries_over_interval']:,} queries not done within their interval"
    return text
