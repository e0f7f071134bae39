"""The runs' table for people, in the terminal and in Markdown: the campaign's answer first, then one row per run in
one vocabulary and a unit per column (bench.report.units), then what the table cannot hold (errors, partial and
saturated runs, quality warnings) and a legend for its cells. CSV and JSON keep the exact numbers; this module is
for reading. Never prints."""

from __future__ import annotations

from bench.report.cells import COLUMNS, cell, md_text, notes_of, verdict_line
from bench.report.units import ENOUGH_FOR, in_unit, latency_unit, number, people_name, shown_for

LATENCY = ("p50_us", "p99_us", "p999_us", "max_us")
SHOWN = [c for c in COLUMNS if c != "error"]


def people_columns(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """The table's headers ("p50 us", "p99.9 ms", "throughput/s") and its cells: each latency column in one unit
    chosen for its largest value, a percentile the run holds too few samples for shown as "-", numbers formatted."""
    units = {k: latency_unit(r.get(k) for r in rows if shown_for(k, r.get("count"))) for k in LATENCY}
    heads = [f"{people_name(c)} {units[c]}" if c in units else people_name(c) for c in SHOWN]

    def one(r: dict, c: str) -> str:
        v = r.get(c)
        if c in units:
            return in_unit(v, units[c]) if v is not None and shown_for(c, r.get("count")) else "-"
        if c in ("count", "throughput_ips"):
            return number(v)
        return cell(v)

    return heads, [[one(r, c) for c in SHOWN] for r in rows]


def _hidden(rows: list[dict]) -> list[str]:
    """The percentiles some run held too few samples for."""
    return [k for k in ("p99_us", "p999_us") if any(r.get(k) is not None and not shown_for(k, r.get("count"))
                                                    for r in rows)]  # fmt: skip


def legend(rows: list[dict]) -> list[str]:
    """What the table's words and dashes mean. A column's yes is explained only where a run has one (a "saturated"
    line under a table of runs that all kept up would read as a warning to a reader, or a script, scanning for it)."""
    hidden = _hidden(rows)
    dash = "\"-\": not applicable (no SLO given, no run rule set, a closed loop keeps no schedule, the run failed)"
    if hidden:
        needs = ", ".join(f"{people_name(k)} needs {ENOUGH_FOR[k[:-3]]:,}" for k in hidden)
        dash += f"; in p99, p99.9: the run holds too few samples for it ({needs}; below that it is the max)"
    lines = [
        dash,
        "repetition: counted from 0, as stored",
        "valid: the run rules (min_duration_s, min_queries, not cut short): yes met, NO missed",
        "quality: the run's own verdict on its numbers: stable, UNSTABLE (std over 10% of the mean, or the median "
        "drifted 10%), stability unknown (too few samples); interference: other tasks ran on the measured CPU",
    ]
    if any(r.get("partial") == "yes" for r in rows):
        lines.append("partial yes: cut short (its numbers are from part of the run)")
    if any(r.get("saturated") == "yes" for r in rows):
        lines.append("saturated yes: an open loop that fell behind its schedule (its latencies are its queue's)")
    return lines


def quality_notes(rows: list[dict]) -> list[tuple[str, str]]:
    """The runs' quality warnings as (who, text), each warning said once: those every measured run shares as
    ("every run", ...), those several share as ("runs 1, 2, 5", ...) (a machine's own: CPU 1 not isolated, on all its
    runs but not a server's), then one per run for what is its alone, joined."""
    measured = [r for r in rows if r.get("quality") is not None]
    if not measured:
        return []
    holders: dict[str, list[dict]] = {}
    for r in measured:
        for w in r.get("quality_warnings") or []:
            holders.setdefault(w, []).append(r)
    shared = [w for w, rs in holders.items() if len(rs) == len(measured) > 1]
    several = [w for w, rs in holders.items() if 1 < len(rs) < len(measured)]
    out = [("every run", w) for w in shared] + [(_runs_named(holders[w]), w) for w in several]
    for r in measured:
        own = [w for w in r.get("quality_warnings") or [] if len(holders[w]) == 1]
        if own:
            out.append((f"run {cell(r.get('run'))} {r.get('target')}", "; ".join(own)))
    return out


def _runs_named(runs: list[dict], most: int = 10) -> str:
    ids = [cell(r.get("run")) for r in runs]
    more = f" and {len(ids) - most} more" if len(ids) > most else ""
    return f"runs {', '.join(ids[:most])}{more}"


def table(rows: list[dict], answer: list[dict] | None = None) -> str:
    """The terminal's report: the answer (when given), the runs, what failed or fell short, quality, the legend."""
    from bench.report.answer import answer_text

    heads, cells = people_columns(rows)
    widths = [max(len(h), *(len(x[i]) for x in cells)) if cells else len(h) for i, h in enumerate(heads)]
    numeric = {i for i, c in enumerate(SHOWN) if c in (*LATENCY, "count", "throughput_ips", "run")}

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if i in numeric else v.ljust(w)
                         for i, (v, w) in enumerate(zip(values, widths, strict=True))).rstrip()  # fmt: skip

    lines = [answer_text(answer).rstrip("\n"), ""] if answer else []
    lines += [line(heads)] + [line(x) for x in cells]
    lines += [f"  run {r.get('run') or '-'} {r['target']}: {r['error']}" for r in rows if r.get("error")]
    lines += [f"  run {r.get('run') or '-'} {r['target']}: {note}" for r, note in notes_of(rows)]
    quality = quality_notes(rows)
    if quality:
        lines += ["quality warnings:"] + [f"  {who}: {text}" for who, text in quality]
    lines += ["legend:"] + [f"  {x}" for x in legend(rows)]
    return "\n".join(lines) + "\n"


def markdown(title: str, rows: list[dict], slos: list[dict], answer: list[dict] | None = None) -> str:
    """The Markdown report: the answer (when given) before the table, then the same sections as the terminal's."""
    from bench.report.answer import answer_line

    heads, cells = people_columns(rows)
    out = [f"# {md_text(title)}", ""]
    if answer:
        out += ["## Answer (p50, best first)", ""] + [f"- {md_text(answer_line(a))}" for a in answer] + [""]
    out += ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    out += ["| " + " | ".join(md_text(x) for x in c) + " |" for c in cells]
    out += ["", "Legend:", ""] + [f"- {md_text(x)}" for x in legend(rows)]
    errors = [r for r in rows if r.get("error")]
    if errors:
        out += ["", "## Errors", ""]
        out += [f"- {md_text(r['target'])} / {md_text(r['model'])}: {md_text(r['error'])}" for r in errors]
    if notes_of(rows):
        out += ["", "## Partial or saturated runs", ""]
        out += [f"- {md_text(r['target'])} / {md_text(r['model'])} / {md_text(r['scenario'])} repetition "
                f"{r['repetition']}: {md_text(note)}" for r, note in notes_of(rows)]  # fmt: skip
    quality = quality_notes(rows)
    if quality:
        out += ["", "## Quality warnings", ""] + [f"- {md_text(who)}: {md_text(text)}" for who, text in quality]
    if slos:
        out += [
            "",
            "## SLOs",
            "",
            md_text(verdict_line(rows, slos)),  # a run that failed is said as what failed, not as an SLO missed
            "",
            "| target | model | scenario | repetition | SLO | measured | verdict |",
            "|---|---|---|---|---|---|---|",
        ]
        for s in slos:
            row = [md_text(s[k]) for k in ("target", "model", "scenario", "repetition", "slo", "measured")]
            out.append("| " + " | ".join([*row, "pass" if s["pass"] else "**FAIL**"]) + " |")
    return "\n".join(out) + "\n"

