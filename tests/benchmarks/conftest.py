"""Benchmarks report ratios against a reference measured in the same run; this prints them after the run."""

from __future__ import annotations

import statistics

RATIOS: list[dict] = []
# Tables a benchmark file builds (title -> Markdown), printed in the summary.
TABLES: dict[str, str] = {}


def report_ratio(
    benchmark,
    name: str,
    reference: list[float],
    candidate: list[float],
    goal: float | None,
    goal_low: float | None = None,
    per_round: list[float] | None = None,
    inverse: bool = False,
) -> dict:
    """Record candidate/reference (reference/candidate with `inverse`, for speed-ups) for the summary and the
    pytest-benchmark JSON. The median ratio is the median of `per_round` ratios when given, else of the medians."""
    ref_med, cand_med = statistics.median(reference), statistics.median(candidate)
    ratio = statistics.median(per_round) if per_round else (ref_med / cand_med if inverse else cand_med / ref_med)
    ratio_min = min(reference) / min(candidate) if inverse else min(candidate) / min(reference)
    result = {
        "name": name,
        "reference_us": ref_med,
        "candidate_us": cand_med,
        "ratio_median": ratio,
        "ratio_min": ratio_min,
        "goal": goal,
        "goal_low": goal_low,
    }
    benchmark.extra_info.update(result)
    RATIOS.append(result)
    return result


def _goal(r: dict) -> str:
    if r["goal"] is None:
        return "-"
    if r["goal"] == float("inf"):
        return f">={r['goal_low']:.2f}"
    return f"{r['goal_low']:.2f}-{r['goal']:.2f}" if r.get("goal_low") is not None else f"<={r['goal']:.2f}"


def pytest_terminal_summary(terminalreporter):
    for title, table in TABLES.items():
        terminalreporter.section(title)
        for line in table.splitlines():
            terminalreporter.write_line(line)
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
