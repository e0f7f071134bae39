"""`edge-runtime thermal`: thermal zones, sensors, trip points, frequencies, power rails and headroom."""

from __future__ import annotations

import json
import time

from edge_runtime.cli.common import sysroot
from edge_runtime.errors import UsageError
from edge_runtime.files.outputs import finite
from edge_runtime.program.args import add_debug, add_json, add_sysroot, celsius, emit_json, integer, plan_outputs, real


def add_arguments(p) -> None:
    p.add_argument(
        "--watch",
        type=real(0.1, 86400.0, "seconds", why=" (a day)"),
        metavar="SECONDS",
        help="a live line every SECONDS (Ctrl-C to stop)",
    )
    p.add_argument("--count", type=integer(1, 10**9), metavar="N", help="with --watch: stop after N lines")
    p.add_argument("--thermal-limit", type=celsius, metavar="C", help="limit for the headroom (default: board, trips)")
    add_sysroot(p, "read /sys below DIR (default /)")
    add_json(p)
    add_debug(p)


def run(args) -> int:
    from edge_runtime.system.boards import detect

    root = sysroot(args.sysroot)
    board = detect(root)

    def snapshot_doc():
        return _snapshot_doc(root, board, args.thermal_limit)

    if args.count is not None and args.watch is None:
        raise UsageError("--count goes with --watch")
    if args.watch is not None:
        if args.json not in (None, "-"):
            raise UsageError("--watch writes one JSON line per interval to stdout: use --json without a FILE")
        return _watch(args, snapshot_doc)
    outs = plan_outputs([("--json", args.json)], root=root)
    snap, doc = snapshot_doc()
    if emit_json(doc, outs):
        return 0
    if not snap.available and not snap.cpufreq and not snap.rails:
        print(
            f"no thermal sensors: nothing under {root.path('/sys/class/thermal')} or {root.path('/sys/class/hwmon')}"
            " reports a temperature, and there is no cpufreq or power rail to show (a VM, or a board without those"
            " drivers)"
        )
        return 0
    _print_table(snap, doc)
    return 0


def _snapshot_doc(root, board, limit_c):
    """The sensors read now, and the document --json writes (schema edge-runtime/thermal/1)."""
    from edge_runtime.system.thermal import pick_rail, read_snapshot, thermal_limit, throttle_reasons

    snap = read_snapshot(root)
    limit, source = thermal_limit(limit_c, board, snap)
    mx = snap.max_c()
    rail = pick_rail(snap.rails)
    return snap, {
        **snap.to_dict(),
        "schema": "edge-runtime/thermal/1",
        "available": snap.available,
        "max_c": mx,
        "limit_c": limit,
        "limit_source": source,
        "headroom_c": round(limit - mx, 2) if limit is not None and mx is not None else None,
        "throttled": throttle_reasons(snap),
        "firmware_throttled": snap.throttled,
        "power": {"rail": rail.label, "source": rail.source, "w": rail.power_w} if rail else None,
        "sensors_skipped": snap.skipped,
    }


def _watch(args, snapshot_doc) -> int:
    """A line every --watch seconds (JSON with --json), --count times or until Ctrl-C."""
    n = 0
    while args.count is None or n < args.count:
        snap, doc = snapshot_doc()
        if args.json:
            print(
                json.dumps(
                    finite(
                        {
                            "t": time.time(),
                            "max_c": doc["max_c"],
                            "headroom_c": doc["headroom_c"],
                            "temps_c": snap.temperatures(),
                            "freq_khz": {f.cpu: f.cur_khz for f in snap.cpufreq},
                            "power_w": doc["power"]["w"] if doc["power"] else None,
                            "throttled": doc["throttled"],
                        }
                    ),
                    allow_nan=False,
                ),
                flush=True,
            )
        else:
            temps = "  ".join(f"{k} {v:.1f}" for k, v in snap.temperatures().items()) or "no sensors"
            freqs = " ".join(f"{f.cur_khz // 1000}" if f.cur_khz else "?" for f in snap.cpufreq)
            extra = f"  headroom {doc['headroom_c']:.1f} C" if doc["headroom_c"] is not None else ""
            thr = "  THROTTLED" if doc["throttled"] else ""
            print(
                f"{time.strftime('%H:%M:%S')}  {temps}{extra}{'  MHz ' + freqs if freqs else ''}{thr}", flush=True
            )
        n += 1
        if args.count is None or n < args.count:
            time.sleep(args.watch)
    return 0


def _print_table(snap, doc: dict) -> None:
    print(f"{'zone':<24} {'temp C':>8}  trip points")
    for z in snap.zones:
        trips = ", ".join(
            f"{t.type} {t.temp_c:g}" + (f" (hyst {t.hysteresis_c:g})" if t.hysteresis_c else "") for t in z.trips
        )
        temp = f"{z.temp_c:.1f}" if z.temp_c is not None else "-"
        print(f"{z.type:<24} {temp:>8}  {trips or '-'}")
        for c in z.cooling:
            state = f"{'?' if c.cur_state is None else c.cur_state}/{'?' if c.max_state is None else c.max_state}"
            print(f"{'':<24} {'':>8}  cooling {c.type} {state}")
    for h in snap.hwmon:
        crit = f"  crit {h.crit_c:g}" if h.crit_c else ""
        print(f"{h.chip + '/' + h.label:<24} {h.temp_c:>8.1f}{crit}")
    for f in snap.cpufreq:
        cap = "  CAPPED" if f.capped else ""
        top = f"{(f.max_khz or f.scaling_max_khz) // 1000}" if (f.max_khz or f.scaling_max_khz) else "?"
        cur = f"{f.cur_khz // 1000}" if f.cur_khz else "?"
        print(f"cpu{f.cpu:<21} {cur:>5} MHz  max {top} MHz{cap}")
    for r in snap.rails:
        print(f"{r.label + ' (' + r.source + ')':<24} {r.power_w:>8.2f} W")
    if snap.throttled:
        t = snap.throttled
        print(
            f"firmware throttle flags {t['raw']}: now {', '.join(t['now']) or 'none'}; "
            f"since boot {', '.join(t['since_boot']) or 'none'}"
        )
    if doc["headroom_c"] is not None:
        print(
            f"headroom {doc['headroom_c']:.1f} C: hottest {doc['max_c']:.1f} C, limit {doc['limit_c']:g} C "
            f"({doc['limit_source']})"
        )
    if doc["throttled"]:
        print("THROTTLED: " + "; ".join(doc["throttled"]))
    if snap.skipped:
        print(f"({snap.skipped} sensor reading(s) missing or garbled, skipped)")
