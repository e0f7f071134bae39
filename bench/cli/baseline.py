"""`edge-bench baseline set NAME RUN [--replace] | list | show NAME`: named runs to compare against. A name that holds
a run keeps it unless --replace is given: a baseline changed by mistake changes what every later compare means."""

from __future__ import annotations

import sys

from bench.cli.common import add_store, open_store
from edge_runtime.errors import UsageError
from edge_runtime.program.args import add_json, plan_outputs


def add_arguments(p) -> None:
    p.add_argument("action", choices=["set", "list", "show"], help="set NAME RUN | list | show NAME")
    p.add_argument("args", nargs="*", metavar="ARG")
    p.add_argument("--replace", action="store_true", help="set: let NAME name another run than it does now")
    add_store(p)
    add_json(p)


def run(args) -> int:
    from edge_runtime.files.outputs import write_json

    want = {"set": 2, "list": 0, "show": 1}[args.action]
    if len(args.args) != want:
        usage = {"set": "set NAME RUN [--replace]", "list": "list", "show": "show NAME"}[args.action]
        raise UsageError(f"baseline {args.action}: expected `baseline {usage}`")
    if args.replace and args.action != "set":
        raise UsageError(f"--replace goes with `baseline set NAME RUN`, not with {args.action}")
    outs = plan_outputs([("--json", args.json)], [("the store", args.store)])
    with open_store(args) as store:
        if args.action == "set":
            r, before = store.set_baseline(args.args[0], args.args[1], replace=args.replace)
            doc = {"baseline": args.args[0], "run": r.summary(), "replaced": before}
            what = f"({r.target}, {r.model_name}, {r.scenario})"
            if before is not None and before != r.id:
                text = f"baseline {args.args[0]}: run {r.id} replaces run {before} {what}\n"
            else:
                text = f"baseline {args.args[0]} = run {r.id} {what}\n"
        elif args.action == "list":
            doc = {"baselines": store.baselines()}
            text = "".join(f"{b['name']:<24} run {b['run']}\n" for b in doc["baselines"]) or "no baselines yet\n"
        else:
            r = store.baseline(args.args[0])
            doc = {"baseline": args.args[0], "run": r.summary()}
            s = r.summary()
            if s["p50_us"] is None and (r.result or {}).get("firmware"):  # loops timed by a device: its mean
                mean = (r.result.get("latency_us") or {}).get("mean")
                figures = f"mean {mean} us (the device's timer, no percentiles)"
            else:
                figures = f"p50 {s['p50_us']} us, p99 {s['p99_us']} us"
            text = (
                f"baseline {args.args[0]}: run {r.id}, {r.target}, {r.model_name}, {r.scenario}, {figures}, "
                f"{s['count']:,} samples\n"
            )
    if "--json" in outs:
        write_json(doc, outs["--json"])
    if not ("--json" in outs and outs["--json"].is_stdout):
        sys.stdout.write(text)
    return 0
