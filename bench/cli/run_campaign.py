"""`edge-bench run CAMPAIGN.toml [--store F] [--json F] [--html F] [--md F] [--csv F] [--junit F]`: a campaign,
interleaved, every run stored and checked against its SLOs (exit 1 on a miss), its reports written (each said with
where it went). Apart from run.py, which parses both forms and runs the one-off."""

from __future__ import annotations

import sys

from bench.cli.common import campaign_progress, open_store, say_written
from bench.slo import nothing_succeeded
from edge_runtime.errors import UsageError

CAMPAIGN_OUTPUTS = ("--json", "--html", "--md", "--csv", "--junit")


def run_campaign(args) -> int:
    from bench import report
    from bench.campaign import load
    from bench.campaign.fan_out import DEFAULT_PARALLEL, expand, parallel_arg
    from bench.campaign.runner import run as run_plan
    from bench.report import edge_vs_server, farm, firmware, html, ops
    from bench.report.answer import ranked
    from edge_runtime.files.outputs import write_json, write_output
    from edge_runtime.program.args import plan_outputs

    if args.target or args.model:
        raise UsageError("a campaign names its targets and models: --target/--model go with the one-off form")
    if args.ops:
        raise UsageError("--ops goes with the one-off form: a campaign asks for per-op profiles with ops = true in "
                         "its [campaign] table")  # fmt: skip
    if args.slo:
        raise UsageError("--slo goes with the one-off form: a campaign's SLOs are in its [slo] and [target.slo] tables")
    flags = {**_campaign_flags(args.rest), "--html": args.html}  # --html: parsed with --target (both forms take it)
    parallel = parallel_arg(flags.pop("--parallel", None) or str(DEFAULT_PARALLEL))
    campaign = load(args.campaign)
    store = open_store(args, create=True)
    outs = plan_outputs([(f, v) for f, v in flags.items()], [("the campaign", args.campaign), ("the store", args.store),
                        *[("a model", m.path) for m in campaign.models]])  # fmt: skip
    if "--html" in outs:
        html.require()
    fanned = expand(campaign)  # a target that stands for many boards: its coordinator says which, now
    plan = campaign.plan()
    runs = sum(len(fanned.get(t.name, [None])) for _r, _s, _m, t in plan)
    boards = len(campaign.targets) + sum(len(m) - 1 for m in fanned.values())
    on = f" on {boards} boards" if fanned else ""
    print(f"edge-bench: campaign {campaign.name}: {runs} runs ({len(campaign.targets)} targets{on} x "
          f"{len(campaign.models)} models x {len(campaign.scenarios)} scenarios x {campaign.repetitions})",
          file=sys.stderr)  # fmt: skip
    for name, members in fanned.items():
        places = [m.place for m in members]
        shown = ", ".join(places[:8]) + (f" and {len(places) - 8} more" if len(places) > 8 else "")
        print(f"edge-bench: {name}: {len(members)} boards ({shown}), at most {parallel} at once", file=sys.stderr)
    no_ops = campaign.no_ops()  # ops = true, and targets that cannot profile: said now, and once in each report
    for name, why in no_ops:
        print(f"edge-bench: {name}: its runs carry no per-op profile: {why}", file=sys.stderr)
    progress, done = campaign_progress(campaign.name, runs)
    try:
        result = run_plan(campaign, store, progress, parallel=parallel, fanned=fanned)
    finally:
        done()
        store.close()
    rows = [o.row() for o in result.outcomes]
    cases = report.slo_cases(result.outcomes)
    answer = ranked(result.outcomes)  # the campaign's answer, first in every report (issue 25)
    items = [(o.target, o.result) for o in result.outcomes]  # aligned with rows (a failed run's result is None)
    comps = edge_vs_server.pairs(items)
    named = [(f"run {row.get('run')} {o.target}", o.result) for row, o in zip(rows, result.outcomes, strict=True)]
    placed = [(lab, o.scenario, o.result) for (lab, _), o in zip(named, result.outcomes, strict=True)]
    docs = {
        "--json": lambda: None,
        "--md": lambda: (
            report.markdown(f"Campaign {campaign.name}", rows, cases, answer)
            + edge_vs_server.markdown(comps)
            + firmware.markdown(named)
            + farm.markdown(placed)
            + ops.markdown(named, no_ops)
        ),
        "--csv": lambda: edge_vs_server.csv_text(rows, items),
        "--junit": lambda: report.junit(campaign.name, cases, result.seconds, rows),
        "--html": lambda: html.render(
            f"Campaign {campaign.name}", rows, [o.result for o in result.outcomes], cases, no_ops=no_ops
        ),
    }
    for flag, out in outs.items():
        if flag == "--json":
            write_json({"schema": "edge-bench/campaign/1", "campaign": campaign.name, "store": args.store,
                        "answer": answer, "edge_vs_server": comps, "farm": farm.compare_places(placed),
                        "runs": [{**r, "slo_detail": o.slo, "result": o.result} for r, o in
                                 zip(rows, result.outcomes, strict=True)]}, out)  # fmt: skip
        else:
            write_output(out, docs[flag]())
    say_written(outs)
    if not any(o.is_stdout for o in outs.values()):
        sys.stdout.write(report.table(rows, answer) + edge_vs_server.text(comps) + firmware.text(named)
                         + farm.text(placed) + ops.text(named, no_ops))  # fmt: skip
        sys.stdout.write(f"{report.verdict_line(rows, cases)}; stored in {args.store}\n")
    if result.stopped_by is not None:
        kept = sum(o.store_id is not None for o in result.outcomes)
        print(f"edge-bench: interrupted: {kept} of {runs} runs kept", file=sys.stderr)
        return 128 + result.stopped_by
    failed = [f"{o.target} {o.scenario}: {why}" for o in result.outcomes if (why := nothing_succeeded(o.result))]
    for line in failed:
        print(f"edge-bench: {line}", file=sys.stderr)
    return 1 if result.slo_failed or failed else 0


def _campaign_flags(rest: list[str]) -> dict[str, str]:
    """--json/--md/--csv/--junit FILE (--json alone: stdout), --parallel N; --FLAG=VALUE as well. Anything else, or
    a flag given twice, is a mistake, named."""
    rest = [part for word in rest for part in (word.split("=", 1) if word.startswith("--") and "=" in word
                                               else [word])]  # fmt: skip
    flags, i = {}, 0
    while i < len(rest):
        flag = rest[i]
        if flag in flags:
            raise UsageError(f"{flag} is given twice")
        if flag == "--debug":
            i += 1
            continue
        if flag not in (*CAMPAIGN_OUTPUTS, "--parallel"):
            raise UsageError(f"{flag!r}: a campaign takes {', '.join(CAMPAIGN_OUTPUTS)} FILE and --parallel N (bench "
                             "options belong in the campaign file)")  # fmt: skip
        value = rest[i + 1] if i + 1 < len(rest) and not rest[i + 1].startswith("--") else None
        if value is None and flag != "--json":
            raise UsageError(f"{flag}: {'a number' if flag == '--parallel' else 'a FILE'} is needed")
        flags[flag] = value or "-"
        i += 2 if value is not None else 1
    return flags
