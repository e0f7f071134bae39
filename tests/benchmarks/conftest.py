"""Benchmarks report ratios against a reference measured in the same run; this prints them after the run."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/conftest helpers

RATIOS: list[dict] = []


def pytest_terminal_summary(terminalreporter):
    if not RATIOS:
        return
    tr = terminalreporter
    tr.section("ratios (interleaved, same run)")
    tr.write_line(
        f"{'benchmark':<44} {'reference':>12} {'candidate':>12} {'ratio p50':>10} {'ratio min':>10} "
        f"{'goal':>6}  verdict"
    )
    for r in RATIOS:
        verdict = "met" if r["ratio_median"] <= r["goal"] else "NOT met"
        tr.write_line(
            f"{r['name']:<44} {r['reference_us']:>10.2f}us {r['candidate_us']:>10.2f}us {r['ratio_median']:>10.3f} "
            f"{r['ratio_min']:>10.3f} {r['goal']:>6.2f}  {verdict}"
        )
    tr.write_line("reference/candidate: median per-call time over rounds; ratio p50: median of per-round ratios.")
