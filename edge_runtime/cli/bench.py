"""`edge-runtime bench`: measure latency and jitter on pinned CPUs, with the interference that caused them.

Builds a `BenchRequest` from the flags (program/bench_flags.py), runs `measure.bench.run_bench`, writes the outputs,
and prints the text report (program/bench_text.py).
"""

from __future__ import annotations

import sys
import warnings

import numpy as np

from edge_runtime.cli.common import load_inputs, sysroot
from edge_runtime.errors import EdgeRuntimeError, UsageError
from edge_runtime.files.outputs import write_output
from edge_runtime.program.args import PROG, plan_outputs
from edge_runtime.program.bench_flags import add_bench_arguments, input_paths, request_from_args
from edge_runtime.program.bench_text import format_report


def add_arguments(p) -> None:
    add_bench_arguments(p)


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
    if not aborted and stop.signum:  # a signal while profiling ops (bench --ops): the timed result is whole
        code = 128 + stop.signum
    _write_outputs(outs, doc, bench, hdr_log_text)
    if not on_stdout:  # standard output holds the one data stream asked for, or the report for people
        sys.stdout.write(format_report(doc))
        if args.histogram is not None:
            sys.stdout.write(cyclictest_histogram(bench.samples_ns, args.histogram or None))
    if aborted and (stop.signum or on_stdout):
        print(f"{PROG}: {aborted['reason']}: partial result written", file=sys.stderr)
    elif stop.signum:
        why = (doc.get("ops") or {}).get("error", "interrupted")
        print(f"{PROG}: {why}: the timed result written", file=sys.stderr)
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
