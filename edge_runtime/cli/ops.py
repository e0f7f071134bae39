"""`edge-runtime ops`: where each op of a model ran, on which kernel and in which precision, what it cost, and the
verdict on placement (issue 29). The work is edge_runtime/ops/'s; this module is the flags, the outputs and the table.
"""

from __future__ import annotations

import sys
import warnings

from edge_runtime.cli.common import load_inputs
from edge_runtime.program.args import PROG, add_debug, add_json, emit_json, integer, path_arg, plan_outputs
from edge_runtime.program.bench_flags import add_model_options, input_paths, load_kwargs
from edge_runtime.program.bench_text import counted_text

MAX_ITERATIONS = 100_000  # per-op times settle long before; the ORT profiler keeps 1 M events anyway
MAX_WARMUP = 100_000
NAME_WIDTH = 44


def add_arguments(p) -> None:
    add_model_options(p)
    p.add_argument(
        "--iterations",
        type=integer(1, MAX_ITERATIONS),
        default=500,
        metavar="N",
        help="measured runs, for the total and for the per-op times (default 500)",
    )
    p.add_argument(
        "--warmup", type=integer(1, MAX_WARMUP), default=50, metavar="N", help="untimed runs first (default 50)"
    )
    p.add_argument(
        "--chrome-trace",
        type=path_arg,
        metavar="FILE",
        help="write the ops as a Chrome trace (JSON) that Perfetto and chrome://tracing open",
    )
    add_json(p)
    add_debug(p)


def run(args) -> int:
    from edge_runtime.errors import UsageError
    from edge_runtime.files.outputs import write_json
    from edge_runtime.ops.profile import NO_TRACE, engine_for, profile_model
    from edge_runtime.ops.trace import chrome_trace

    # Before the work, not after it: a result is never lost to a bad path.
    outs = plan_outputs([("--json", args.json), ("--chrome-trace", args.chrome_trace)], input_paths(args))
    kwargs = load_kwargs(args)
    engine = engine_for(args.model, kwargs["backend"])  # a model no profiler reads: one line before anything loads
    if args.chrome_trace is not None and engine in NO_TRACE:
        raise UsageError(f"--chrome-trace: {NO_TRACE[engine]}: nothing to trace")
    feeds = (lambda session: load_inputs(args.input, session, args.seed)[0]) if args.input else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = profile_model(
            args.model, iterations=args.iterations, warmup=args.warmup, seed=args.seed, feeds=feeds, **kwargs
        )
    for w in caught:
        print(f"{PROG}: warning: {w.message}", file=sys.stderr)
    if "--chrome-trace" in outs:
        write_json(chrome_trace(report), outs["--chrome-trace"])
    json_on_stdout = emit_json(report.to_dict(), outs)
    trace_on_stdout = "--chrome-trace" in outs and outs["--chrome-trace"].is_stdout
    if not (json_on_stdout or trace_on_stdout):  # stdout holds the one data stream asked for, or the table
        sys.stdout.write(render(report))
    return 0


def _us(value: float | None, missing: str = "-") -> str:
    return missing if value is None else f"{value:.1f}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def table(report) -> list[str]:
    """The ops as aligned text columns; the overhead row last."""
    p99_missing = "n/a" if report.time_source == "profiler" else "-"
    head = ("#", "op", "type", "where", "kernel", "precision", "mean us", "p99 us", "share", "status")
    cells = []
    for i, r in enumerate(report.ops, 1):
        overhead = r.status == "overhead"
        status = f"fused into {_cut(r.fused_into, 24)}" if r.fused_into else r.status
        cells.append(
            (
                "" if overhead else str(i),
                _cut(r.name, NAME_WIDTH),
                r.type,
                r.where,
                r.kernel or "-",
                r.precision or "-",
                _us(r.mean_us),
                _us(r.p99_us, "-" if r.mean_us is None or overhead else p99_missing),
                "-" if r.share is None else f"{100 * r.share:.1f}%",
                status,
            )
        )
    widths = [max(len(h), *(len(c[k]) for c in cells)) if cells else len(h) for k, h in enumerate(head)]
    right = {0, 6, 7, 8}

    def line(row) -> str:
        padded = (c.rjust(w) if k in right else c.ljust(w) for k, (c, w) in enumerate(zip(row, widths, strict=True)))
        return "  ".join(padded).rstrip()

    return [line(head), *(line(c) for c in cells)]


def render(report) -> str:
    e = report.engine
    lines = [
        f"model       {report.model['path']}  ({report.model['format']})",
        f"engine      {e['name']} {e['version']} on {report.device}{'  (FALLBACK to CPU)' if e['fallback'] else ''}; "
        f"{report.runs} profiled runs; per-op times: {report.time_source}",
        "",
        *table(report),
        "",
    ]
    parts = "; ".join(f"{p.where} {p.ops} ops" for p in report.partitions) or "none"
    lines.append(f"partitions  {len(report.partitions)}: {parts}")
    lines.append(f"fallback    {counted_text(report.fallback.to_dict())}")
    lines.append(f"copies      {counted_text(report.copies.to_dict(), '0')}")
    t = report.total_us
    lines.append(f"total       p50 {t['p50']:.1f} us, mean {t['mean']:.1f} us, p99 {t['p99']:.1f} us (profiling off)")
    if report.profiled_us is not None:
        pct = report.profiling_overhead_pct
        lines.append(
            f"profiled    mean {report.profiled_us:.1f} us (p50 {pct:+.0f}% against profiling off) = ops "
            f"{_us(report.named_us)} us + overhead {_us(report.overhead_us)} us"
            + (f"; the engine's own run time {report.engine_us:.1f} us" if report.engine_us is not None else "")
        )
    lines.append(f"verdict     {report.verdict}")
    lines += [f"note        {n}" for n in report.notes]
    return "\n".join(lines) + "\n"
