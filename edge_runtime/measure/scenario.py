"""An open-loop run's figures, as the result record and the reports say them: what its load was asked to be
(`asked_keys`), how it kept to its schedule (`load_keys`: the rate scheduled and achieved, the queries not sent, the
send error, `saturated`), and the record's `scenario` section (`scenario_figures`), which a board's run
(`scenario_section`) and the host's engine (bench/scenarios/record.py) both write.
`load_text` and `saturation_text` say them in one line.

A run whose target served under SATURATED_BELOW of the scheduled rate is `saturated`, and says so. The schedules and
the loop that keeps to them are schedule.py's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from edge_runtime.measure.schedule import OpenLoopRun, Plan

# Under this share of the scheduled rate the target did not keep up: a queue that only happens to be there at the end
# (a few queries at 90% busy) is well under 5% of a run of a few hundred queries; a target that cannot serve the rate
# leaves a growing one. docs/harness.md, "Scenarios": the rule and why.
SATURATED_BELOW = 0.95


def load_keys(
    intended_ns: np.ndarray,
    started_ns: np.ndarray,
    end_s: float | None,
    *,
    scheduled: int | None = None,
    finished_ns: np.ndarray | None = None,
) -> dict:
    """How an open loop kept to its schedule, in the scenario keys both engines write. `intended_ns`, `started_ns`:
    the queries sent (ns from the start); `scheduled`: the queries the schedule held in the run's time (default: those
    sent); `end_s`: the run's end by duration (None: a run by count, or one stopped early, whose window is then the
    schedule of the queries it holds, one mean gap past the last); `finished_ns`, for one query at a time: the issuer's
    own error too, over the queries that found the target idle. The send error is over every query sent: on a target
    that fell behind it is the lag, and its count says how many queries it stands for."""
    from edge_runtime.measure.stats import percentile_us  # here: a report's text never pays for it

    intended, started = np.asarray(intended_ns, np.int64), np.asarray(started_ns, np.int64)
    k = len(started)
    n = k if scheduled is None else int(scheduled)
    if end_s:
        planned_s = sent_s = float(end_s)  # nothing is sent after the end
    else:
        stretch = n / (n - 1) if n > 1 else 0.0
        planned_s = float(intended.max()) * stretch / 1e9 if k else 0.0
        sent_s = max(planned_s, float(started.max()) * stretch / 1e9) if k else 0.0
    scheduled_qps = n / planned_s if planned_s > 0 else 0.0
    achieved_qps = k / sent_s if sent_s > 0 else 0.0
    lag = started - intended
    out = {
        "scheduled": n,
        "not_sent": n - k,
        "not_sent_share": round((n - k) / n, 6) if n else 0.0,
        "scheduled_qps": round(scheduled_qps, 2),
        "achieved_qps": round(achieved_qps, 2),
        "saturated": bool(scheduled_qps > 0 and achieved_qps < SATURATED_BELOW * scheduled_qps),
        "send_error_us": {
            "p50": percentile_us(lag, 50),
            "p99": percentile_us(lag, 99),
            "max": percentile_us(lag, 100),
            "queries": k,
        },
    }
    if finished_ns is not None:
        done = np.maximum.accumulate(np.asarray(finished_ns, np.int64))
        idle = np.concatenate(([np.iinfo(np.int64).min], done[:-1])) <= intended
        own = lag[idle]
        queries = int(idle.sum())
        out["issuer_error_us"] = {"p50": percentile_us(own, 50), "p99": percentile_us(own, 99), "queries": queries}
    return out


def load_text(sc: Mapping[str, Any]) -> str:
    """The rate achieved against the rate scheduled, saturation and the queries not sent, for the text reports (an old
    record without `scheduled_qps` shows the rate achieved alone)."""
    text = f"{sc.get('achieved_qps') or 0:,.1f}/s achieved"
    if sc.get("scheduled_qps"):
        text += f" of {sc['scheduled_qps']:,.1f}/s scheduled"
    if sc.get("saturated"):
        text += " (SATURATED)"
    if sc.get("not_sent"):
        text += f", {sc['not_sent']:,} not sent by the end ({sc['not_sent_share']:.1%})"
    return text


def saturation_text(sc: Mapping[str, Any]) -> str | None:
    """A saturated run in one line (its warning, and its note in the reports); None when it kept up."""
    if not sc.get("saturated"):
        return None
    text = f"saturated: {sc['achieved_qps']:,.1f}/s achieved of {sc['scheduled_qps']:,.1f}/s scheduled"
    if sc.get("not_sent"):
        text += (f"; {sc['not_sent']:,} of {sc['scheduled']:,} queries ({sc['not_sent_share']:.1%}) not sent by the "
                 "end of the run")  # fmt: skip
    return text + ": the target cannot keep up with this load"


# Where a record's latency is timed from, keyed by how its queries were sent: one text for a board's run and a
# server's, so `latency_from` means the same in both (issue 23, step 17).
LATENCY_FROM = {
    "intended": "intended send time (open loop; no coordinated omission)",
    "offline": "each query's own start (offline sends every query at once; its measure is throughput)",
    "closed": "each query's own send (closed loop)",
}
SEND_ERROR_NOTE = (
    "with several connections the send lag includes waiting for a free one: a saturated server shows here too, not "
    "only the issuer's error"
)


def asked_keys(kind: str, request) -> dict:
    """What a scenario's load was asked to be, as its record says it (both engines)."""
    out: dict = {}
    if kind in ("server", "burst"):
        out["rate_qps"] = request.rate_qps
    if kind == "burst":
        out["burst_on_s"], out["burst_off_s"] = request.burst_on_s, request.burst_off_s
    if kind == "multi-stream":
        out["interval_ms"] = request.interval_ms
    if kind == "replay":
        out["arrivals"] = len(request.arrivals_ms or ())
    return out


def scenario_figures(
    kind: str,
    request,
    intended_ns: np.ndarray,
    started_ns: np.ndarray,
    finished_ns: np.ndarray,
    *,
    from_intended: bool,
    wall_s: float,
    end_s: float | None,
    scheduled: int,
    samples_per_query: int = 1,
    ok: np.ndarray | None = None,
    concurrency: int | None = None,
) -> dict:
    """A scenario run's own numbers for the record's `scenario` section, the board's one-query-at-a-time run and the
    host's N connections alike (`concurrency` None: the board, one at a time). The arrays are the queries sent, ns from
    the start; `ok` the ones answered (default: all); `scheduled` the queries the schedule held; `end_s` the run's end
    by duration (None: by count, or stopped). What was asked (`asked_keys`), the queries, where latency is timed from,
    how the schedule was kept (`load_keys`, and the issuer's own error when one query runs at a time), latency from
    the actual send (`service_us`) and, for multi-stream, the queries over their interval.

    Decisions where the board's and the host's builders differed (issue 23, step 17), for a user who compares a board
    run with a server run:
    1. `achieved_qps` of a run not timed from its schedule: offline's is the queries over the run's wall time on both
       (throughput is its measure; the host's was the span of start times); a host's closed loop keeps the span of its
       start times (a board's single-stream has no scenario section).
    2. `queries` counts the queries sent on both (what `latency_us.count` and the error budget are about); the host
       counted the schedule's, not-sent ones included. `scheduled` and `not_sent` still say the schedule's count.
    3. `latency_from` of a run not from the intended time: offline's text for offline on both (the host said "closed
       loop"), the closed loop's for a host's closed loop.
    4. `concurrency` and `send_error_note` only where there is a concurrency (the host), as before; the host gains
       `queries_over_interval` for multi-stream (over the answered queries).
    5. One key order for both: kind, what was asked, queries, samples_per_query, concurrency, latency_from, then the
       load keys (no reader depends on it; a record read back keeps its own order)."""
    from edge_runtime.measure.stats import percentile_us  # here: a report's text never pays for it

    n = len(intended_ns)
    offline = kind == "offline"
    start = "intended" if from_intended else "offline" if offline else "closed"
    out: dict = {"kind": kind, **asked_keys(kind, request), "queries": n, "samples_per_query": samples_per_query}
    if concurrency is not None:
        out["concurrency"] = concurrency
    out["latency_from"] = LATENCY_FROM[start]
    if not from_intended:
        if offline:
            rate = n / wall_s if wall_s > 0 else 0.0
        else:
            starts = np.sort(np.asarray(started_ns, np.int64))
            span = (starts[-1] - starts[0]) / 1e9 if n > 1 else 0.0
            rate = (n - 1) / span if span > 0 else 0.0
        out["achieved_qps"] = round(rate, 2)
        return out
    one_at_a_time = concurrency is None or concurrency == 1
    out.update(load_keys(intended_ns, started_ns, end_s, scheduled=scheduled,
                         finished_ns=finished_ns if one_at_a_time else None))  # fmt: skip
    if not one_at_a_time:
        out["send_error_note"] = SEND_ERROR_NOTE
    ok = np.ones(n, bool) if ok is None else np.asarray(ok, bool)
    service = (np.asarray(finished_ns, np.int64) - np.asarray(started_ns, np.int64))[ok]
    out["service_us"] = {"p50": percentile_us(service, 50), "p99": percentile_us(service, 99)}
    if kind == "multi-stream":
        late = (np.asarray(finished_ns, np.int64) - np.asarray(intended_ns, np.int64))[ok] > request.interval_ms * 1e6
        out["queries_over_interval"] = int(np.sum(late))  # a query not done before the next was due: no keeping up
    return out


def scenario_section(
    request, plan: Plan | None, run: OpenLoopRun | None, wall_s: float, stopped: bool = False
) -> dict | None:
    """A board's open-loop run's `scenario` section (`scenario_figures`, one query at a time); None without one."""
    if plan is None or run is None or len(run.intended_ns) == 0:
        return None
    return scenario_figures(plan.kind, request, run.intended_ns, run.started_ns, run.finished_ns,
                            from_intended=plan.from_intended, wall_s=wall_s, end_s=None if stopped else plan.end_s,
                            scheduled=len(run.intended_ns) + run.not_sent,
                            samples_per_query=plan.samples_per_query)  # fmt: skip
