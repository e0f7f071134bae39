"""The cells of a run's row, shared by every report (terminal, Markdown, CSV, JSON, JUnit, HTML): how whole the run
is, whether it kept its schedule, how much its numbers can be trusted, and the escaping that keeps a value text in
Markdown and CSV. Never prints.

Decided here (issue 25, items 4 and 5):
- `valid` is the run rules' verdict (LoadGen's: min_duration_s, min_queries, not cut short; bench.slo.run_rules):
  "yes" met, "NO" missed (the campaign exits 1), None ("-") when the scenario sets no run rule. It says nothing
  about the SLOs (`slo`) or the measurement's quality (`quality`).
- `quality` is what the measuring side said of its own numbers (the record's `quality`): "stable" or "UNSTABLE"
  (pyperf's rule: std over 10% of the mean, or the median drifting 10%), "stability unknown" (too few samples),
  then ", interference" when other tasks ran on the measured CPU; None ("-") for a run that failed. The warnings
  themselves go under the table, one line per run, those every run shares once.
"""

from __future__ import annotations

import re
from collections import Counter

COLUMNS = ["run", "target", "model", "scenario", "repetition", "count", "p50_us", "p99_us", "p999_us", "max_us",
           "throughput_ips", "slo", "valid", "quality", "partial", "saturated", "error"]  # fmt: skip
# The CSV's own: the rates behind `saturated` (the table and Markdown say them in a note under the runs), and the
# quality warnings (the table and Markdown say them under the runs).
RATES = ["scheduled_qps", "achieved_qps", "not_sent"]
CSV_ONLY = [*RATES, "quality_warnings"]
RUN_COMPLETES = "run completes"  # the check a run that failed outright misses (not an SLO of the runs that ran)


def state_cells(result: dict | None) -> dict:
    """How whole a run is and whether its target kept to its schedule, as row cells: `partial` (yes: cut short, its
    numbers are from part of the run), `saturated` (yes/no; None where no schedule was kept: a closed loop, an older
    record), the rates behind it, and a note for each that is yes (said under the table)."""
    if not result:
        return {"partial": None, "saturated": None, "notes": [], **quality_cells(None)}
    sc, ab = result.get("scenario") or {}, result.get("aborted")
    notes = []
    if ab:
        at = f" at {ab['at_s']:g} s" if isinstance(ab.get("at_s"), (int, float)) else ""
        notes.append(f"partial: {ab.get('reason') or ab.get('kind') or 'cut short'}{at}")
    notes += [saturation_note(sc)] if sc.get("saturated") else []
    kept = sc.get("saturated")
    rates = {k: sc.get(k) for k in RATES} if kept is not None else {}
    return {"partial": "yes" if ab else "no", "saturated": None if kept is None else ("yes" if kept else "no"),
            **rates, "notes": notes, **quality_cells(result)}  # fmt: skip


def qps_text(v) -> str:
    """Queries a second for people: whole numbers from 100 up."""
    return f"{v:,.0f}" if isinstance(v, (int, float)) and v >= 100 else f"{v:,.1f}" if isinstance(v, (int, float)) \
        else "?"  # fmt: skip


def saturation_note(sc: dict) -> str:
    """A saturated run's note: "saturated: achieved X of Y queries/s", then the queries it never sent."""
    text = f"saturated: achieved {qps_text(sc.get('achieved_qps'))} of {qps_text(sc.get('scheduled_qps'))} queries/s"
    if sc.get("not_sent"):
        text += (f"; {sc['not_sent']:,} of {sc.get('scheduled') or 0:,} queries ({sc.get('not_sent_share') or 0:.1%}) "
                 "not sent by the end of the run")  # fmt: skip
    return text + ": the target cannot keep up with this load"


# edge_runtime.measure.bench's warning for a run cut short (the row's `partial` note says it)
PARTIAL = re.compile(r"(interrupted by \S+|aborted above the thermal limit): (partial result|nothing measured)")
STABILITY = {True: "UNSTABLE", False: "stable", None: "stability unknown"}
INTERFERENCE = "other tasks ran on the measured CPU"  # the start of edge_runtime.measure.interference's warning


def quality_cells(result: dict | None) -> dict:
    """`quality` (the cell) and `quality_warnings` (the record's warnings, less the saturation and the cut that the
    row's `saturated` and `partial` say already)."""
    from edge_runtime.measure.scenario import saturation_text

    if not result:
        return {"quality": None, "quality_warnings": []}
    q = result.get("quality") or {}
    said = saturation_text(result.get("scenario") or {})
    cut = bool(result.get("aborted"))
    warnings = [str(w) for w in q.get("warnings") or [] if w != said and not (cut and PARTIAL.match(str(w)))]
    cell = STABILITY.get(q.get("unstable"), "stability unknown")
    if any(w.startswith(INTERFERENCE) for w in warnings):
        cell += ", interference"
    return {"quality": cell, "quality_warnings": warnings}


def verdict_line(rows: list[dict], cases: list[dict]) -> str:
    """The runs' verdict in one line: the runs that failed, by what failed (a target that is down is not an SLO
    missed), the partial and saturated ones, the SLO checks of the runs that ran, then the unstable runs."""
    parts = []
    failed = [r for r in rows if r.get("error")]
    if failed:
        seen = Counter(f"target {str(r.get('target'))!r}: {r['error']}" for r in failed)
        said = "; ".join(what + (f" (x{k})" if k > 1 else "") for what, k in list(seen.items())[:3])
        more = f"; and {len(seen) - 3} other failures" if len(seen) > 3 else ""
        parts.append(f"{len(failed)} of {len(rows)} runs failed: {said}{more}")
    for key, word in (("partial", "partial (cut short)"), ("saturated", "saturated")):
        k = sum(r.get(key) == "yes" for r in rows)
        if k:
            parts.append(f"{k} of {len(rows)} runs {word}")
    checks = [c for c in cases if c["slo"] != RUN_COMPLETES]
    missed = sum(not c["pass"] for c in checks)
    if missed:
        parts.append(f"SLO missed: {missed} of {len(checks)} checks")
    else:
        parts.append(f"all {len(checks)} SLO checks pass" if checks else "no SLOs given")
    shaky = sum(str(r.get("quality") or "").startswith("UNSTABLE") for r in rows)
    if shaky:  # after the SLOs: how far to trust the numbers behind them (the warnings are under the table)
        parts.append(f"{shaky} of {len(rows)} runs UNSTABLE (see the quality warnings)")
    return "; ".join(parts)


def notes_of(rows: list[dict]) -> list[tuple[dict, str]]:
    return [(r, n) for r in rows for n in r.get("notes") or []]


def cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}"
    return str(v)


# GitHub Markdown that a value must not make: a cell (`|`), the end of a row (a newline), code (`), a link or an image
# ([...](...)), a backslash escape, raw HTML or an autolink (`<` before a letter, `/`, `!` or `?`; "p99 <= 10 ms"
# stays as it is) or an entity (`&lt;`).
_MD_PUNCT = re.compile(r"([\\`|\[\]])")
_MD_HTML = re.compile(r"<(?=[A-Za-z/!?])")
_MD_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")
# A spreadsheet evaluates a text cell that starts with one of these (OWASP, CSV injection): "=HYPERLINK(...)".
_CSV_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def md_text(v) -> str:
    """A value as literal text in GitHub Markdown: a table cell, a list item or a heading that cannot add a column,
    end its row, open code, make a link or an image, or become HTML."""
    text = _MD_ENTITY.sub("&amp;", cell(v))
    text = _MD_PUNCT.sub(r"\\\1", _MD_HTML.sub("&lt;", text))
    return re.sub(r"\r\n|\r|\n", "<br>", text)


def csv_cell(v):
    """A CSV value a spreadsheet shows, not runs: a text cell that starts like a formula gets a leading ' (OWASP's
    rule); numbers, negative ones included, stay numbers."""
    return "'" + v if isinstance(v, str) and v.startswith(_CSV_FORMULA) else v
