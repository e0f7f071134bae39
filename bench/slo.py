"""SLO verdicts with an error budget. A latency bound (`p99_ms = 10`) holds when the run's percentile is at or under it;
the error budget (`error_budget = 0.001`) is the share of queries allowed over the tightest bound or failed (a
saturated open loop's queries not sent count as failed), and the run says how much of it it spent. A run that was
cut short (thermal limit, a signal) fails: its numbers are partial."""

from __future__ import annotations

from dataclasses import dataclass, field

SLO_KEYS = {"p50_ms": 0.50, "p90_ms": 0.90, "p99_ms": 0.99, "p999_ms": 0.999, "max_ms": 1.0}
KEY_OF = {"p50_ms": "p50", "p90_ms": "p90", "p99_ms": "p99", "p999_ms": "p999", "max_ms": "max"}


@dataclass(frozen=True)
class SLO:
    """Latency bounds and an error budget, as a campaign's [slo] (or a target's [target.slo] over it) gives them."""

    bounds_ms: dict[str, float] = field(default_factory=dict)  # "p99_ms" -> 10.0
    error_budget: float | None = None

    def merged(self, other: SLO | None) -> SLO:
        if other is None:
            return self
        budget = other.error_budget if other.error_budget is not None else self.error_budget
        return SLO({**self.bounds_ms, **other.bounds_ms}, budget)

    def __bool__(self) -> bool:
        return bool(self.bounds_ms) or self.error_budget is not None


def evaluate(result: dict, slo: SLO) -> dict | None:
    if not slo:
        return None
    lat = result.get("latency_us") or {}
    # MLPerf Tiny firmware in performance mode times loops (issue 27): a bound on a percentile cannot be shown met
    loops_only = bool(result.get("firmware")) and not result.get("histogram_us")
    checks = []
    for key, bound in sorted(slo.bounds_ms.items(), key=lambda kv: SLO_KEYS[kv[0]]):
        measured = lat.get(KEY_OF[key])
        ok = measured is not None and measured / 1000 <= bound
        checks.append({"slo": f"{KEY_OF[key]} <= {bound:g} ms", "key": key, "bound_ms": bound,
                       "measured_ms": None if measured is None else round(measured / 1000, 4), "pass": ok})  # fmt: skip
        if measured is None and loops_only:
            checks[-1]["why"] = NO_PERCENTILES
    budget = None
    if slo.error_budget is not None:
        bound_ms = min(slo.bounds_ms.values()) if slo.bounds_ms else None
        answered = sum(c for _, c in result.get("histogram_us") or []) or (lat.get("count") or 0)
        over = sum(c for v, c in result.get("histogram_us") or [] if bound_ms is not None and v > bound_ms * 1000)
        failed = int(result.get("failed_queries") or 0) + unserved(result)
        total = answered + failed  # the share of every query asked: a failed one has no latency, but it was asked
        share = (over + failed) / total if total else 1.0
        spent = share / slo.error_budget if slo.error_budget else (0.0 if share == 0 else float("inf"))
        budget = {"slo": f"at most {slo.error_budget:.3%} over {bound_ms:g} ms or failed" if bound_ms is not None
                  else f"at most {slo.error_budget:.3%} failed", "budget": slo.error_budget,
                  "share": round(share, 6), "spent_pct": round(100 * spent, 1) if spent != float("inf") else None,
                  "pass": share <= slo.error_budget and not (loops_only and bound_ms is not None)}  # fmt: skip
        if loops_only and bound_ms is not None:
            budget["why"] = NO_PERCENTILES
    aborted = result.get("aborted")
    ok = all(c["pass"] for c in checks) and (budget is None or budget["pass"]) and not aborted
    return {"pass": ok, "checks": checks, "error_budget": budget,
            "cut_short": (aborted or {}).get("reason") if aborted else None}  # fmt: skip


NO_PERCENTILES = "not measurable: the device times loops of inferences, not each one (no percentiles)"


def nothing_succeeded(result: dict | None) -> str | None:
    """A run in which queries were asked and none was answered (every one failed, or came back wrong): a failed run
    whatever its SLOs (issue 24: 385 failed queries once exited 0), said in one line; None otherwise. A run
    interrupted before its first answer is the signal's to report, not this."""
    if not result or result.get("aborted") or (result.get("latency_us") or {}).get("count"):
        return None
    errors = result.get("errors") or {}
    failed = int(errors.get("failed") or result.get("failed_queries") or 0)
    if not failed:
        return None
    kinds = ", ".join(f"{k} x{v:,}" for k, v in sorted((errors.get("kinds") or {}).items(), key=lambda kv: -kv[1]))
    first = next(iter((errors.get("examples") or {}).values()), None)
    return (
        f"no query succeeded: {failed:,} failed"
        + (f" ({kinds})" if kinds else "")
        + (f"; first: {first}" if first else "")
    )


def unserved(result: dict) -> int:
    """The queries a saturated open loop had no time to send: they count against the error budget, as failed ones
    do (the target could not serve the rate asked). A run that kept up may leave a few due at its very end: those are
    not charged, so a budget of 0.1% is not spent by where the run's end fell."""
    sc = result.get("scenario") or {}
    return int(sc.get("not_sent") or 0) if sc.get("saturated") else 0


def run_rules(result: dict, scenario) -> dict | None:
    """LoadGen's run rules for one run: long enough, enough queries, not cut short. None when the scenario sets none."""
    lat = result.get("latency_us") or {}
    why = []
    if scenario.min_duration_s is not None and (result.get("wall_s") or 0) < scenario.min_duration_s:
        why.append(f"ran {result.get('wall_s') or 0:.2f} s, under min_duration_s {scenario.min_duration_s:g}")
    if scenario.min_queries is not None and (lat.get("count") or 0) < scenario.min_queries:
        why.append(f"{lat.get('count') or 0:,} queries, under min_queries {scenario.min_queries:,}")
    if scenario.min_duration_s is None and scenario.min_queries is None:
        return None
    if result.get("aborted"):
        why.append(f"cut short: {result['aborted'].get('reason')}")
    return {"valid": not why, "why": why}


def verdict_lines(slo_result: dict | None) -> list[str]:
    """An SLO verdict for people: one line per check."""
    if slo_result is None:
        return []
    lines = [f"slo          {c['slo']}: measured {'-' if c['measured_ms'] is None else c['measured_ms']} ms: "
             f"{'pass' if c['pass'] else 'FAIL'}"
             + (f" ({c['why']})" if c.get("why") else "") for c in slo_result["checks"]]  # fmt: skip
    b = slo_result.get("error_budget")
    if b:
        spent = f"{b['spent_pct']}% of the budget" if b["spent_pct"] is not None else "no budget"
        lines.append(f"slo          {b['slo']}: {b['share']:.4%} ({spent}): {'pass' if b['pass'] else 'FAIL'}")
    if slo_result.get("cut_short"):
        lines.append(f"slo          FAIL: cut short ({slo_result['cut_short']})")
    return lines
