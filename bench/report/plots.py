"""The HTML report's three figures, drawn with matplotlib into inline SVG (`<figure id="cdf">`: latency percentiles per
run, HdrHistogram style; `id="timeline"`: latency windows over the run with temperature and CPU frequency on a second
axis; `id="percentiles"`: p50 to max side by side). matplotlib is imported when a figure is drawn, never before; every
string that came from a user or a board is escaped (html.py builds the page around them)."""

from __future__ import annotations

import html
import io
import re

from bench.report import _cell

MAX_POINTS = 500  # per line: a long run's timeline or a wide histogram is thinned to this many points
MAX_TIMELINES = 12  # runs drawn in the timeline figure; the rest are named in its caption
MAX_LEGEND = 16  # entries in a figure's legend, the last one "+K more" when there are more runs (the tables name all)
LEGEND_CHARS = 40  # of a run's label in a legend; a longer one is cut (the tables show it whole)
PERCENTILES = (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99.9"), ("max", "max"))
NO_TIMELINE = "no latency timeline in this run"
NO_SENSORS = "no temperature or CPU frequency readings in this run (no sensors)"


def plots(named: list[tuple[str, dict]]) -> list[str]:
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
