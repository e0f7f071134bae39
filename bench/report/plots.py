"""The HTML report's three figures, drawn with matplotlib into inline SVG (`<figure id="cdf">`: latency percentiles per
run, HdrHistogram style; `id="timeline"`: latency windows over the run with temperature and CPU frequency on a second
axis, in bench.report.plot_timeline; `id="percentiles"`: p50 to max side by side). matplotlib is imported when a
figure is drawn, never before; every string that came from a user or a board is escaped (html.py builds the page
around them). What every figure promises a reader (colours, legends, saturated runs): bench.report.plot_common.
"""

from __future__ import annotations

import html
import re

from bench.report.plot_common import (  # noqa: F401 - NO_SENSORS, NO_TIMELINE: the tests' and callers' names for them
    MAX_POINTS,
    NO_SENSORS,
    NO_TIMELINE,
    PERCENTILES,
    PlotRun,
    figure_html,
    mpl_text,
    new_figure,
    panels,
    plain_ticks,
    plot_runs,
    unit_of,
)

MAX_LEGEND = 16  # entries in a figure's legend, the last one "+K more" when there are more runs (the tables name all)
LEGEND_CHARS = 40  # of a run's label in a legend; a longer one is cut (the tables show it whole)


def plots(named: list[tuple[str, dict]], targets: list[str] | None = None) -> list[str]:
    """The three figures of `named` (label, result), `targets` naming each run's target (its colour). What matplotlib
    warns of while drawing them goes into the page, under them, not to stderr: the page's reader can judge it, a CI
    log only gathers it. A glyph missing from matplotlib's font is not said at all: the SVG keeps its text as text,
    drawn by the browser's fonts (a board named in CJK, an emoji)."""
    import warnings

    from bench.report.plot_timeline import timeline

    with warnings.catch_warnings(record=True) as caught:
        runs = plot_runs(named, targets)
        figures = [_cdf(runs), timeline(runs), _percentiles(runs)]
    said = dict.fromkeys(" ".join(str(w.message).split()) for w in caught)
    said = [m for m in said if not re.match(r"Glyph \d+ .* missing from", m)]
    if said:
        figures.append(f'<p class="note">matplotlib: {html.escape("; ".join(said))}</p>')
    return figures


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


def _legend(fig, axes) -> None:
    """The figure's runs named in one legend outside the axes, on the figure's right (a layout engine makes room for
    it), each run once whatever panel it is on. Inside the axes it hid the data, and a hundred runs' legend spilled
    below the plot and constrained_layout gave up, with a warning."""
    from matplotlib.lines import Line2D

    handles, labels = [], []
    for ax in axes:
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
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


def cdf_figure(runs: list[PlotRun]):
    """(the figure, its caption): each run's latency against its percentile, the saturated runs on a panel below."""
    groups = panels([r for r in runs if r.result.get("histogram_us")]) or [([], None)]
    fig = new_figure(10 + _legend_width([mpl_text(r.label) for g, _ in groups for r in g]), 0.5 + 4 * len(groups))
    axes = fig.subplots(len(groups), 1, squeeze=False, sharex=True)[:, 0]
    tops = [1.0]
    for ax, (group, title) in zip(axes, groups, strict=True):
        curves = [_percentile_curve(r.result["histogram_us"]) for r in group]
        unit, div = unit_of(max(y) for _, y in curves)
        for r, (x, y) in zip(group, curves, strict=True):
            ax.plot(x, [v / div for v in y], label=mpl_text(r.label), color=r.colour, linestyle=r.linestyle,
                    linewidth=1.4)  # fmt: skip
            tops.append(x[-1])
        _log_if_wide(ax, [min(y) for _, y in curves], [max(y) for _, y in curves])
        ax.set_ylabel(f"latency ({unit})")
        plain_ticks(ax)
        ax.grid(True, alpha=0.3)
        if title:
            ax.set_title(title, fontsize=10, loc="left")
    axes[0].set_xscale("log")  # shared: every panel's x is the same percentile scale
    ticks = [t for t in (1, 2, 10, 100, 1000, 10_000, 100_000, 1_000_000) if t <= max(tops) * 1.01]
    names = {1: "0%", 2: "50%", 10: "90%", 100: "99%", 1000: "99.9%", 10_000: "99.99%", 100_000: "99.999%",
             1_000_000: "99.9999%"}  # fmt: skip
    axes[0].set_xticks(ticks, [names[t] for t in ticks])
    for ax in axes:
        ax.minorticks_off()
    axes[-1].set_xlabel("percentile (log scale of 1 / (1 - q): the tail spread out)")
    _legend(fig, axes)
    missing = [r.label for r in runs if not r.result.get("histogram_us")]
    n = sum(len(g) for g, _ in groups)
    cap = (f"Latency distribution per run{_legend_note(n)}: the latency (y) under which a share of queries (x) "
           "finished, from each run's histogram (1 us buckets); the right end of a line is the run's maximum. A "
           "target keeps one colour; its repetitions differ by line style.")  # fmt: skip
    if len(groups) > 1:
        cap += (" Saturated runs are on the lower panel, on their own latency scale: their latencies are the queue of "
                "a target that fell behind, and would flatten every other line.")  # fmt: skip
    if missing:
        cap += f" No histogram in: {', '.join(missing)}."
    return fig, cap


def _cdf(runs: list[PlotRun]) -> str:
    fig, cap = cdf_figure(runs)
    return figure_html("cdf", fig, html.escape(cap))


def _shown(lat: dict) -> list:
    """A run's PERCENTILES in us, None for one it holds too few queries for (it would be its max: the runs' table
    shows '-' there too, bench.report.units.shown_for)."""
    from bench.report.units import shown_for

    return [lat.get(k) if shown_for(k, lat.get("count")) else None for k, _ in PERCENTILES]


def percentiles_figure(runs: list[PlotRun]):
    """(the figure, its caption): each run's p50 to max as bars, the saturated runs on a panel below."""
    import numpy as np

    groups = panels(runs)
    fig = new_figure(10 + _legend_width([mpl_text(r.label) for r in runs]), 0.5 + 3.5 * len(groups))
    axes = fig.subplots(len(groups), 1, squeeze=False)[:, 0]
    for ax, (group, title) in zip(axes, groups, strict=True):
        width = 0.8 / max(len(group), 3)  # one run's bars no wider than three runs' would be
        values = [_shown(r.result.get("latency_us") or {}) for r in group]
        flat = [x for v in values for x in v if x]
        unit, div = unit_of(flat)
        for i, (r, v) in enumerate(zip(group, values, strict=True)):
            ax.bar(np.arange(len(PERCENTILES)) + (i - (len(group) - 1) / 2) * width,
                   [np.nan if x is None else x / div for x in v], width, label=mpl_text(r.label), color=r.colour,
                   alpha=r.alpha, hatch=r.hatch, edgecolor="white", linewidth=0.5)  # fmt: skip
        ax.set_xticks(range(len(PERCENTILES)), [name for _, name in PERCENTILES])
        _log_if_wide(ax, flat, flat)
        ax.set_ylabel(f"latency ({unit})")
        plain_ticks(ax)
        ax.grid(True, axis="y", alpha=0.3)
        if title:
            ax.set_title(title, fontsize=10, loc="left")
    _legend(fig, axes)
    cap = (f"Percentiles of each run side by side{_legend_note(len(runs))} (from the run's latency_us); a target "
           "keeps one colour, its repetitions differ by hatch and shade; a percentile is left out of a run too short "
           "for it (p99 needs 100 queries, p99.9 1,000: below that it is the max)")  # fmt: skip
    cap += "; saturated runs on the lower panel, on their own scale. The same numbers:" if len(groups) > 1 else \
        ". The same numbers:"  # fmt: skip
    return fig, cap


def _percentiles(runs: list[PlotRun]) -> str:
    from bench.report.units import in_unit

    e = html.escape
    fig, cap = percentiles_figure(runs)
    lats = [dict(zip([k for k, _ in PERCENTILES], _shown(r.result.get("latency_us") or {}), strict=True)) for r in runs]
    units = {k: unit_of(lat.get(k) for lat in lats)[0] for k, _ in PERCENTILES}  # one unit a column, as the table's
    table = ["<table><tr><th>run</th>" + "".join(f"<th>{n} ({units[k]})</th>" for k, n in PERCENTILES) + "</tr>"]
    for r, lat in zip(runs, lats, strict=True):
        cells = "".join(f'<td class="n">{e(in_unit(lat.get(k), units[k]))}</td>' for k, _ in PERCENTILES)
        table.append(f"<tr><td>{e(r.label)}</td>{cells}</tr>")
    return figure_html("percentiles", fig, e(cap), "\n".join([*table, "</table>"]))
