"""Benchmarks report ratios against a reference measured in the same run; this prints them after the run."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/conftest helpers

RATIOS: list[dict] = []


def _goal(r: dict) -> str:
    if r["goal"] is None:
        return "-"
    return f"{r['goal_low']:.2f}-{r['goal']:.2f}" if r.get("goal_low") is not None else f"<={r['goal']:.2f}"


def pytest_terminal_summary(terminalreporter):
    if not RATIOS:
        return
    tr = terminalreporter
    tr.section("ratios (interleaved, same run)")
    tr.write_line(
        f"{'benchmark':<64} {'reference':>12} {'candidate':>12} {'ratio p50':>10} {'ratio min':>10} "
        f"{'goal':>9}  verdict"
    )
    for r in RATIOS:
        low = r.get("goal_low")
        if r["goal"] is None:
            verdict = "reported"
        elif (low is None or r["ratio_median"] >= low) and r["ratio_median"] <= r["goal"]:
            verdict = "met"
        else:
            verdict = "NOT met"
        tr.write_line(
            f"{r['name']:<64} {r['reference_us']:>10.2f}us {r['candidate_us']:>10.2f}us {r['ratio_median']:>10.3f} "
            f"{r['ratio_min']:>10.3f} {_goal(r):>9}  {verdict}"
        )
    tr.write_line("reference/candidate: median per-call time over rounds; ratio p50: median of per-round ratios.")
