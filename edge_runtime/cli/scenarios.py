"""The scenario flags of `edge-runtime bench` (and of `edge-bench run`'s one-off form, which parses the same flags):
LoadGen's scenarios as flags, the request fields they make, and the scenario line of the text report."""

from __future__ import annotations

from edge_runtime.errors import UsageError
from edge_runtime.limits import MAX_DURATION_S
from edge_runtime.program.args import integer, path_arg, real


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


def scenario_text(sc: dict) -> str:
    """An open-loop run's scenario section in one line."""
    from edge_runtime.measure.scenario import load_text

    kind = sc.get("kind", "?")
    asked = {
        "server": lambda: f"{sc.get('rate_qps', 0):g}/s Poisson",
        "burst": lambda: f"{sc.get('rate_qps', 0):g}/s for {sc.get('burst_on_s'):g} s, off {sc.get('burst_off_s'):g} s",
        "multi-stream": lambda: f"every {sc.get('interval_ms'):g} ms",
        "replay": lambda: f"{sc.get('arrivals', 0):,} arrivals from a file",
        "offline": lambda: "all at once",
    }.get(kind, lambda: "")()
    spq = sc.get("samples_per_query") or 1
    text = f"{kind}: {sc['queries']:,} queries{f' of {spq} samples' if spq > 1 else ''} ({asked}), "
    since = sc["latency_from"].split(" (")[0]
    since = "the " + since if since.startswith("intended") else since
    text += f"{load_text(sc)}; latency from {since}"
    if sc.get("service_us"):
        err, svc = sc["send_error_us"], sc["service_us"]
        over = f" over {err['queries']:,} queries" if "queries" in err else ""
        text += (f"; from the actual send p50 {svc['p50']:.1f} p99 {svc['p99']:.1f} us; send error p50 {err['p50']} "
                 f"p99 {err['p99']} us{over}")  # fmt: skip
    if sc.get("queries_over_interval"):
        text += f"; {sc['queries_over_interval']:,} queries not done within their interval"
    return text


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
