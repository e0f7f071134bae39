"""A campaign's answer, first (issue 25): per model and scenario, its targets ranked best first, the winner, the
runner-up, by how much, and whether the lead is significant. Pure: runs in, data and text out; nothing is printed.

Decided here:
- The rank is by each target's p50 latency: the median of its runs' p50s (one run: the figure in its table row),
  lower is better, in a closed loop (single-stream, offline) and in an open loop (server, burst...) alike. A
  target with a saturated run (it could not keep to its schedule: its latencies are its queue's) ranks after every
  one that kept up, and is marked saturated; a target whose every run failed is listed last, as failed.
- "By how much": p50 B/A - 1 (B the slower; shown as "5% ahead", from 2x as "14x ahead"), and throughput B/A - 1.
- "Significant" is bench.compare.compare() of the runner-up (B) against the winner (A), runs as the unit of
  evidence, p50 alone gated, a 1% threshold (any real lead is a lead): significant when compare finds the
  runner-up slower. One run a side is provisional (compare's rule: the lead must also exceed the run-to-run
  spread) and the answer says so, with the runs a side that would settle it.
"""

from __future__ import annotations

from collections.abc import Iterable
from statistics import median

from bench.report.units import duration, rate
from edge_runtime.errors import UserError

CLOSED = ("single-stream", "offline")
# compare()'s threshold for a lead: any real lead counts, but compare needs one above 0 (at 0, a metric whose change
# is 0 divides by zero in runs_to_settle); a significant lead under it is "within threshold", still significant.
THRESHOLD_PCT = 1.0


def _get(run, *names):
    """A field of a run as any caller holds it: a bench.store.Run, a campaign's RunOutcome, or a dict (a report row
    with its `result` beside it)."""
    for name in names:
        v = run.get(name) if isinstance(run, dict) else getattr(run, name, None)
        if v is not None:
            return v
    return None


def _p50(results: list[dict]) -> float | None:
    """The median of the runs' own p50s: one run's is its table's figure (a pooled 1-us histogram's would differ
    from it, as compare's 205.0 against the table's 205.4 did: issue 25, item 9)."""
    p50s = [float(v) for r in results if isinstance(v := (r.get("latency_us") or {}).get("p50"), (int, float))]
    if not p50s:  # MLPerf Tiny firmware times loops, not inferences (issue 27): its mean, and the answer says so
        means = [(r.get("latency_us") or {}).get("mean") for r in results if r.get("firmware")]
        p50s = [float(v) for v in means if isinstance(v, (int, float))]
    return median(p50s) if p50s else None


def _figure(e: dict) -> str:
    return "mean (the device's timer: no percentiles)" if e.get("by_mean") else "p50"


def _entry(target: str, results: list[dict], failed: int) -> dict:
    tputs = [float(r["throughput_ips"]) for r in results if isinstance(r.get("throughput_ips"), (int, float))]
    scs = [r.get("scenario") or {} for r in results]
    sat = [sc for sc in scs if sc.get("saturated")]
    entry = {
        "target": target,
        "runs": len(results),
        "failed_runs": failed,
        "p50_us": None if not results else _p50(results),
        "by_mean": bool(results) and not any((r.get("latency_us") or {}).get("p50") for r in results),
        "throughput_ips": sum(tputs) / len(tputs) if tputs else None,
        "saturated": bool(sat),
        "saturation": None,
    }
    if sat:  # the worst of its saturated runs: what it achieved against what it was asked
        worst = min(sat, key=lambda sc: (sc.get("achieved_qps") or 0) / (sc.get("scheduled_qps") or 1))
        entry["saturation"] = {"achieved_qps": worst.get("achieved_qps"), "scheduled_qps": worst.get("scheduled_qps")}
    return entry


def _lead(a: dict, b: dict, runs_a: list[dict], runs_b: list[dict]) -> dict:
    """B (the runner-up) against A (the winner): by how much, and compare()'s word on it."""
    from bench.compare import compare

    p50_change = round(100 * (b["p50_us"] / a["p50_us"] - 1), 2) if a["p50_us"] and b["p50_us"] else None
    lead = {
        "p50_change_pct": p50_change,
        "throughput_change_pct": None,
        "significant": None,
        "verdict": None,
        "provisional": len(runs_a) + len(runs_b) < 3,
        "runs": {"a": len(runs_a), "b": len(runs_b)},
        "runs_to_settle": None,
    }
    if a["throughput_ips"] and b["throughput_ips"]:
        lead["throughput_change_pct"] = round(100 * (b["throughput_ips"] / a["throughput_ips"] - 1), 2)
    if a.get("by_mean") != b.get("by_mean"):  # a device's mean per loop against a distribution: not one test
        lead["verdict"] = "not weighed: a mean per loop against a distribution"
        return lead
    try:
        got = compare(runs_a, runs_b, threshold_pct=THRESHOLD_PCT, metrics=("throughput",) if a.get("by_mean")
                      else ("p50",))  # fmt: skip
    except UserError as err:  # a record without its histogram: the ranking stands, unweighed
        lead["verdict"] = f"not compared: {err}"
        return lead
    p50 = got["metrics"]["throughput" if a.get("by_mean") else "p50"]
    if p50["verdict"] == "improvement":  # all samples pooled put them the other way round: no lead to speak of
        p50 = {**p50, "verdict": "the pooled samples rank them the other way"}
    lead.update(significant=p50["verdict"] in ("regression", "within threshold"), verdict=p50["verdict"],
                provisional=got["provisional"],
                runs_to_settle=got["runs_to_settle"], interval_pct=p50["interval_pct"])  # fmt: skip
    return lead


def ranked(runs: Iterable) -> list[dict]:
    """Per (model, scenario), in the order the runs first name them: {"model", "scenario", "closed_loop", "targets"
    (ranked, best first, each with rank, runs, p50_us, throughput_ips, saturated, saturation, failed_runs),
    "winner", "runner_up" (target names; None when there is none), "lead" (the runner-up against the winner: p50 and
    throughput change in %, significant, verdict, provisional, runs a side, runs_to_settle; None with one target)}.
    `runs`: stored runs (bench.store.Run), a campaign's outcomes, or dicts with target, model, scenario and result."""
    groups: dict[tuple, dict[str, dict]] = {}
    for run in runs:
        key = (str(_get(run, "model_name", "model") or "?"), str(_get(run, "scenario") or "?"))
        target = str(_get(run, "target") or "?")
        side = groups.setdefault(key, {}).setdefault(target, {"results": [], "failed": 0})
        result = _get(run, "result")
        if isinstance(result, dict) and (result.get("latency_us") or {}).get("count"):
            side["results"].append(result)
        else:
            side["failed"] += 1
    answers = []
    for (model, scenario), sides in groups.items():
        entries = [_entry(t, s["results"], s["failed"]) for t, s in sides.items()]
        # Kept up before saturated, measured before failed; then the lower p50.
        entries.sort(key=lambda e: (e["p50_us"] is None, e["saturated"], e["p50_us"] or 0.0))
        for k, e in enumerate(entries, 1):
            e["rank"] = k
        measured = [e for e in entries if e["p50_us"] is not None]
        winner = measured[0] if measured else None
        runner = measured[1] if len(measured) > 1 else None
        lead = None
        if winner and runner:
            lead = _lead(winner, runner, sides[winner["target"]]["results"], sides[runner["target"]]["results"])
        kind = scenario.split("@")[0]
        answers.append({"model": model, "scenario": scenario, "closed_loop": kind in CLOSED, "targets": entries,
                        "winner": winner and winner["target"], "runner_up": runner and runner["target"],
                        "lead": lead})  # fmt: skip
    return answers


def _ahead(a_us: float, b_us: float) -> str:
    r = b_us / a_us if a_us > 0 else float("inf")
    if r >= 10:
        return f"{r:,.0f}x"
    if r >= 2:
        return f"{r:.1f}x"
    return f"{100 * (r - 1):.0f}%" if r - 1 >= 0.005 else f"{100 * (r - 1):.1f}%"


def _lead_words(lead: dict) -> str:
    runs = lead["runs"]
    sides = f"{runs['a']} run{'s' if runs['a'] != 1 else ''} a side" if runs["a"] == runs["b"] else \
        f"{runs['a']} and {runs['b']} runs"  # fmt: skip
    if lead["significant"] is None:
        return lead["verdict"] or "not compared"
    if lead["significant"]:
        word = "significant" + (", provisional" if lead["provisional"] else "")
        return f"{word}, {sides}"
    settle = f"; {lead['runs_to_settle']:,} runs a side would settle it" if lead.get("runs_to_settle") else ""
    why = "provisional: one run a side" if lead["provisional"] else sides
    word = "not significant" if lead["verdict"] == "not significant" else f"not significant ({lead['verdict']})"
    return f"{word}, {why}{settle}"


def _sat(e: dict) -> str:
    from bench.report.cells import qps_text

    s = e["saturation"] or {}
    return f"saturated: achieved {qps_text(s.get('achieved_qps'))} of {qps_text(s.get('scheduled_qps'))} queries/s"


def answer_line(a: dict) -> str:
    """One (model, scenario)'s answer in one line."""
    head = f"{a['model']}, {a['scenario']}: "
    entries = a["targets"]
    winner = next((e for e in entries if e["target"] == a["winner"]), None)
    if winner is None:
        return head + "no target measured (every run failed)"
    said = f"{_figure(winner)} {duration(winner['p50_us'])}"
    if a["closed_loop"] and winner["throughput_ips"]:
        said += f", {rate(winner['throughput_ips'])}"
    if winner["saturated"]:
        said += f"; {_sat(winner)}"
    if len(entries) == 1:
        return head + f"{winner['target']} only ({said}): nothing to rank"
    if winner["saturated"]:  # then every measured target was: their p50s are their queues'
        head += "every target saturated (p50 is queueing, not service: lower the rate to rank them): "
    text = head + f"{winner['target']} fastest ({said})"
    others = []
    for e in entries[1:]:
        if e["p50_us"] is None:
            others.append(f"{e['target']} failed")
            continue
        words = [_lead_words(a["lead"])] if e["target"] == a["runner_up"] and a["lead"] else []
        more = (e["throughput_ips"] or 0) / (winner["throughput_ips"] or float("inf"))
        if a["closed_loop"] and more > 1.05:  # a batch: slower per query, more inferences a second
            words.append(f"but {more:,.1f}x the throughput, {rate(e['throughput_ips'])}")
        if e["saturated"]:
            words.append(_sat(e) + ("" if winner["saturated"] else ": ranked after those that kept up"))
        if e["by_mean"] != winner["by_mean"]:
            words.insert(0, f"its {_figure(e)} {duration(e['p50_us'])}")
        others.append(f"{_ahead(winner['p50_us'], e['p50_us'])} ahead of {e['target']}"
                      + (f" ({'; '.join(words)})" if words else ""))  # fmt: skip
    if others:
        text += ", " + ", ".join(others[:-1]) + (" and " if len(others) > 1 else "") + others[-1]
    return text


def answer_text(ranked: list[dict]) -> str:
    """The answer for the terminal and Markdown: one line per (model, scenario), under the word "Answer"."""
    if not ranked:
        return ""
    return "Answer (p50, best first):\n" + "".join(f"  {answer_line(a)}\n" for a in ranked)
