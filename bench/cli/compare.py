"""`edge-bench compare`: is B slower than A, weighed against the spread between runs (bench/compare.py).

    edge-bench compare RUN RUN                     one run a side (a provisional verdict)
    edge-bench compare --a RUN... --b RUN...       several runs a side, pooled
    edge-bench compare --baseline NAME RUN...      the baseline's run against one run or several

A RUN is an id (`12`), a range (`12-14`), `baseline:NAME`, or a campaign's runs: `campaign:NAME`,
`campaign:NAME/TARGET`, `campaign:NAME/TARGET/MODEL` (its repetitions). Exit 1 on a regression, 2 when the runs
answer different questions (different models, input shapes, boards, scenarios: bench/comparable.py) unless --force;
different backends, devices, threads, precisions or targets compare, and what differs is printed above the table.
"""

from __future__ import annotations

import sys

from bench.cli.common import add_store, open_store, say_written
from bench.compare import RUN_SPREAD_PCT
from edge_runtime.errors import UsageError, UserError
from edge_runtime.program.args import add_json, plan_outputs, real

MAX_RUNS = 1000  # a side: a range typo (1-1000000) is said, not loaded


def add_arguments(p) -> None:
    p.add_argument(
        "runs",
        nargs="*",
        metavar="RUN",
        help="two runs (A then B), or B's runs with --baseline. A RUN is an id (12), a range (12-14), "
        "baseline:NAME or a campaign's repetitions: campaign:NAME[/TARGET[/MODEL]]",
    )
    p.add_argument("--a", nargs="+", metavar="RUN", help="A's runs (the reference), pooled: --a 12 13 14 --b 15 16 17")
    p.add_argument("--b", nargs="+", metavar="RUN", help="B's runs (the candidate), pooled")
    p.add_argument("--baseline", metavar="NAME", help="A is this baseline's run; B is RUN...")
    p.add_argument(
        "--threshold",
        type=real(0.0, 1000.0, "percent"),
        default=5.0,
        metavar="PCT",
        help="a significant slowdown beyond this is a regression (default 5)",
    )
    p.add_argument(
        "--metrics",
        metavar="LIST",
        help="the metrics that gate the verdict, e.g. p50,p99 (p50 p90 p95 p99 p99.9 mean throughput; default: "
        "p50, throughput in a closed loop, p99 and p99.9 where every run holds 1,000 / 10,000 samples)",
    )
    p.add_argument(
        "--run-spread",
        type=real(0.0, 10000.0, "percent"),
        default=RUN_SPREAD_PCT,
        metavar="PCT",
        help="with one run a side, how far identical runs can differ (default 300: 4x, a shared VM; 10 on an "
        "isolated board); only a change beyond it is called; 0: the within-run test alone",
    )
    p.add_argument("--force", action="store_true", help="compare runs of different models, input shapes or boards")
    add_store(p)
    add_json(p)


def _sides(args) -> tuple[list[str], list[str]]:
    if args.a or args.b:
        if args.runs or args.baseline:
            raise UsageError("--a/--b name both sides: give no RUN and no --baseline with them")
        if not (args.a and args.b):
            raise UsageError("--a RUN... needs --b RUN... (and the other way round)")
        return args.a, args.b
    if args.baseline:
        if not args.runs:
            raise UsageError("--baseline NAME takes the RUN (or runs) to compare against it")
        return [f"baseline:{args.baseline}"], args.runs
    if len(args.runs) != 2:
        raise UsageError(f"give two runs (or --a RUN... --b RUN..., or --baseline NAME RUN...), not {len(args.runs)}")
    return args.runs[:1], args.runs[1:]


def _ids(store, ref: str) -> list[str]:
    """One RUN reference -> run references the store reads (ids, or baseline:NAME)."""
    if ref.startswith("campaign:"):
        name, _, rest = ref.removeprefix("campaign:").partition("/")
        target, _, model = rest.partition("/")
        rows = store.db.execute(
            "SELECT id, target, model_name FROM runs WHERE campaign = ? ORDER BY id", (name,)
        ).fetchall()
        if not rows:
            raise UserError(f"{ref}: no runs of campaign {name!r} in {store.path}")
        chosen = [r for r in rows if (not target or r[1] == target) and (not model or r[2] == model)]
        targets = sorted({r[1] for r in rows})
        if not chosen:
            raise UserError(f"{ref}: no such runs (campaign {name!r} has targets {', '.join(targets)})")
        if len({r[1] for r in chosen}) > 1:
            raise UserError(f"{ref}: campaign {name!r} ran targets {', '.join(targets)}: name one (campaign:{name}/"
                            f"{targets[0]})")  # fmt: skip
        return [str(r[0]) for r in chosen]
    first, dash, last = ref.partition("-")
    if dash and first.isdigit() and last.isdigit():
        if not int(first) <= int(last) <= int(first) + MAX_RUNS:
            raise UsageError(f"run range {ref!r}: FIRST-LAST, ascending, at most {MAX_RUNS} runs")
        return [str(i) for i in range(int(first), int(last) + 1)]
    return [ref]


def _load(store, refs: list[str], side: str) -> list:
    runs = [store.run(i) for ref in refs for i in _ids(store, ref)]
    ids = [r.id for r in runs]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:  # the same run counted twice is evidence made up: three copies of one run are not three runs
        raise UsageError(f"{side}: run {twice[0]} is given twice (each run counts once)")
    if len(runs) > MAX_RUNS:
        raise UsageError(f"{side}: {len(runs)} runs; at most {MAX_RUNS} a side")
    return runs


def _alike(runs: list, side: str) -> None:
    """The runs pooled on one side must be one configuration: else the pool answers no question."""
    from bench.comparable import differences, refusals

    for r in runs[1:]:
        why = refusals(runs[0].result, r.result, runs[0].model_name, r.model_name)
        why += [f"{k} {x!r} vs {y!r}" for k, (x, y) in differences(runs[0].result, r.result).items()]
        if why:
            raise UserError(f"{side}: runs {runs[0].id} and {r.id} are not one configuration: {'; '.join(why)}",
                            hint="pool only repetitions of one target")  # fmt: skip


def run(args) -> int:
    from bench.comparable import differences, refusals
    from bench.compare import compare, parse_metrics
    from edge_runtime.files.outputs import write_json

    refs_a, refs_b = _sides(args)
    metrics = parse_metrics(args.metrics) if args.metrics is not None else None
    outs = plan_outputs([("--json", args.json)], [("the store", args.store)])
    with open_store(args) as store:
        a, b = _load(store, refs_a, "A"), _load(store, refs_b, "B")
    ida, idb = {r.id for r in a}, {r.id for r in b}
    if ida & idb and ida != idb:  # the same runs on both sides (a baseline against its own run) change nothing
        raise UsageError(f"run {min(ida & idb)} is on both sides: A and B must be different runs, or the same ones")
    if not args.force:
        _alike(a, "A")
        _alike(b, "B")
    why = refusals(a[0].result, b[0].result, a[0].model_name, b[0].model_name, (a[0].target, b[0].target))
    if why and not args.force:
        raise UsageError(
            f"runs {a[0].id} and {b[0].id} are not comparable: {'; '.join(why)}", hint="--force to compare"
        )
    doc = {
        "schema": "edge-bench/compare/1",
        "a": {**a[0].summary(), "baseline": args.baseline, "runs": [r.id for r in a]},
        "b": {**b[0].summary(), "runs": [r.id for r in b]},
        "not_comparable": why,
        "differs": differences(a[0].result, b[0].result, a[0].target, b[0].target),
        **compare(
            [r.result for r in a],
            [r.result for r in b],
            args.threshold,
            metrics=metrics,
            run_spread_pct=args.run_spread,
        ),
    }
    if "--json" in outs:
        write_json(doc, outs["--json"])
    say_written(outs)
    if not ("--json" in outs and outs["--json"].is_stdout):
        sys.stdout.write(render(doc))
    return 1 if doc["verdict"] == "regression" else 0


def render(doc: dict) -> str:
    a, b = doc["a"], doc["b"]

    def name(r: dict) -> str:
        base = f" (baseline {r['baseline']})" if r.get("baseline") else ""
        runs = r.get("runs") or [r["id"]]
        which = f"run {runs[0]}" if len(runs) == 1 else f"{len(runs)} runs ({', '.join(map(str, runs))})"
        return f"{which}{base}: {r['target']}, {r['model']}, {r['scenario']}"

    lines = [f"A  {name(a)}", f"B  {name(b)}"]
    if doc["differs"]:
        lines.append("differs: " + "; ".join(f"{k} {x} vs {y}" for k, (x, y) in doc["differs"].items()))
    if doc["not_comparable"]:
        lines.append(f"forced: {'; '.join(doc['not_comparable'])}")
    lines.append(f"{'':<14}{'A':>12}{'B':>12}{'change':>10}  {'interval':<20} verdict")
    for key, m in doc["metrics"].items():
        label = ("p99.9" if key == "p999" else key) + ("/s" if key == "throughput" else " us")
        shown = "[{:+.1f}%, {:+.1f}%]".format(*m["interval_pct"]) if m["interval_pct"] else "-"
        lines.append(
            f"{label:<14}{m['a']:>12,.1f}{m['b']:>12,.1f}{m['change_pct']:>+9.1f}%  {shown}".ljust(80)
            + f" {m['verdict']}"
        )
    verdict = doc["verdict"].upper() if doc["verdict"] == "regression" else doc["verdict"]
    runs, samples = doc["runs"], doc["samples"]
    lines.append(f"verdict: {verdict} (threshold {doc['threshold_pct']:g}%; {runs['a']} vs {runs['b']} runs, "
                 f"{samples['a']:,} vs {samples['b']:,} {doc.get('samples_are', 'samples')})")  # fmt: skip
    if doc["provisional"] and not doc["run_spread_pct"]:
        lines.append("         provisional: one run a side, weighed within the runs alone (--run-spread 0)")
    elif doc["provisional"]:
        settle = doc["runs_to_settle"]
        lines.append(
            f"         provisional: one run a side, and identical runs can differ by {doc['run_spread_pct']:g}% "
            + (f"(--run-spread); about {settle} runs a side would settle it (--a RUN... --b RUN...)" if settle
               else "(--run-spread): this change is beyond that")
        )  # fmt: skip
    elif doc["runs_to_settle"] and doc["verdict"] != "regression":
        lines.append(f"         about {doc['runs_to_settle']} runs a side would settle what is not decided here")
    read = doc.get("values", {})
    pooled = [side for side in ("a", "b") if read.get(side) not in ("as recorded", "median of the loops")]
    if pooled:  # a single run's figures are its table's; a pool's are read from 1-us buckets, and say so
        lines.append(f"values:  {' and '.join(s.upper() for s in pooled)} from the runs' pooled 1-us histograms; a "
                     "single run's as recorded")  # fmt: skip
    lines.append(f"method:  {doc['method']}")
    return "\n".join(lines) + "\n"
