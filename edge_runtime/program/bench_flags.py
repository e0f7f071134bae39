"""A bench request as flags, for `edge-runtime bench` and `edge-bench run`'s one-off form (which parses the same flags
after its own): the model options (shared with `edge-runtime run`), the bench's own, LoadGen's scenarios, the files
they name, and the BenchRequest they make. The text report of a result is bench_text.py's."""

from __future__ import annotations

import argparse
import os
import sys

from edge_runtime.errors import UsageError
from edge_runtime.limits import MAX_DURATION_S, MAX_SEED, MAX_THREADS, MAX_WARMUP, MAX_WARMUP_S
from edge_runtime.program.args import (
    PROG,
    add_debug,
    add_json,
    add_sysroot,
    celsius,
    integer,
    path_arg,
    real,
    samples_bound,
    word,
)


def add_model_options(p: argparse.ArgumentParser) -> None:
    """What `run` and `bench` share: the model, where it runs, its inputs."""
    p.add_argument("model", metavar="MODEL", type=path_arg, help=".onnx, .xml (OpenVINO IR) or .tflite file")
    p.add_argument("--backend", type=word, help="onnxruntime, openvino or tflite (default: from the file type)")
    p.add_argument(
        "--device", type=word, help="onnxruntime: cpu|cuda|tensorrt|qnn|openvino|...; openvino: CPU|GPU|NPU|AUTO"
    )
    p.add_argument(
        "--delegate", metavar="PATH", type=path_arg, help="TFLite external delegate library (e.g. libvx_delegate.so)"
    )
    p.add_argument("--delegate-option", action="append", metavar="K=V", help="option for the delegate (repeatable)")
    p.add_argument(
        "--option",
        action="append",
        metavar="K=V",
        help="backend option: onnxruntime provider option or session.* entry, OpenVINO property, "
        "tflite xnnpack=0 (repeatable)",
    )
    p.add_argument(
        "--allow-fallback",
        action="store_true",
        help="run on CPU when the device or delegate cannot be used (always reported)",
    )
    p.add_argument(
        "--threads",
        type=integer(1, MAX_THREADS),
        metavar="N",
        help="inference threads (default: backend's, or len(--cpus))",
    )
    p.add_argument(
        "--cpus",
        metavar="LIST",
        help="pin the process and all its threads to these CPUs (e.g. 2-3; 'board': the board profile's)",
    )
    p.add_argument(
        "--input", action="append", type=path_arg, metavar="NAME=FILE.npy", help="input from a .npy file (repeatable)"
    )
    p.add_argument("--seed", type=integer(0, MAX_SEED), default=0, help="seed of the random inputs (default 0)")
    p.add_argument(
        "--no-sandbox",
        "--no-isolate",  # the old name: it never meant CPU isolation
        dest="no_sandbox",
        action="store_true",
        help="skip the crash check in a child process (faster; a crashing model then crashes this process)",
    )


def add_bench_arguments(p) -> None:
    """Every flag of `edge-runtime bench` (edge-bench run parses the same after its own)."""
    from edge_runtime.measure.request import MAX_COOLDOWN_TIMEOUT_S, PLATFORM_LATENCY_S, SAMPLE_INTERVAL_S

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
        "--ops",
        action="store_true",
        help="after the timed loop, profile a second session of the model: where each op ran and what it cost "
        "(the result's ops section; see edge-runtime ops)",
    )
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
        ops=True if args.ops else None,  # off is left out of the request (an older agent still reads it)
        **scenario_fields(args),
    )


def add_scenario_arguments(p) -> None:
    p.add_argument(
        "--scenario",
        choices=list(SCENARIO_HELP),
        default="single-stream",
        help="the load, LoadGen's scenarios: " + "; ".join(f"{k} ({v})" for k, v in SCENARIO_HELP.items()),
    )
    p.add_argument(
        "--rate",
        type=real(0.0, 1_000_000.0, "queries/s", low_open=True),
        metavar="QPS",
        help="server and burst: the arrival rate (queries per second)",
    )
    p.add_argument(
        "--samples-per-query",
        type=integer(1, 4096),
        metavar="N",
        help="multi-stream (default 8) and offline (default 1): inferences per query",
    )
    p.add_argument(
        "--interval",
        type=real(0.0, 3.6e6, "ms", low_open=True),
        metavar="MS",
        help="multi-stream: a query every MS milliseconds (default 50)",
    )
    p.add_argument(
        "--burst-on", type=real(0.0, MAX_DURATION_S, "seconds", low_open=True), metavar="S",
        help="burst: seconds of arrivals at --rate (default 1)",
    )  # fmt: skip
    p.add_argument(
        "--burst-off", type=real(0.0, MAX_DURATION_S, "seconds"), metavar="S",
        help="burst: seconds of silence after each burst (default 1)",
    )  # fmt: skip
    p.add_argument(
        "--arrivals", type=path_arg, metavar="FILE",
        help="replay: inter-arrival times in ms, one per line (or a CSV's first column), the first from the start",
    )  # fmt: skip


SCENARIO_HELP = {
    "single-stream": "default: the next query when the last completes",
    "server": "open loop: Poisson arrivals at --rate, latency from each query's intended send time",
    "multi-stream": "a query of --samples-per-query inferences every --interval ms",
    "burst": "Poisson arrivals at --rate for --burst-on s, none for --burst-off s, over and over",
    "replay": "inter-arrival times from --arrivals FILE",
    "offline": "every query at once; the measure is throughput",
}
# flag -> request field
SCENARIO_FLAGS = {
    "--rate": "rate_qps",
    "--samples-per-query": "samples_per_query",
    "--interval": "interval_ms",
    "--burst-on": "burst_on_s",
    "--burst-off": "burst_off_s",
    "--arrivals": "arrivals_ms",
}


def scenario_fields(args) -> dict:
    """The scenario flags as request fields: a flag of another scenario is refused (it would be ignored), a flag the
    scenario needs is asked for by name, the others take LoadGen-like defaults."""
    from edge_runtime.measure.request import SCENARIO_DEFAULTS, SCENARIO_KEYS, SCENARIO_OPTIONAL

    kind = args.scenario
    out: dict = {"scenario": None if kind == "single-stream" else kind}
    for flag, name in SCENARIO_FLAGS.items():
        value = getattr(args, flag[2:].replace("-", "_"))
        kinds = [k for k, keys in SCENARIO_KEYS.items() if name in keys]
        if value is not None and kind not in kinds:
            raise UsageError(f"{flag} goes with --scenario {' or '.join(kinds)}, not {kind}")
        if value is None and kind in kinds:
            value = SCENARIO_DEFAULTS.get((kind, name))
            if value is None and (kind, name) not in SCENARIO_OPTIONAL:
                raise UsageError(f"--scenario {kind} needs {flag}")
        if name == "arrivals_ms" and value is not None:
            from edge_runtime.measure.schedule import read_arrivals

            value = read_arrivals(value, "--arrivals")
        out[name] = value
    return out


def input_paths(args, session=None) -> list[tuple[str, object]]:
    """The files `run`/`bench` read: the model's files, --input files, a delegate given by path."""
    from edge_runtime.runtime.model import model_files

    found: list[tuple[str, object]] = list(model_files(args.model))
    for spec in args.input or []:
        for p in {spec, spec.partition("=")[2] or spec}:
            found.append(("an --input file", p))
    if getattr(args, "delegate", None) and os.sep in args.delegate:
        found.append(("the --delegate library", args.delegate))
    if getattr(args, "arrivals", None):
        found.append(("the --arrivals file", args.arrivals))
    return found


def key_values(pairs: list[str] | None, flag: str) -> dict[str, str]:
    """KEY=VALUE flags as a dict; a key given twice (in any case) is refused, not silently the last one."""
    out: dict[str, str] = {}
    seen: dict[str, str] = {}
    for item in pairs or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} {item!r}: expected KEY=VALUE")
        if key.lower() in seen:
            raise UsageError(f"{flag} {item!r}: {seen[key.lower()]!r} is already given; one value per key")
        seen[key.lower()] = item
        out[key] = value
    return out


def cpus_arg(text: str | None, root=None) -> list[int] | None:
    """A CPU list, or `board`: the detected board profile's CPUs to isolate."""
    if text is None:
        return None
    from edge_runtime.system.cpulist import parse_cpu_list

    if text == "board":
        from edge_runtime.system.boards import detect
        from edge_runtime.system.root import SystemRoot

        root = root or SystemRoot("/")
        board = detect(root)
        where = "this machine" if root.is_live else f"the tree {root.root}"
        if board is None:
            from edge_runtime.system.armcpu import big_cores

            groups = root.cpu_clusters()
            big = big_cores(groups)
            online = set(root.online_cpus())
            chosen = [c for c in (big or ()) if c in online]
            if chosen:  # big.LITTLE without a profile: measure on the big cores, the little ones keep the housekeeping
                from edge_runtime.system.cpulist import format_cpu_list

                print(
                    f"{PROG}: --cpus board: no board profile matches {where}; using its big cores, CPU "
                    f"{format_cpu_list(chosen)} ({next(c.name for c in groups if c.cpus == big)}); the others keep "
                    "the housekeeping",
                    file=sys.stderr,
                )
                return chosen
            raise UsageError(f"--cpus board: no board profile matches {where}", hint="give --cpus LIST")
        chosen = board.suggested_isolated(root.online_cpus())
        if not chosen:
            raise UsageError(
                f"--cpus board: board profile {board.name} isolates CPU {list(board.cpus.isolate)}, none of them "
                f"online on {where}",
                hint="give --cpus LIST",
            )
        return chosen

    try:
        cpus = parse_cpu_list(text)
    except ValueError as err:
        raise UsageError(f"--cpus {text!r}: not a CPU list ({err})", hint="e.g. 2-3 or 1,3") from err
    if not cpus:
        raise UsageError(f"--cpus {text!r}: empty CPU list")
    return cpus


def load_kwargs(args) -> dict:
    """The `load()` arguments that `add_model_options` flags describe."""
    if args.delegate_option and not args.delegate:
        raise UsageError("--delegate-option without --delegate: it would be ignored")
    return {
        "backend": args.backend,
        "device": args.device,
        "delegate": args.delegate,
        "delegate_options": key_values(args.delegate_option, "--delegate-option"),
        "options": key_values(args.option, "--option"),
        "threads": args.threads,
        "cpus": cpus_arg(args.cpus),
        "fallback": args.allow_fallback,
        "sandbox": not args.no_sandbox,
    }
