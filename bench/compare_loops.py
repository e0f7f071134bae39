"""compare() for runs a device timed in loops (MLPerf Tiny firmware, issue 27): each loop is N inferences between two
laps of the device's timer, so a run holds a handful of means, not a histogram. The evidence is the loops:

- per run, its value is the median of its loops (MLPerf Tiny's figure); per side, the runs' loops pooled;
- within runs: a pooled-variance t interval on the logs of the loops' values (loops as the units; no bootstrap of a
  distribution there is not); between runs (three or more in all), compare's t interval on the per-run values;
- the metrics are the mean latency per inference and the throughput (one figure inverted: throughput gates, as
  MLPerf Tiny reports it, and the mean is shown); a percentile asked for is refused in one line: there is none;
- one run a side is provisional under the same --run-spread rule as every other comparison (a microcontroller on
  its own timer varies far less than a shared VM: `--run-spread 10` there, as for an isolated board).

Runs of both kinds (a microcontroller against a Linux board) are refused in one line: a mean per loop against a
distribution is a report's side-by-side, not a test."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edge_runtime.errors import UserError

METRICS = ("mean", "throughput")


def loops_of(result: dict) -> np.ndarray | None:
    """A firmware run's per-inference latency of each loop (us), or None for a run with a histogram."""
    fw = result.get("firmware") or {}
    if result.get("histogram_us") or not fw.get("loops"):
        return None
    values = [lp.get("latency_us") for lp in fw["loops"]]
    return np.array([v for v in values if isinstance(v, int | float) and v > 0], dtype=np.float64)


def timed_in_loops(runs: Sequence[dict]) -> bool:
    """True when every run was timed in loops, False when none was; one UserError line for a mix."""
    kinds = {loops_of(r) is not None for r in runs}
    if kinds == {True, False}:
        raise UserError("a run timed in loops by a device (MLPerf Tiny firmware: a mean per loop) and a run with a "
                        "latency histogram are not one test: `edge-bench report` shows them side by side")  # fmt: skip
    return kinds == {True}


def compare_loops(ra: list[dict], rb: list[dict], threshold_pct: float, seed: int, metrics, run_spread_pct: float,
                  rules) -> dict:  # fmt: skip
    """The loops' answer, in compare()'s shape, by compare()'s own rules (`rules`: the bench.compare module, given by
    it: this module never imports it back)."""
    ALPHA, _between, _Context = rules.ALPHA, rules._between, rules._Context

    chosen = tuple(metrics) if metrics else ("throughput",)
    bad = [m for m in chosen if m not in METRICS]
    if bad:
        raise UserError(f"--metrics {bad[0]}: a run timed in loops by its device has no percentiles (a mean per "
                        "loop): use mean or throughput")  # fmt: skip
    la, lb = [loops_of(r) for r in ra], [loops_of(r) for r in rb]
    if any(len(x) == 0 for x in la + lb):
        raise UserError("a firmware run without a loop: nothing to compare")
    pa, pb = np.concatenate(la), np.concatenate(lb)
    alpha = ALPHA / len(chosen)
    provisional = len(ra) + len(rb) < 3
    ctx = _Context(threshold_pct, alpha, provisional, run_spread_pct, seed)
    if len(pa) + len(pb) >= 3:
        within, _ = _between(pa, pb, alpha, seed)
    else:  # one loop a side: no spread to weigh a change against
        within = [-np.inf, np.inf]
    per_a, per_b = np.array([np.median(x) for x in la]), np.array([np.median(x) for x in lb])
    a_us, b_us = float(np.median(pa)), float(np.median(pb))
    out = {"mean": ctx.metric(a_us, b_us, within, per_a, per_b)}
    inv = [1 / (1 + within[1]) - 1, 1 / (1 + within[0]) - 1] if np.isfinite(within).all() else within
    out["throughput"] = ctx.metric(1e6 / a_us, 1e6 / b_us, inv, 1e6 / per_a, 1e6 / per_b, slower=-1)
    for name, m in out.items():
        m["gated"] = name in chosen
        if not np.isfinite(m["interval_pct"]).all():
            m.update(interval_pct=None, within_run_interval_pct=None, significant=False, verdict="not significant")
        if name not in chosen:
            m["verdict"] = "shown (not in --metrics)"
    primary = next(m for m in METRICS[::-1] if m in chosen)
    decided = {out[m]["verdict"] for m in chosen}
    overall = next((v for v in ("regression", "improvement", "within threshold") if v in decided),
                   "no significant change")  # fmt: skip
    settle = None if overall in ("regression", "improvement") else out[primary]["_settle"]
    for m in out.values():
        del m["_settle"]
    words = (f"t intervals on the logs of the loops' values (loops as units; the device times loops, not "
             f"inferences) and, with three runs or more, between runs; {100 * (1 - ALPHA):.0f}% shared over the gated "
             "metrics (Bonferroni)")  # fmt: skip
    if provisional and run_spread_pct > 0:
        words += f"; one run a side: provisional, a change must also exceed the run-to-run spread ({run_spread_pct:g}%)"
    return {
        "method": words,
        "threshold_pct": threshold_pct,
        "run_spread_pct": run_spread_pct,
        "metrics_gated": [m for m in METRICS if m in chosen],
        "runs": {"a": len(ra), "b": len(rb)},
        "samples": {"a": len(pa), "b": len(pb)},
        "samples_are": "loops",
        "values": {"a": "median of the loops", "b": "median of the loops"},
        "provisional": provisional,
        "runs_to_settle": settle,
        "metrics": out,
        "verdict": overall,
    }
