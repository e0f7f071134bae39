"""`edge-bench targets URL...`: is each target reachable, what board, CPUs, backends and versions, and how good is
the link (round trip, retransmissions, CRC errors seen while asking); for a KServe v2 server, what server, the model's
inputs and the round trip. Exit 1 when one is unreachable."""

from __future__ import annotations

import sys

from bench.cli.common import add_store, add_target_options, after_stalls, check_reconnect, token
from edge_runtime.cli.common import add_json, plan_outputs

HELP = "reachable? what board, CPUs, backends and versions, link quality; exit 1 if any is not reachable"


def add_arguments(p) -> None:
    where = "tcp://HOST:PORT, serial:///dev/ttyUSB0?baud=N, socket://..., kserve+http://HOST:PORT/MODEL"
    p.add_argument("urls", nargs="+", metavar="URL", help=where)
    p.add_argument("--header", action="append", metavar="'NAME: VALUE'", help="a server target's header (repeatable)")
    add_target_options(p)
    p.set_defaults(reconnect_for=0.0)
    add_store(p)  # accepted as by every edge-bench command; targets keeps nothing
    add_json(p)


def run(args) -> int:
    from bench.cli.run import header_flags
    from bench.targets import board_endpoint
    from bench.targets.agent import AgentTarget, TargetError
    from bench.targets.kserve import KServeTarget, parse_url
    from edge_runtime.system.outputs import write_json

    check_reconnect(args.reconnect_for)
    headers = header_flags(args.header)
    for url in args.urls:  # a URL that names nothing is a user error before anything is tried
        if url.startswith("kserve+"):
            parse_url(url)
        elif url.startswith("local:"):
            from bench.targets.local import parse_local

            parse_local(url)
        else:
            board_endpoint(url)
    outs = plan_outputs([("--json", args.json)])
    secret = token(args)
    rows = []
    for url in args.urls:
        if url.startswith("kserve+"):
            k = KServeTarget(url, headers=headers)
            try:
                ident = k.connect()
                model = k.meta["model"]
                rows.append({"url": url, "reachable": True, "kind": "kserve", **ident, "inputs": model.get("inputs"),
                             "outputs": model.get("outputs"), "network": k.round_trip(k.client(), 5)})  # fmt: skip
            except TargetError as err:
                rows.append({"url": url, "reachable": False, "error": str(err), "kind": err.kind})
            continue
        if url.startswith("local:"):  # this machine, as the local: target runs it (no link)
            from bench.targets.local import LocalTarget

            try:
                rows.append({"url": url, "reachable": True, "kind": "local", **LocalTarget(url).connect()})
            except TargetError as err:
                rows.append({"url": url, "reachable": False, "error": str(err), "kind": err.kind})
            continue
        t = AgentTarget(url, token=secret, reconnect_for=args.reconnect_for, connect_timeout=5.0)
        try:
            ident = t.connect()
            for _ in range(5):  # a few round trips: the link's quality is measured on more than one frame
                t.call("ping")
            rows.append({"url": url, "reachable": True, **ident, "link": t.link_stats()})
        except TargetError as err:
            rows.append({"url": url, "reachable": False, "error": str(err), "kind": err.kind})
        finally:
            t.close()
    doc = {"schema": "edge-bench/targets/1", "targets": rows}
    if "--json" in outs:
        write_json(doc, outs["--json"])
    if not ("--json" in outs and outs["--json"].is_stdout):
        sys.stdout.write(render(rows))
    return 0 if all(r["reachable"] for r in rows) else 1


def render(rows: list[dict]) -> str:
    from bench.transports import bare
    from edge_runtime.system.cpulist import format_cpu_list

    lines = []
    for r in rows:
        if not r["reachable"]:
            lines.append(f"{r['url']}  UNREACHABLE  {bare(r['url'], r['error'])}")  # the URL once
            continue
        if r.get("kind") == "kserve":
            srv = r.get("server") or {}
            tensors = "; ".join(f"{t.get('name')} {t.get('datatype')} {t.get('shape')}" for t in r.get("inputs") or [])
            lines += [
                f"{r['url']}  reachable  ({srv.get('name')} {srv.get('version')}, KServe v2)",
                f"  model     {r.get('model')}: inputs {tensors}",
                f"  server    extensions {', '.join(srv.get('extensions') or []) or 'none listed'}",
                f"  network   rtt {r['network'].get('rtt_ms')} ms (median of health requests)",
            ]
            continue
        cpus = r.get("cpus") or {}
        backends = ", ".join(f"{k} {v}" for k, v in (r.get("backends") or {}).items() if v) or "none"
        if r.get("kind") == "local":
            lines += [
                f"{r['url']}  this machine  ({r.get('hostname', '?')}, kernel {r.get('kernel') or '?'}"
                + (f", profile {r['board_profile']}" if r.get("board_profile") else "") + ")",
                f"  cpus      {r.get('cpu_model') or '?'}; online {format_cpu_list(cpus.get('online') or []) or '?'}, "
                f"isolated {format_cpu_list(cpus.get('isolated') or []) or 'none'}",
                f"  backends  {backends}; python {r.get('python') or '?'}",
            ]
            continue
        link = r["link"]
        rtt = f"{link['rtt_ms']:.1f} ms" if link.get("rtt_ms") is not None else "?"
        lines += [
            f"{r['url']}  reachable  (agent {r.get('agent')}, protocol {r.get('protocol')})",
            f"  board     {r.get('board') or 'unknown'}"
            + (f" (profile {r['board_profile']})" if r.get("board_profile") else "")
            + f", {r.get('hostname', '?')}, kernel {r.get('kernel') or '?'}",
            f"  cpus      {r.get('cpu_model') or '?'}; online {format_cpu_list(cpus.get('online') or []) or '?'}, "
            f"isolated {format_cpu_list(cpus.get('isolated') or []) or 'none'}",
            f"  backends  {backends}; python {r.get('python') or '?'}",
            f"  link      rtt {rtt}, {link.get('retransmissions', 0)} retransmitted{after_stalls(link)}, "
            f"{link.get('crc_errors', 0)} CRC "
            f"errors, {link.get('resyncs', 0)} resyncs; frames up to {r.get('max_payload', '?')} bytes",
            f"  models    {_size(r.get('models_bytes', 0))} kept, of {_size(r.get('models_max_bytes', 0))}",
        ]
    return "\n".join(lines) + "\n"


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
