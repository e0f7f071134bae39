"""`edge-bench targets URL...`: is each target reachable, what board, CPUs, backends and versions, and how good is
the link (round trip, retransmissions, CRC errors seen while asking); for a KServe v2 server, what server, the model's
inputs and the round trip. Exit 1 when one is unreachable, 2 when one refused the token or cannot be used here
(`local:?device=cuda` without an NVIDIA GPU: what `run` refuses, said in the same words). Each kind says this in its
own words (describe_text).
`edge-bench targets --schemes`: the URL schemes this edge-bench knows, built in and from entry points."""

from __future__ import annotations

import sys

from bench.cli.common import add_store, add_target_options, check_reconnect, token
from edge_runtime.errors import UsageError, UserError
from edge_runtime.program.args import add_json, plan_outputs


def add_arguments(p) -> None:
    where = "tcp://HOST:PORT, serial:///dev/ttyUSB0?baud=N, socket://..., kserve+http://HOST:PORT/MODEL"
    p.add_argument("urls", nargs="*", metavar="URL", help=where)
    p.add_argument("--schemes", action="store_true", help="list the URL schemes known here (built in and plugins)")
    p.add_argument("--header", action="append", metavar="'NAME: VALUE'", help="a server target's header (repeatable)")
    add_target_options(p)
    p.set_defaults(reconnect_for=0.0)
    add_store(p)  # accepted as by every edge-bench command; targets keeps nothing
    add_json(p)


def run(args) -> int:
    from bench.cli.flags import header_flags
    from bench.targets import TargetError, TargetOptions, registry
    from edge_runtime.files.outputs import write_json

    check_reconnect(args.reconnect_for)
    if args.schemes or not args.urls:
        if args.urls or not args.schemes:
            raise UsageError("give URL... to describe targets, or --schemes (alone) to list the kinds known here")
        return list_schemes(args)
    headers = header_flags(args.header)
    classes = [registry.check(url) for url in args.urls]  # a URL that names nothing: a user error before any is tried
    outs = plan_outputs([("--json", args.json)])
    options = TargetOptions(token=token(args), reconnect_for=args.reconnect_for, connect_timeout=5.0, headers=headers)
    rows = []
    for url, cls in zip(args.urls, classes, strict=True):
        t = cls(url, options)
        try:
            rows.append({"url": url, "reachable": True, **t.describe()})
        except TargetError as err:
            rows.append({"url": url, "reachable": False, "error": str(err), "kind": err.kind})
        finally:
            t.close()
    doc = {"schema": "edge-bench/targets/1", "targets": rows}
    if "--json" in outs:
        write_json(doc, outs["--json"])
    if not ("--json" in outs and outs["--json"].is_stdout):
        sys.stdout.write(render(rows))
    return exit_code(rows)


def exit_code(rows: list[dict]) -> int:
    """0 when every target can be used; 2 when one needs the user to fix something (a token refused, a device this
    machine lacks: `run` exits 2 for the same); else 1 when one is unreachable."""
    from bench.targets.base import REFUSED_KINDS

    if any(not r["reachable"] and r.get("kind") in REFUSED_KINDS for r in rows):
        return 2
    return 0 if all(r["reachable"] for r in rows) else 1


def list_schemes(args) -> int:
    from bench.targets import registry
    from edge_runtime.files.outputs import write_json

    outs = plan_outputs([("--json", args.json)])
    rows = []
    for scheme, name in registry.schemes().items():
        try:
            info = registry.target_class(scheme + ":" if scheme else "/").info
            rows.append({"scheme": scheme, "kind": info.kind, "class": name, "summary": info.summary})
        except UserError as err:  # a plugin that cannot be loaded is listed with why, not hidden
            rows.append({"scheme": scheme, "kind": None, "class": name, "error": err.one_line()})
    if "--json" in outs:
        write_json({"schema": "edge-bench/schemes/1", "schemes": rows}, outs["--json"])
    if not ("--json" in outs and outs["--json"].is_stdout):
        said = set()  # a kind's URL form once, beside its first scheme
        for r in rows:
            shown = f"{r['scheme']}:" if r["scheme"] else "/dev/..."
            note = "" if r["class"] in said else f"  {r.get('summary') or r['error']}"
            said.add(r["class"])
            sys.stdout.write(f"{shown:<13} {r['kind'] or '?':<7} {r['class']}{note}\n")
    return 0


def render(rows: list[dict]) -> str:
    from bench.targets import registry
    from bench.targets.agent import token_refused
    from bench.targets.base import REFUSED_KINDS
    from bench.transports import bare

    lines = []
    for r in rows:
        if not r["reachable"]:  # the URL once, and what is wrong in the words `run` uses for it
            if r.get("kind") == "auth":
                why = r["error"].removeprefix(token_refused(r["url"], ""))
                lines.append(f"{r['url']}  TOKEN REFUSED  {why}")
            else:
                word = "UNUSABLE HERE" if r.get("kind") in REFUSED_KINDS else "UNREACHABLE"
                lines.append(f"{r['url']}  {word}  {bare(r['url'], r['error'])}")
        else:
            lines += registry.target_class(r["url"]).describe_text(r)
    return "\n".join(lines) + "\n"
