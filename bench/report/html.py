"""The HTML report: one self-contained file (styles and plots inlined, matplotlib SVG) that opens offline on a laptop.

It holds the runs' table, the SLO verdicts, three plots with stable ids (`<figure id="cdf">`: latency percentiles per
run, HdrHistogram style; `id="timeline"`: latency windows over the run with temperature and CPU frequency on a second
axis; `id="percentiles"`: p50 to max side by side) and each distinct environment once. It must never reach the network
(no script, no external style, font or image; a Content-Security-Policy says so to the browser), never import
matplotlib before `render` or `require` is called, and escape every string that came from a user or a board.
"""

from __future__ import annotations

import html
import io
import json
import re
import time

from bench import __version__
from bench.report import COLUMNS, _cell, _notes, verdict_line
from edge_runtime.errors import UserError

MAX_POINTS = 500  # per line: a long run's timeline or a wide histogram is thinned to this many points
MAX_TIMELINES = 12  # runs drawn in the timeline figure; the rest are named in its caption
MAX_LEGEND = 16  # entries in a figure's legend, the last one "+K more" when there are more runs (the tables name all)
LEGEND_CHARS = 40  # of a run's label in a legend; a longer one is cut (the tables show it whole)
PERCENTILES = (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99.9"), ("max", "max"))
NO_TIMELINE = "no latency timeline in this run"
NO_SENSORS = "no temperature or CPU frequency readings in this run (no sensors)"
NO_SLO_STORED = "none of these runs was checked against an SLO when it ran"
CSP = "default-src 'none'; style-src 'unsafe-inline'"  # inline styles only: nothing is fetched
STYLE = """body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f3f3f3}.fail{color:#b00;font-weight:bold}
figure{margin:1.5em 0}figure svg{max-width:100%;height:auto}figcaption{color:#555;font-size:13px}
code{font-size:12px;word-break:break-all}.note{color:#555}"""


def require() -> None:
    """Fail now, with one line, when --html cannot be written: before a campaign runs, not after it."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        raise UserError(f"--html needs matplotlib ({err})", hint="pip install 'edge-runtime[host]'") from None


def render_stored(title: str, runs: list, slo_note: str = NO_SLO_STORED) -> str:
    """The report of runs kept in the store (bench.store.Run), with the verdicts they were given when they ran."""
    from bench.report import stored_cases, stored_row

    cases = stored_cases(runs)
    return render(title, [stored_row(r) for r in runs], [r.result for r in runs], cases or None, slo_note)


def render(title: str, rows: list[dict], results: list[dict | None], slos: list[dict] | None = None,
           slo_note: str = "") -> str:  # fmt: skip
    """The report of `rows` (the terminal table's rows) and their result records (None for a run that failed), with
    `slos` (bench.report.slo_cases rows; None when no SLO was given, `slo_note` saying why)."""
    require()
    runs = [(row, res) for row, res in zip(rows, results, strict=True) if res]
    labels = _labels([row for row, _ in runs])
    named = list(zip(labels, [res for _, res in runs], strict=True))
    e = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>{e(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{e(title)}</h1>",
        f'<p class="note">edge-bench {e(__version__)}, {time.strftime("%Y-%m-%d %H:%M:%S %z")}; '
        f"{len(rows)} run{'s' * (len(rows) != 1)}</p>",
        "<h2>Runs</h2>",
        _table(rows),
        "<h2>SLOs</h2>",
        _slos(slos, slo_note, named, rows),
        "<h2>Latency</h2>",
    ]
    if named:
        out += _plots(named)
    else:
        out.append('<p class="note">no run finished: nothing to plot</p>')
    from bench.report.edge_vs_server import html_section, pairs

    out.append(html_section(pairs([(str(row.get("target")), res) for row, res in runs])))
    out += ["<h2>Environment</h2>", _environments(named), "</body></html>"]
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------------------------- text parts
def _labels(rows: list[dict]) -> list[str]:
    """Target, and model, scenario and repetition where the runs differ in them; the run id when still ambiguous."""
    keys = [k for k in ("model", "scenario", "repetition") if len({r.get(k) for r in rows}) > 1]
    labels = [" ".join([str(r.get("target"))] + [f"rep {r[k]}" if k == "repetition" else str(r.get(k))
                                                  for k in keys]) for r in rows]  # fmt: skip
    if len(set(labels)) < len(labels):
        labels = [f"run {r.get('run') or '?'} {lab}" for r, lab in zip(rows, labels, strict=True)]
    return labels


def _table(rows: list[dict]) -> str:
    shown = [c for c in COLUMNS if c != "error"]
    out = ["<table><tr>" + "".join(f"<th>{c}</th>" for c in shown) + "</tr>"]
    for r in rows:
        cells = []
        for c in shown:
            v = r.get(c)
            bad = v in ("FAIL", "NO") or (c in ("partial", "saturated") and v == "yes")
            cls = "fail" if bad else ("n" if isinstance(v, (int, float)) else "")
            cells.append(f'<td class="{cls}">' if cls else "<td>")
            cells.append(f"{html.escape(_cell(v))}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    errors = [r for r in rows if r.get("error")]
    if errors:
        out.append("<ul>" + "".join(f'<li class="fail">run {html.escape(_cell(r.get("run")))} '
                                    f"{html.escape(str(r.get('target')))} / {html.escape(str(r.get('model')))}: "
                                    f"{html.escape(str(r['error']))}</li>" for r in errors) + "</ul>")  # fmt: skip
    if _notes(rows):
        out.append("<ul>" + "".join(f'<li class="fail">run {html.escape(_cell(r.get("run")))} '
                                    f"{html.escape(str(r.get('target')))}: {html.escape(note)}</li>"
                                    for r, note in _notes(rows)) + "</ul>")  # fmt: skip
    return "\n".join(out)


def _slos(slos: list[dict] | None, note: str, named: list[tuple[str, dict]], rows: list[dict]) -> str:
    e = html.escape
    cut = [f"<li class='fail'>{e(lab)}: cut short ({e(str((res.get('aborted') or {}).get('reason')))})</li>"
           for lab, res in named if res.get("aborted")]  # fmt: skip
    cut_html = f"<ul>{''.join(cut)}</ul>" if cut else ""
    if not slos:
        return f"<p>no SLO given{e(': ' + note) if note else ''}</p>{cut_html}"
    head = f"<p>{e(verdict_line(rows, slos))}</p>"  # a run that failed is said as what failed, not as an SLO missed
    out = [head, "<table><tr><th>target</th><th>model</th><th>scenario</th><th>rep</th><th>SLO</th><th>measured</th>"
           "<th>verdict</th></tr>"]  # fmt: skip
    for s in slos:
        verdict = "pass" if s["pass"] else '<span class="fail">FAIL</span>'
        out.append("<tr>" + "".join(f"<td>{e(str(s[k]))}</td>" for k in ("target", "model", "scenario", "repetition",
                   "slo", "measured")) + f"<td>{verdict}</td></tr>")  # fmt: skip
    return "\n".join([*out, "</table>"])


def _env_of(res: dict) -> dict:
    """What a run ran on and with, as label -> text (the same dict for runs on the same setup)."""
    env, be, model = res.get("environment") or {}, res.get("backend") or {}, res.get("model") or {}

    def text(v) -> str:
        if isinstance(v, dict):
            return ", ".join(f"{k} {text(x)}" for k, x in v.items()) or "-"
        if isinstance(v, list):
            from edge_runtime.system.cpulist import format_cpu_list

            return (format_cpu_list(v) if all(isinstance(x, int) for x in v) else ", ".join(map(str, v))) or "none"
        return "-" if v is None else str(v)

    keys = ["board", "kernel", "cpu_model", "governor", "isolated_cpus", "python", "packages", "hostname", "sysroot"]
    out = {k: text(env.get(k)) for k in keys if k in env}
    if isinstance(env.get("measured_on"), dict):  # a --sysroot run: what the tree did not say, from the live machine
        seen = {k: v for k, v in env["measured_on"].items() if k != "note"}
        out["measured on"] = text(seen) + (f" ({env['measured_on']['note']})" if env["measured_on"].get("note") else "")
    fallback = text(be.get("fallback")) + (f" ({be['fallback_reason']})" if be.get("fallback_reason") else "")
    out.update({"backend": f"{text(be.get('name'))} {text(be.get('version'))}", "device": text(be.get("device")),
                "delegate": text(be.get("delegate")), "fallback": fallback, "model": text(model.get("path")),
                "precision": text(model.get("precision")), "sha256": text(model.get("sha256"))})  # fmt: skip
    return out


def _environments(named: list[tuple[str, dict]]) -> str:
    groups: dict[str, tuple[dict, list[str]]] = {}
    for lab, res in named:
        env = _env_of(res)
        groups.setdefault(json.dumps(env, sort_keys=True), (env, []))[1].append(lab)
    out = []
    for env, labs in groups.values():
        out.append(f"<h3>{html.escape(', '.join(labs))}</h3><table>")
        out += [f"<tr><th>{html.escape(k)}</th><td><code>{html.escape(v)}</code></td></tr>" for k, v in env.items()]
        out.append("</table>")
    return "\n".join(out) or '<p class="note">no environment: no run finished</p>'


# ----------------------------------------------------------------------------------------------------- plots
def _plots(named: list[tuple[str, dict]]) -> list[str]:
    """The three figures. What matplotlib warns of while drawing them goes into the page, under them, not to stderr:
    the page's reader can judge it, a CI log only gathers it. A glyph missing from matplotlib's font is not said at
    all: the SVG keeps its text as text, drawn by the browser's fonts (a board named in CJK, an emoji)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        figures = [_cdf(named), _timeline(named), _percentiles(named)]
    said = dict.fromkeys(" ".join(str(w.message).split()) for w in caught)
    said = [m for m in said if not re.match(r"Glyph \d+ .* missing from", m)]
    if said:
        figures.append(f'<p class="note">matplotlib: {html.escape("; ".join(said))}</p>')
    return figures


def _mpl_text(text: str) -> str:
    """A label as matplotlib shows it literally ('$' would start mathtext; a legend leaves out labels starting '_')."""
    return ("\u200b" if text.startswith("_") else "") + text.replace("$", r"\$")


def _svg(fig, fig_id: str) -> str:
    """The figure as inline SVG: text kept as text (searchable, small), no XML prologue or metadata, its ids prefixed
    so several plots in one page never share one."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": fig_id}):
        fig.savefig(buf, format="svg", bbox_inches="tight",
                    metadata={"Date": None, "Creator": None, "Format": None, "Type": None})  # fmt: skip
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    prefix = lambda m: f"{m.group(1)}{fig_id}-"  # noqa: E731 - in tags only: a label is text, and left alone
    svg = re.sub(r"<[^>]+>", lambda tag: re.sub(r'(\sid="|href="#|url\(#)', prefix, tag.group(0)), svg)
    return re.sub(r"\n\s*", "\n", svg)  # the indentation is a fifth of the file


def _figure(fig_id: str, fig, caption: str, extra: str = "") -> str:
    return f'<figure id="{fig_id}">\n{_svg(fig, fig_id)}\n<figcaption>{caption}</figcaption>{extra}</figure>'


def _new_figure(width: float, height: float, layout: str | None = "constrained"):
    from matplotlib.figure import Figure  # the object API: no pyplot, no GUI backend, no global state

    return Figure(figsize=(width, height), dpi=100, layout=layout)


def _legend_labels(labels: list[str]) -> list[str]:
    """What a legend shows of `labels`: at most MAX_LEGEND entries, each at most LEGEND_CHARS long, the last saying
    how many runs it leaves out."""
    cut = [lab if len(lab) <= LEGEND_CHARS else lab[: LEGEND_CHARS - 1] + "\u2026" for lab in labels]
    if len(cut) <= MAX_LEGEND:
        return cut
    return [*cut[: MAX_LEGEND - 1], f"+{len(cut) - MAX_LEGEND + 1} more (all are in the table)"]


def _legend_width(labels: list[str]) -> float:
    """Inches a legend of `labels` takes beside a plot (8 pt text): what a figure grows by, so the plot keeps its
    width however many runs or however long their names."""
    shown = _legend_labels(labels)
    return 0.7 + 0.07 * max((len(x) for x in shown), default=0) if shown else 0.0


def _legend(fig, ax) -> None:
    """The plot's runs named in one legend outside the axes, on the figure's right (a layout engine makes room for it).
    Inside the axes, a hundred runs' legend spilled below the plot and constrained_layout gave up, with a warning."""
    from matplotlib.lines import Line2D

    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    shown = _legend_labels(labels)
    handles = handles[: len(shown)]
    if len(shown) < len(labels):  # the "+K more" entry: text, no line
        handles[-1] = Line2D([], [], linestyle="none")
    fig.legend(handles, shown, loc="outside right upper", fontsize=8)


def _legend_note(n: int) -> str:
    """A caption's words on a legend of `n` runs that names only some."""
    return f" (the legend names the first {MAX_LEGEND - 1} of {n})" if n > MAX_LEGEND else ""


def _percentile_curve(histogram: list) -> tuple[list[float], list[float]]:
    """(1/(1-q), latency) steps of a histogram: HdrHistogram's percentile distribution, thinned to MAX_POINTS."""
    import numpy as np

    if not histogram:
        return [], []
    h = np.array(sorted(histogram), dtype=float)
    values, counts = h[:, 0], h[:, 1]
    total = counts.sum()
    if total <= 0:
        return [], []
    q_end = np.minimum(np.cumsum(counts) / total, 1 - 0.5 / total)  # the last bucket ends at 2 N, not at infinity
    q_start = np.concatenate([[0.0], q_end[:-1]])
    x = np.column_stack([1 / (1 - q_start), 1 / (1 - q_end)]).ravel()
    y = np.repeat(values, 2)
    if len(x) > MAX_POINTS:  # sample the curve at log-spaced ranks, keeping the maximum
        at = np.geomspace(1, x[-1], MAX_POINTS)
        idx = np.minimum(np.searchsorted(x, at, side="left"), len(x) - 1)
        x, y = np.append(at, x[-1]), np.append(y[idx], y[-1])
    return x.tolist(), y.tolist()


def _log_if_wide(ax, lows, highs, axis: str = "y") -> None:
    lo, hi = min(lows, default=0), max(highs, default=0)
    if lo > 0 and hi / lo > 20:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")


def _cdf(named: list[tuple[str, dict]]) -> str:
    drawn = [_mpl_text(lab) for lab, res in named if res.get("histogram_us")]
    fig = _new_figure(10 + _legend_width(drawn), 4.5)
    ax = fig.add_subplot()
    lows, highs, tops = [], [], [1.0]
    for lab, res in named:
        x, y = _percentile_curve(res.get("histogram_us") or [])
        if x:
            ax.plot(x, y, label=_mpl_text(lab), linewidth=1.4)
            lows.append(min(y))
            highs.append(max(y))
            tops.append(x[-1])
    ax.set_xscale("log")
    ticks = [t for t in (1, 2, 10, 100, 1000, 10_000, 100_000, 1_000_000) if t <= max(tops) * 1.01]
    names = {1: "0%", 2: "50%", 10: "90%", 100: "99%", 1000: "99.9%", 10_000: "99.99%", 100_000: "99.999%",
             1_000_000: "99.9999%"}  # fmt: skip
    ax.set_xticks(ticks, [names[t] for t in ticks])
    ax.minorticks_off()
    _log_if_wide(ax, lows, highs)
    ax.set_xlabel("percentile (log scale of 1 / (1 - q): the tail spread out)")
    ax.set_ylabel("latency (us)")
    ax.grid(True, alpha=0.3)
    _legend(fig, ax)
    missing = [lab for lab, res in named if not res.get("histogram_us")]
    cap = (f"Latency distribution per run{_legend_note(len(ax.lines))}: the latency (y) under which a share of "
           "queries (x) finished, from each run's histogram (1 us buckets); the right end of a line is the run's "
           "maximum.")  # fmt: skip
    if missing:
        cap += f" No histogram in: {', '.join(missing)}."
    return _figure("cdf", fig, html.escape(cap))


def _thin(points: list, n: int = MAX_POINTS) -> list[list]:
    """Consecutive points merged into at most n groups (each a list), in order."""
    if len(points) <= n:
        return [[p] for p in points]
    step = -(-len(points) // n)
    return [points[i : i + step] for i in range(0, len(points), step)]


def _latency_windows(windows: list[dict]) -> tuple[list, list, list, list]:
    """t, p50, p99, max per (merged) window: a merged group keeps its count-weighted p50 and its highest p99 and max."""
    t, p50, p99, top = [], [], [], []
    for group in _thin([w for w in windows if isinstance(w, dict) and w.get("t_s") is not None]):
        n = sum(max(int(w.get("count") or 0), 0) for w in group)
        mids = [(w.get("p50"), max(int(w.get("count") or 0), 0)) for w in group if w.get("p50") is not None]
        t.append(group[-1]["t_s"])
        p50.append(sum(v * c for v, c in mids) / n if n and mids else (mids[0][0] if mids else None))
        p99.append(max((w["p99"] for w in group if w.get("p99") is not None), default=None))
        top.append(max((w["max"] for w in group if w.get("max") is not None), default=None))
    return t, p50, p99, top


def _thermal_series(points: list[dict]) -> tuple[list, list, dict, list]:
    """t, hottest temperature, {cpu: MHz list} and the throttled spans [(from, to)] of a thermal timeline (thinned:
    each group's hottest point, so a peak is never thinned away)."""
    t, temp, freq, throttled = [], [], {}, []
    groups = _thin([p for p in points if isinstance(p, dict) and p.get("t_s") is not None])
    cpus = sorted({c for g in groups for p in g for c in (p.get("freq_khz") or {})}, key=lambda c: (len(c), c))
    for g in groups:
        p = max(g, key=lambda p: p.get("max_c") if p.get("max_c") is not None else float("-inf"))
        t.append(p["t_s"])
        temp.append(p.get("max_c"))
        for c in cpus:
            khz = (p.get("freq_khz") or {}).get(c)
            freq.setdefault(c, []).append(None if khz is None else khz / 1000)
        if any(q.get("throttled") for q in g):
            if throttled and throttled[-1][1] == (t[-2] if len(t) > 1 else None):  # the span goes on
                throttled[-1] = (throttled[-1][0], p["t_s"])
            else:
                throttled.append((p["t_s"], p["t_s"]))
    return t, temp, {c: v for c, v in freq.items() if any(x is not None for x in v)}, throttled


def _timeline(named: list[tuple[str, dict]]) -> str:
    import numpy as np

    shown = named[:MAX_TIMELINES]
    fig = _new_figure(12, 0.6 + 2.6 * len(shown), layout=None)
    # Fixed margins, not a layout engine: every run's plot gets the same width, whatever axes it has on the right.
    fig.subplots_adjust(left=0.07, right=0.85, top=1 - 0.3 / (0.6 + 2.6 * len(shown)), hspace=0.45)
    axes = fig.subplots(len(shown), 1, squeeze=False)[:, 0]
    no_lat, no_sensor = [], []
    for ax, (lab, res) in zip(axes, shown, strict=True):
        ax.set_ylabel("latency (us)")
        ax.grid(True, alpha=0.3)
        f = lambda v: np.array([np.nan if x is None else x for x in v], dtype=float)  # noqa: E731
        t, p50, p99, top = _latency_windows(res.get("timeline_us") or [])
        if t:
            ax.plot(t, f(top), ".", color="0.6", markersize=3, label="max")
            ax.plot(t, f(p99), color="tab:orange", linewidth=1.2, label="p99")
            ax.plot(t, f(p50), color="tab:blue", linewidth=1.2, label="p50")
            _log_if_wide(ax, [v for v in p50 if v], [v for v in top if v])
        else:
            no_lat.append(lab)
            ax.text(0.5, 0.5, NO_TIMELINE, transform=ax.transAxes, ha="center", va="center", color="0.4")
            ax.set_yticks([])
        tt, temp, freq, throttled = _thermal_series((res.get("thermal") or {}).get("timeline") or [])
        handles = list(ax.get_lines())
        if any(v is not None for v in temp):
            tax = ax.twinx()
            handles += tax.plot(tt, f(temp), color="tab:red", linewidth=1.2, label="temperature (hottest sensor)")
            tax.set_ylabel("temperature (°C)", color="tab:red")
        if freq:
            fax = ax.twinx()
            if any(v is not None for v in temp):
                fax.spines["right"].set_position(("outward", 55))
            for i, (cpu, mhz) in enumerate(freq.items()):
                handles += fax.plot(tt, f(mhz), color="tab:green", linestyle=("--", ":", "-.")[i % 3], linewidth=1,
                                    label=f"CPU {cpu} frequency")  # fmt: skip
            fax.set_ylabel("CPU frequency (MHz)", color="tab:green")
        for i, (start, end) in enumerate(throttled):
            span = ax.axvspan(start, end, color="tab:red", alpha=0.15, linewidth=2, label="throttled")
            handles += [span] if i == 0 else []
        title = _mpl_text(lab)
        if not freq and not any(v is not None for v in temp):
            no_sensor.append(lab)
            title += f" — {NO_SENSORS}"
        ax.set_title(title, fontsize=10, loc="left")
        if handles:
            ax.legend(handles=handles, labels=[h.get_label() for h in handles], fontsize=7, loc="upper left", ncol=3)
    axes[-1].set_xlabel("time in the measured part (s)")
    cap = ("Latency over each run, in windows (p50, p99, max; longer runs' windows merged, keeping the highest p99 and "
           "max), with the hottest sensor's temperature and the measured CPUs' frequency from the run's thermal "
           "sampler.")  # fmt: skip
    if no_lat:
        cap += f" {NO_TIMELINE.capitalize()}: {', '.join(no_lat)} (results without timeline_us)."
    if no_sensor:
        cap += f" No temperature or frequency readings (no sensors): {', '.join(no_sensor)}."
    if len(named) > len(shown):
        cap += f" Not drawn (only the first {MAX_TIMELINES}): {', '.join(lab for lab, _ in named[len(shown) :])}."
    return _figure("timeline", fig, html.escape(cap))


def _percentiles(named: list[tuple[str, dict]]) -> str:
    import numpy as np

    fig = _new_figure(10 + _legend_width([_mpl_text(lab) for lab, _ in named]), 4)
    ax = fig.add_subplot()
    width = 0.8 / len(named)
    values = []
    for i, (lab, res) in enumerate(named):
        lat = res.get("latency_us") or {}
        v = [lat.get(k) for k, _ in PERCENTILES]
        values.append(v)
        ax.bar(np.arange(len(PERCENTILES)) + (i - (len(named) - 1) / 2) * width,
               [np.nan if x is None else x for x in v], width, label=_mpl_text(lab))  # fmt: skip
    ax.set_xticks(range(len(PERCENTILES)), [name for _, name in PERCENTILES])
    flat = [x for v in values for x in v if x]
    _log_if_wide(ax, flat, flat)
    ax.set_ylabel("latency (us)")
    ax.grid(True, axis="y", alpha=0.3)
    _legend(fig, ax)
    e = html.escape
    table = ["<table><tr><th>run</th>" + "".join(f"<th>{n} (us)</th>" for _, n in PERCENTILES) + "</tr>"]
    table += [f"<tr><td>{e(lab)}</td>" + "".join(f'<td class="n">{e(_cell(x))}</td>' for x in v) + "</tr>"
              for (lab, _), v in zip(named, values, strict=True)]  # fmt: skip
    cap = (f"Percentiles of each run side by side{_legend_note(len(named))} (from the run's latency_us), and the "
           "same numbers:")
    return _figure("percentiles", fig, e(cap), "\n".join([*table, "</table>"]))
