"""`edge-bench compare RUN RUN | --baseline NAME RUN`: did the change make it slower, with a significance test and a
threshold. Exit 1 on a significant regression beyond the threshold, 2 when the runs are of different models, boards
or backends (unless --force)."""

from __future__ import annotations

import sys

from bench.cli.common import add_store, open_store
from edge_runtime.errors import UsageError
from edge_runtime.program.args import add_json, plan_outputs, real


def add_arguments(p) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN", help="run ids (two), or one with --baseline")
    p.add_argument("--baseline", metavar="NAME", help="compare RUN against this baseline")
    p.add_argument(
        "--threshold",
        type=real(0.0, 1000.0, "percent"),
        default=5.0,
        metavar="PCT",
        help="a significant slowdown beyond this is a regression (default 5)",
    )
    p.add_argument("--force", action="store_true", help="compare runs of different models, boards or backends")
    add_store(p)
    add_json(p)


def run(args) -> int:
    from bench.compare import comparable, compare
    from edge_runtime.files.outputs import write_json

    if args.baseline and len(args.runs) != 1:
        raise UsageError("--baseline NAME takes one RUN to compare against it")
    if not args.baseline and len(args.runs) != 2:
        raise UsageError(f"give two runs (or --baseline NAME RUN), not {len(args.runs)}")
    outs = plan_outputs([("--json", args.json)], [("the store", args.store)])
    with open_store(args) as store:
        a = store.baseline(args.baseline) if args.baseline else store.run(args.runs[0])
        b = store.run(args.runs[-1])
        why = comparable(a.result, b.result)
        if why and not args.force:
            raise UsageError(f"runs {a.id} and {b.id} are not comparable: {'; '.join(why)}", hint="--force to compare")
        doc = {
            "schema": "edge-bench/compare/1",
            "a": {**a.summary(), "baseline": args.baseline},
            "b": b.summary(),
            "not_comparable": why,
            **compare(a.result, b.result, args.threshold),
        }
    if "--json" in outs:
        write_json(doc, outs["--json"])
    if not ("--json" in outs and outs["--json"].is_stdout):
        sys.stdout.write(render(doc))
    return 1 if doc["verdict"] == "regression" else 0


def render(doc: dict) -> str:
    a, b = doc["a"], doc["b"]

    def name(r: dict) -> str:
        base = f" (baseline {r['baseline']})" if r.get("baseline") else ""
        return f"run {r['id']}{base}: {r['target']}, {r['model']}, {r['scenario']}"

    lines = [f"A  {name(a)}", f"B  {name(b)}"]
    if doc["not_comparable"]:
        lines.append(f"forced: {'; '.join(doc['not_comparable'])}")
    lines.append(f"{'':<12}{'A':>12}{'B':>12}{'change':>10}  {'interval':<20} verdict")
    for key, m in doc["metrics"].items():
        unit = "/s" if key == "throughput" else " us"
        shown = "[{:+.1f}%, {:+.1f}%]".format(*m["interval_pct"]) if m["interval_pct"] else "-"
        lines.append(
            f"{key + unit:<12}{m['a']:>12,.1f}{m['b']:>12,.1f}{m['change_pct']:>+9.1f}%  {shown}".ljust(78)
            + f" {m['verdict']}"
        )
    verdict = doc["verdict"].upper() if doc["verdict"] == "regression" else doc["verdict"]
    lines.append(f"verdict: {verdict} (threshold {doc['threshold_pct']:g}%; {doc['samples']['a']:,} vs "
                 f"{doc['samples']['b']:,} samples)")  # fmt: skip
    lines.append(f"method:  {doc['method']}")
    return "\n".join(lines) + "\n"
