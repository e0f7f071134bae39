"""`edge-bench report RUN... [--html F] [--md F] [--csv F] [--json F]`: stored runs as a table, an HTML file with plots,
Markdown, CSV or JSON. Without RUN: the latest runs in the store."""

from __future__ import annotations

import sys

from bench.cli.common import add_store, open_store, say_written
from edge_runtime.program.args import add_json, integer, path_arg, plan_outputs


def add_arguments(p) -> None:
    p.add_argument("runs", nargs="*", metavar="RUN", help="run ids or baseline names (default: the latest runs)")
    p.add_argument("--last", type=integer(1, 100_000), default=20, metavar="N", help="without RUN: this many (20)")
    p.add_argument("--html", type=path_arg, metavar="FILE", help="one self-contained HTML file with plots (matplotlib)")
    p.add_argument("--md", type=path_arg, metavar="FILE", help="Markdown report")
    p.add_argument("--csv", type=path_arg, metavar="FILE", help="one row per run")
    add_store(p)
    add_json(p)


def run(args) -> int:
    from bench import report
    from bench.report import edge_vs_server, farm, firmware, html, ops
    from bench.report.answer import ranked
    from bench.store import default_path
    from edge_runtime.files.outputs import write_json, write_output

    args.store = args.store or default_path()  # resolved before planning, so --html/--md/--csv cannot name it
    outs = plan_outputs([("--json", args.json), ("--html", args.html), ("--md", args.md), ("--csv", args.csv)],
                        [("the store", args.store)])  # fmt: skip
    if "--html" in outs:
        html.require()
    with open_store(args) as store:
        runs = [store.run(r) for r in args.runs] if args.runs else list(reversed(store.runs(args.last)))
    rows = [report.stored_row(r) for r in runs]
    answer = ranked(runs)  # the runs' answer first, as the campaign's own report gives it (issue 25)
    items = [(r.target, r.result) for r in runs]
    comps = edge_vs_server.pairs(items)
    named = [(f"run {r.id} {r.target}", r.result) for r in runs]  # the firmware section names each stored run
    placed = [(f"run {r.id} {r.target}", r.scenario, r.result) for r in runs]  # the farm's: and its scenario
    for flag, out in outs.items():
        if flag == "--json":
            listed = [{**row, "result": r.result} for row, r in zip(rows, runs, strict=True)]
            doc = {"schema": "edge-bench/report/1", "answer": answer, "edge_vs_server": comps,
                   "farm": farm.compare_places(placed), "runs": listed}  # fmt: skip
            write_json(doc, out)
        elif flag == "--html":
            write_output(out, html.render_stored("edge-bench runs", runs))
        elif flag == "--md":
            md = report.markdown("edge-bench runs", rows, report.stored_cases(runs), answer)
            md += edge_vs_server.markdown(comps) + firmware.markdown(named) + farm.markdown(placed)
            md += ops.markdown(named)
            write_output(out, md)
        else:
            write_output(out, edge_vs_server.csv_text(rows, items))
    say_written(outs)
    if not any(o.is_stdout for o in outs.values()):
        text = f"no runs in {args.store}\n"
        if rows:
            text = report.table(rows, answer) + edge_vs_server.text(comps) + firmware.text(named) + farm.text(placed)
            text += ops.text(named)
        sys.stdout.write(text)
    return 0
