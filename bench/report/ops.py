"""The reports' section for runs that carry a per-op profile (issue 29: `edge-bench run --ops`, a campaign's
`ops = true`; the result's `ops` section is edge_runtime.ops.record.OpsReport.summary()): each run's verdict line in
the terminal and Markdown; in the HTML, per run, a horizontal bar chart of its op rows (each op's share of the
profiled run, its mean time at the bar's end; the overhead row grey; ops that ran elsewhere than the target asked
for, the fallback, in another colour with a legend; the verdict as the caption), or, for a placement-only run
(LiteRT: no per-op times), a table of the ops by placement that says there are no times. Targets that cannot
profile (a server, firmware, a local GPU) are said once, with why (Campaign.no_ops).

Pure but for matplotlib, imported when a chart is drawn (bench.report.plot_common). Never: invent a time for a
placement-only run, or count a fused op's missing time as zero in a bar.
"""

from __future__ import annotations

import html
import math

from bench.report.plot_common import figure_html, mpl_text, new_figure

MAX_BARS = 30  # op bars in one chart; the rest of the ops are one bar ("(K more ops)"), so the bars still add up
LABEL_CHARS = 48  # of an op's name and type on the chart's axis (the JSON keeps it whole)
ON_TARGET, FALLBACK, OVERHEAD, REST = "#1f77b4", "#d62728", "#bbbbbb", "#9ecae1"
TITLE = "Where each op ran"
NO_TIMES = "no per-op times in this run"


def found(named: list[tuple[str, dict | None]]) -> list[tuple[str, dict]]:
    """(label, ops section) of each run that carries one, checked (`checked`)."""
    return [(lab, checked(res["ops"])) for lab, res in named if isinstance((res or {}).get("ops"), dict)]


def checked(ops: dict) -> dict:
    """The section as a board writes it, or `{"error": "unreadable ops section: ..."}` where a field is not (a
    broken or lying agent, a hand-edited store): a report says so in its place and never fails on it."""
    if ops.get("error"):
        return ops
    try:
        rows, parts = ops.get("ops") or [], ops.get("partitions") or []
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ValueError("ops: not a list of op rows")
        if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
            raise ValueError("partitions: not a list of partitions")
        numbers = [(f"ops[{i}].{k}", r.get(k)) for i, r in enumerate(rows) for k in ("share", "mean_us")]
        numbers += [(k, ops.get(k)) for k in ("profiled_us", "named_us", "overhead_us", "fallback_share", "ops_total")]
        for name, value in numbers:
            real = isinstance(value, (int, float)) and not isinstance(value, bool)
            if value is not None and not (real and math.isfinite(value) and value > -1e12 and value < 1e12):
                raise ValueError(f"{name} {value!r}: not a finite number")
    except ValueError as err:
        return {"schema": ops.get("schema"), "error": f"unreadable ops section: {err}"}
    return ops


def is_fallback(row: dict, target: str | None) -> bool:
    """An op that ran elsewhere than the target asked for (not the overhead row, which is no op)."""
    if row.get("status") == "overhead":
        return False
    return row.get("status") == "fallback" or (target is not None and row.get("where") != target)


def timed(ops: dict) -> bool:
    """Whether the section has per-op times to draw (a placement-only run has none)."""
    return any(r.get("share") is not None for r in ops.get("ops") or [])


def headline(ops: dict) -> str:
    """The verdict, or why the run has none (a profile that failed or was skipped keeps its reason: `error`)."""
    if ops.get("error"):
        said = str(ops["error"])
        return said if said.startswith("not profiled") else f"not profiled: {said}"
    return str(ops.get("verdict") or "?")


def summary_line(ops: dict) -> str:
    """The verdict, and what stands behind it: how many ops, where the times come from, the fallback's cost."""
    if ops.get("error"):
        return headline(ops)
    n = ops.get("ops_total", len(ops.get("ops") or []))
    bits = [f"times of {n} ops ({ops.get('time_source')})" if timed(ops) else NO_TIMES]
    if ops.get("fallback_share") is not None:
        bits.append(f"fallback {ops['fallback_share']:.0%} of the profiled run")
    if ops.get("overhead_us") is not None and ops.get("profiled_us"):
        bits.append(f"overhead {ops['overhead_us'] / ops['profiled_us']:.0%}")
    return f"{ops.get('verdict') or '?'} ({', '.join(bits)})"


def text(named: list[tuple[str, dict | None]], skipped: list[tuple[str, str]] | None = None) -> str:
    """The terminal's lines: one per run with a profile, one per target that could not give one."""
    runs = found(named)
    if not runs and not skipped:
        return ""
    lines = ["", f"{TITLE} (per-op profile):"]
    lines += [f"  {lab}: {summary_line(ops)}" for lab, ops in runs]
    lines += [f"  {name}: no per-op profile: {why}" for name, why in skipped or []]
    return "\n".join(lines) + "\n"


def markdown(named: list[tuple[str, dict | None]], skipped: list[tuple[str, str]] | None = None) -> str:
    runs = found(named)
    if not runs and not skipped:
        return ""
    out = ["", f"## {TITLE} (per-op profile)", ""]
    out += [f"- **{_md(lab)}**: {_md(summary_line(ops))}" for lab, ops in runs]
    out += [f"- **{_md(name)}**: no per-op profile: {_md(why)}" for name, why in skipped or []]
    return "\n".join(out) + "\n"


def _md(s: str) -> str:
    from bench.report.cells import md_text  # names are shown, never run (a board's `|`, tags, links)

    return md_text(s)


def html_section(named: list[tuple[str, dict | None]], skipped: list[tuple[str, str]] | None = None) -> str:
    """`<section id="ops">`: per run with a profile, its chart (`<figure id="ops-N">`) or its placement table."""
    runs = found(named)
    if not runs and not skipped:
        return ""
    e = html.escape
    out = [f'<section id="ops"><h2>{TITLE}</h2>']
    for i, (lab, ops) in enumerate(runs, 1):
        out.append(f"<h3>{e(lab)}</h3>")
        if ops.get("error"):
            out.append(f'<p class="note">{e(headline(ops))}</p>')
            continue
        out.append(_chart(f"ops-{i}", ops) if timed(ops) else _placement(f"ops-{i}", ops))
    if skipped:
        out.append('<ul class="note">' + "".join(f"<li>{e(name)}: no per-op profile: {e(why)}</li>"
                                                 for name, why in skipped) + "</ul>")  # fmt: skip
    return "\n".join([*out, "</section>"])


def _label(row: dict) -> str:
    said = f"{row.get('name')} ({row.get('type')})" if row.get("status") != "overhead" else str(row.get("name"))
    return said if len(said) <= LABEL_CHARS else said[: LABEL_CHARS - 1] + "\u2026"


def bars(ops: dict) -> list[tuple[str, float, float | None, str]]:
    """(label, share, mean us, colour) of each bar, top to bottom: the slowest MAX_BARS ops with a time, then one
    bar for the rest, then the overhead row."""
    target = ops.get("target")
    rows = [r for r in ops.get("ops") or [] if r.get("share") is not None]
    overhead = [r for r in rows if r.get("status") == "overhead"]
    rows = sorted((r for r in rows if r.get("status") != "overhead"), key=lambda r: -(r["share"] or 0.0))
    out = [(_label(r), r["share"], r.get("mean_us"), FALLBACK if is_fallback(r, target) else ON_TARGET)
           for r in rows[:MAX_BARS]]  # fmt: skip
    rest = rows[MAX_BARS:]
    # A bench result keeps the slowest SUMMARY_ROWS ops (record.py): those it dropped are in the rest bar too, by
    # what the drawn bars and the overhead leave of the profiled run (ops + overhead == the run, by construction).
    listed = sum(1 for r in ops.get("ops") or [] if r.get("status") != "overhead")
    dropped = max(0, int(ops.get("ops_total") or 0) - listed)
    if rest or dropped:
        share = sum(r["share"] for r in rest)
        if dropped:
            share = max(share, 1.0 - sum(b[1] for b in out) - sum(r["share"] for r in overhead))
        profiled = ops.get("profiled_us")
        mean = share * profiled if profiled else sum(r.get("mean_us") or 0.0 for r in rest)
        out.append((f"({len(rest) + dropped} more ops)", share, mean, REST))
    out += [(_label(r), r["share"], r.get("mean_us"), OVERHEAD) for r in overhead]
    return out


def _chart(fig_id: str, ops: dict) -> str:
    from matplotlib.patches import Patch

    drawn = bars(ops)
    fig = new_figure(10, 1.2 + 0.24 * len(drawn))
    ax = fig.subplots()
    y = list(range(len(drawn)))[::-1]
    pct = [100.0 * share for _, share, _, _ in drawn]
    ax.barh(y, pct, color=[c for *_, c in drawn], height=0.7)
    ax.set_yticks(y, [mpl_text(lab) for lab, *_ in drawn], fontsize=8)
    for yy, p, (_, _, mean, _) in zip(y, pct, drawn, strict=True):
        if mean is not None:
            ax.text(max(p, 0) + 0.3, yy, f"{mean:,.1f} us", va="center", fontsize=7)
    ax.set_xlabel("share of the profiled run's mean time (%); the mean per run at each bar's end")
    ax.set_xlim(min(0.0, *pct) * 1.1, max(pct) * 1.18 + 1)
    ax.grid(True, axis="x", alpha=0.3)
    target = str(ops.get("target") or "?")
    colours = {c for *_, c in drawn}
    legend = [(ON_TARGET, f"on {target}"), (FALLBACK, f"elsewhere than {target} (fallback)"),
              (REST, "the other ops, together"), (OVERHEAD, "overhead (no op: run loop, I/O, profiler)")]  # fmt: skip
    handles = [Patch(color=c, label=mpl_text(t)) for c, t in legend if c in colours]
    fig.legend(handles=handles, loc="outside right upper", fontsize=8)
    cap = f"{ops.get('verdict') or '?'}"
    more = (f"Each op's share of the profiled run ({ops.get('runs')} runs, {ops.get('time_source')}); the slowest "
            f"{MAX_BARS} ops drawn, of {ops.get('ops_total')}; ops with no time of their own (fused, in place) are "
            "not drawn.")  # fmt: skip
    notes = "".join(f"<li>{html.escape(str(n))}</li>" for n in ops.get("notes") or [])
    extra = f'<p class="note">{html.escape(more)}</p>' + (f'<ul class="note">{notes}</ul>' if notes else "")
    return figure_html(fig_id, fig, html.escape(cap), extra)


def _placement(fig_id: str, ops: dict) -> str:
    """A placement-only run: its ops by where they ran, fallback rows marked; no bars (there are no times)."""
    e = html.escape
    target = ops.get("target")
    rows = [r for r in ops.get("ops") or [] if r.get("status") != "overhead"]
    head = "<tr><th>op</th><th>type</th><th>where</th><th>kernel</th><th>precision</th><th>status</th></tr>"
    body = []
    for r in rows:
        fb = is_fallback(r, target)
        mark = f"fallback: not on {target}"
        status = (
            str(r.get("status")) if not fb else mark if r.get("status") == "fallback" else f"{r.get('status')}; {mark}"
        )
        cells = [r.get("name"), r.get("type"), r.get("where"), r.get("kernel"), r.get("precision"), status]
        tds = "".join(f"<td>{e('-' if c is None else str(c))}</td>" for c in cells)
        body.append(f'<tr class="fallback">{tds}</tr>' if fb else f"<tr>{tds}</tr>")
    parts = ", ".join(f"{p.get('where')}: {p.get('ops')} op(s)" for p in ops.get("partitions") or [])
    said = (f"{NO_TIMES} ({ops.get('time_source')}): the ops by where they ran, on target {target}, those "
            f"elsewhere (fallback) in red; partitions: {parts or 'none'}")  # fmt: skip
    notes = "".join(f"<li>{e(str(n))}</li>" for n in ops.get("notes") or [])
    return (f'<figure id="{fig_id}" class="placement"><p class="note">{e(said)}</p><table>{head}{"".join(body)}'
            f'</table><figcaption>{e(str(ops.get("verdict") or "?"))}</figcaption>'
            + (f'<ul class="note">{notes}</ul>' if notes else "") + "</figure>")  # fmt: skip
