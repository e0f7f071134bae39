"""`edge-bench run CAMPAIGN.toml [--store F] [--json F] [--html F] [--md F] [--csv F] [--junit F]`: a campaign,
interleaved, every run stored and checked against its SLOs (exit 1 on a miss). `edge-bench run --target URL --model
PATH [bench options] [--html F]`: one bench on a target, printed as `edge-runtime bench` prints it, with the link it
crossed. Both forms are parsed here; a campaign is run by run_campaign.py."""

from __future__ import annotations

import os
import sys

from bench.cli.common import (
    add_store,
    add_target_options,
    check_reconnect,
    open_store,
    progress_printer,
    say_written,
    token,
)
from bench.cli.flags import header_flags, slo_flags
from bench.slo import nothing_succeeded, verdict_lines
from edge_runtime.errors import UsageError, UserError
from edge_runtime.program.args import Parser, integer, path_arg

# Flags of `edge-runtime bench` that name files or facts of the machine that runs the command, not of the board.
NOT_REMOTE = {
    "input": "--input files are not sent to boards yet (the board uses seeded random inputs)",
    "hdr_log": "--hdr-log needs every sample, which stays on the board (the result carries the histogram)",
    "histogram": "--histogram needs every sample, which stays on the board (the result carries histogram_us)",
}


# Bench flags that only a board can honour (a server runs on its own terms).
BOARD_ONLY = ("cpus", "threads", "backend", "device", "delegate", "rt_priority", "mlock", "stress", "platform_latency",
              "thermal_limit", "cooldown_to")  # fmt: skip


USAGE = (
    "%(prog)s CAMPAIGN.toml [--store F] [--html F] [--md F] [--csv F] [--junit F] [--json [F]] [--parallel N]\n"
    "       %(prog)s --target URL --model PATH [--slo KEY=VALUE] [--store F] [--html F] [--json [F]] [bench options]"
)


def add_arguments(p) -> None:
    """What `edge-bench run --help` shows: both forms, the campaign file and every report flag (issue 25: the help
    showed neither the CAMPAIGN argument nor --md/--junit/--csv). `parse` reads the words itself, in two steps."""
    p.usage = USAGE
    p.add_argument(
        "campaign",
        nargs="?",
        metavar="CAMPAIGN.toml",
        help="a campaign file: targets, models, scenarios, repetitions, SLOs (campaigns/*.toml)",
    )
    p.add_argument("--parallel", metavar="N", help="a campaign: at most N boards at once of a target that stands for "
                   "many (labgrid://?TAG=VALUE&places=all; default 4)")  # fmt: skip
    reports = p.add_argument_group("reports (each says where it wrote; a one-off run takes --html and --json)")
    _add_first(p, reports)
    reports.add_argument("--md", metavar="FILE", help="a campaign: Markdown (tables, SLO verdicts), for a pull request")
    reports.add_argument("--csv", metavar="FILE", help="a campaign: one row per run")
    reports.add_argument("--junit", metavar="FILE", help="a campaign: JUnit XML, one test case per SLO check, for CI")
    reports.add_argument("--json", nargs="?", const="-", metavar="FILE",
                         help="the runs (a one-off: its record) as JSON; no FILE: standard output")  # fmt: skip


def _add_first(p, reports) -> None:
    """The flags `parse` reads first (the one-off's target options, --html, the store); the rest are edge-runtime
    bench's, or a campaign's report flags."""
    p.add_argument("--target", metavar="URL", help="one-off: tcp://HOST:PORT, serial:///dev/ttyUSB0?baud=921600, "
                   "local:, kserve+http://HOST:PORT/MODEL ... (edge-bench targets --schemes)")  # fmt: skip
    p.add_argument("--model", type=path_arg, metavar="PATH", help="one-off: the model file on this host (uploaded by "
                   "hash)")  # fmt: skip
    reports.add_argument("--html", type=path_arg, metavar="FILE",
                         help="one self-contained HTML file with plots (matplotlib)")  # fmt: skip
    p.add_argument(
        "--slo",
        action="append",
        metavar="KEY=VALUE",
        help="one-off form: p99=10ms, p50=800us, max=..., error_budget=0.001 (repeatable; exit 1 on a miss)",
    )
    p.add_argument(
        "--concurrency",
        type=integer(1, 256),
        metavar="N",
        help="a server target: queries in flight at once (closed loop: N workers; open loop: N connections)",
    )
    p.add_argument(
        "--ops",
        action="count",
        help="a board: after the timed run, profile the model once more and give the result an ops section (where "
        "each op ran, its time, the verdict: edge-runtime ops); the reports draw it",
    )
    p.add_argument(
        "--header",
        action="append",
        metavar="'NAME: VALUE'",
        help="a server target: an HTTP/gRPC header, e.g. an access token (repeatable; ${VAR} reads the environment)",
    )
    add_target_options(p)
    add_store(p)
    p.epilog = (
        "Every other flag of the one-off form is edge-runtime bench's (--cpus, --iterations, --duration, --scenario, "
        "--rate ...). A server target (kserve+http://HOST:PORT/MODEL) names its model: --model is then optional "
        "(given, its hash ties the run to a board's runs of the same file)."
    )


def parse(argv: list[str]):
    """Two steps: the target options here, every bench option by edge-runtime bench's own parser (`args.rest`, read in
    `run`). `args.json`: where --json sends the result, as the program's check of a closed stdout wants to know."""
    first = Parser(prog="edge-bench run", add_help=False)
    _add_first(first, first)
    args, rest = first.parse_known_args(argv)
    # A campaign is the one positional; bench options keep theirs for the second parser (`--cpus 1`).
    args.campaign = rest.pop(0) if rest and not rest[0].startswith("-") and args.target is None else None
    args.rest = rest
    args.json = _json_dest(rest)
    return args


def _json_dest(rest: list[str]) -> str | None:
    """--json FILE, --json=FILE or --json alone (stdout: "-") among the words left to the second parser."""
    for i, word in enumerate(rest):
        if word.startswith("--json="):
            return word.partition("=")[2]
        if word == "--json":
            return rest[i + 1] if i + 1 < len(rest) and not rest[i + 1].startswith("-") else "-"
    return None


def run(args) -> int:
    from bench.campaign.execute import NotStarted, RunKey, execute
    from bench.targets import TargetOptions

    if args.campaign is not None:
        from bench.cli.run_campaign import run_campaign

        return run_campaign(args)
    if any(w == "--parallel" or w.startswith("--parallel=") for w in args.rest):
        raise UsageError("--parallel goes with a campaign (a target standing for many boards); a one-off run is one")
    cls, bargs, store, outs, request, slo = _one_off(args)
    # A short name and the model's (a server's URL names it), not the URL with its options (issue 25); the URL is kept
    # whole as the run's target_url.
    model_name = os.path.basename(str(args.model).rstrip("/")) or str(args.model)
    key = RunKey(cls.short_name(args.target), args.target, scenario_label(request, bargs), model_name=model_name)
    say, done = progress_printer()
    secret = token(args) if "token" in cls.info.takes else None
    options = TargetOptions(token=secret, reconnect_for=args.reconnect_for, headers=header_flags(args.header), log=say)
    target = cls(args.target, options)

    def interrupted(text: str) -> None:
        print(f"edge-bench: interrupted: {text}", file=sys.stderr)

    try:  # any TargetError: main() says it in one line, exit 2 for the user's mistakes, else 1
        with target:
            try:
                kept = execute(target, request, store, key, slo=slo, progress=say, keep_partial=True,
                               also_keep=_outputs(outs, args.store), stopping=done, recovering=interrupted)  # fmt: skip
            finally:
                done()
    except NotStarted as err:  # Ctrl-C, and nothing measured to keep
        print(f"edge-bench: {err.text}", file=sys.stderr)
        return 128 + err.signum
    return _print_one_off(kept, outs, args, cls, store)


def _one_off(args):
    """The one-off form's checks, before anything runs: the target and its flags, the model, the bench's own flags,
    the store, the outputs; then the request and the SLO. (class, bench args, store, outputs, request, SLO)"""
    from bench.report import html
    from bench.targets import registry
    from edge_runtime.program import bench_flags
    from edge_runtime.program.args import plan_outputs

    cls = registry.check(args.target) if args.target else None
    if cls is None:  # neither form: both are said (the campaign's was the one nobody found, issue 25)
        raise UsageError("give a campaign (edge-bench run CAMPAIGN.toml) or one target and model (--target URL "
                         "--model PATH)", hint="see 'edge-bench run --help'")  # fmt: skip
    if not (args.model or cls.named_model(args.target)):
        raise UsageError(f"--target {args.target}: give --model PATH (the model file on this host)")
    check_target_flags(cls, args)
    if args.model:  # what the path is, as `edge-runtime run` says it (a directory or a fifo was "missing" on a board)
        from edge_runtime.files.inputs import check_input

        check_input(args.model, "--model", error=UsageError)
    check_reconnect(args.reconnect_for)
    bp = Parser(prog="edge-bench run")
    bench_flags.add_bench_arguments(bp)
    args.model = args.model or cls.named_model(args.target)  # a server's URL names the model; no file on this host
    bargs = bp.parse_args([args.model, *args.rest])
    check_bench_flags(cls, bargs)
    check_ops(cls, args, bargs.device)
    preflight(cls, args.target, bargs)
    store = open_store(args, create=True)  # a store that cannot be used is an error before the run, not after it
    outs = plan_outputs(
        [("--json", bargs.json), ("--prom", bargs.prom), ("--html", args.html)],
        [*bench_flags.input_paths(bargs), ("the store", args.store)],
    )
    if "--html" in outs:
        html.require()
    request = bench_flags.request_from_args(bargs)
    if args.concurrency:
        from dataclasses import replace

        request = replace(request, concurrency=args.concurrency).validate()
    if args.ops:
        from dataclasses import replace

        request = replace(request, ops=True).validate()
    return cls, bargs, store, outs, request, slo_flags(args.slo)


def _outputs(outs, store_path: str):
    """The one-off's --prom and --json, written in the sink: before the board is told it may forget the result."""
    from edge_runtime.files.outputs import write_json, write_output

    def also_keep(kept) -> None:
        if "--prom" in outs:
            from edge_runtime.files.prom import textfile

            write_output(outs["--prom"], textfile(kept.doc))
        if "--json" in outs:  # the record, with where it is kept (a reader of results keeps unknown keys aside)
            write_json({**kept.doc, "store": store_path, "run": kept.store_id}, outs["--json"])

    return also_keep


def _print_one_off(kept, outs, args, cls, store) -> int:
    """The run as `edge-runtime bench` prints it (a server's as a server's), the link it crossed, the SLO verdict; the
    exit code: 128 + N after signal N, 1 for a run cut short or an SLO missed."""
    from bench.report import html
    from edge_runtime.files.outputs import write_output

    got = kept.got
    if "--html" in outs:  # the run as `edge-bench report ID --html` shows it
        stored = [store.run(got.store_id)]
        write_output(outs["--html"], html.render_stored(f"edge-bench run {args.target}", stored, "a one-off run"))
    store.close()
    doc = got.record()
    for w in got.warnings:
        print(f"edge-bench: warning: {w}", file=sys.stderr)
    print(f"edge-bench: stored as run {got.store_id} in {args.store}", file=sys.stderr)
    say_written(outs)
    on_stdout = any(outs[f].is_stdout for f in ("--json", "--html") if f in outs)
    if not on_stdout:
        from bench.report import gpu_text, server_text
        from edge_runtime.program.bench_text import format_report

        if doc.get("firmware"):  # MLPerf Tiny firmware: the device's own figures (no percentiles to print)
            from bench.report.firmware import one_run_text

            sys.stdout.write(one_run_text(doc))
        else:  # a board's report carries its ops section's lines (bench --ops); a server's and firmware's have none
            sys.stdout.write(server_text(doc) if cls.info.kind == "server" else format_report(doc))
        if doc.get("gpu"):
            sys.stdout.write(gpu_text(doc["gpu"]))
        if got.link:
            sys.stdout.write(format_link(args.target, got.link, got.rerun_after_restart))
        for line in verdict_lines(kept.slo):
            sys.stdout.write(line + "\n")
    if got.stopped_by is not None:
        return 128 + got.stopped_by
    if kept.stopped_by is not None:
        return 128 + kept.stopped_by
    missed = kept.slo is not None and not kept.slo["pass"]
    failed = nothing_succeeded(doc)
    if failed:
        print(f"edge-bench: {failed}", file=sys.stderr)
    return 1 if doc.get("aborted") or missed or failed else 0


def check_target_flags(cls, args) -> None:
    """--concurrency and --header go with a target that takes them (a server: a board runs one query at a time)."""
    from bench.targets import registry

    flags = {"--concurrency": ("concurrency", args.concurrency), "--header": ("headers", args.header)}
    for flag, (option, given) in flags.items():
        if given and option not in cls.info.takes:
            forms = ", ".join(registry.summaries(takes=option))
            raise UsageError(f"{flag} goes with a server target ({forms}): "
                             + ("a board runs one query at a time" if cls.info.kind == "board" else
                                f"{args.target} takes no {option}"))  # fmt: skip


def check_ops(cls, args, device: str | None) -> None:
    """--ops given once, to a target that can profile (a board: local:, an agent, a labgrid place); one line
    otherwise, before the store or the target is touched."""
    if not args.ops:
        return
    if args.ops > 1:
        raise UsageError("--ops is given twice")
    why = cls.ops_refusal(args.target, device=device)
    if why is not None:
        raise UsageError(f"--ops: {args.target}: {why}")


def check_bench_flags(cls, bargs) -> None:
    """edge-runtime bench's flags that mean nothing for a target, or for this kind of target."""
    for key, why in NOT_REMOTE.items():
        if getattr(bargs, key) is not None:
            raise UsageError(why)
    if cls.info.kind == "server":
        board_only = [f"--{k.replace('_', '-')}" for k in BOARD_ONLY if getattr(bargs, k, None)]
        if board_only:
            raise UsageError(f"{board_only[0]} is a board's option: a server target runs on its server's terms")
    scenario = bargs.scenario or "single-stream"
    if cls.info.scenarios is not None and scenario not in cls.info.scenarios:
        raise UsageError(f"--scenario {scenario}: this kind of target runs {', '.join(sorted(cls.info.scenarios))} "
                         f"({cls.info.summary})")  # fmt: skip
    if bargs.sysroot != "/":
        raise UsageError("--sysroot: a board reads its own system; the option has no meaning for a target")
    if bargs.cpus == "board":
        raise UsageError("--cpus board: name the CPUs (see the board's profile in `edge-bench targets URL`)")


def preflight(cls, url: str, bargs) -> None:
    """What the target refuses before anything runs (local: a backend, CPUs or a GPU this machine lacks), in the words
    `edge-bench targets URL` says it with (issue 25: targets passed what run refused, and they said it differently).
    A malformed --cpus is left to the bench's own check, which names the flag."""
    from edge_runtime.system.cpulist import parse_cpu_list

    try:
        cpus = tuple(parse_cpu_list(bargs.cpus)) if bargs.cpus else None
    except ValueError:
        cpus = None
    try:
        cls.preflight(url, backend=bargs.backend, cpus=cpus)
    except UserError as err:
        raise UserError(f"{url}: {err.one_line()}") from None


def scenario_label(request, bargs) -> str:
    """The one-off run's scenario as the store and reports name it (as a campaign's would be)."""
    from bench.scenarios import Scenario
    from edge_runtime.measure.request import SCENARIO_KEYS

    kind = request.scenario or "single-stream"
    fields = {k: getattr(request, k) for k in SCENARIO_KEYS[kind]}
    return Scenario(kind, arrivals=bargs.arrivals, concurrency=request.concurrency, **fields).label


def format_link(url: str, link: dict, rerun: bool) -> str:
    from bench.targets.agent import after_stalls

    rtt = f"rtt {link['rtt_ms']:.1f} ms" if link.get("rtt_ms") is not None else "rtt ?"
    if link.get("board_busy_ms") is not None:  # the board's time to answer, apart from the link's round trip
        rtt += f", board busy {link['board_busy_ms']:.1f} ms per request"
    text = (
        f"link         {url}: {link.get('frames_out', 0) + link.get('frames_in', 0):,} frames, "
        f"{link.get('bytes_out', 0) + link.get('bytes_in', 0):,} bytes, {link.get('retransmissions', 0)} "
        f"retransmitted{after_stalls(link)}, {link.get('crc_errors', 0)} CRC errors, {link.get('resyncs', 0)} resyncs, "
        f"{link.get('reconnects', 0)} reconnects, {rtt}"
    )
    if rerun:
        text += "\n             the agent restarted during the run: this result is from running it again"
    return text + "\n"
