"""The HTML report's latency-over-time figure (`<figure id="timeline">`): one panel per run, latency windows with the
hottest sensor's temperature and the measured CPUs' frequency on second axes. matplotlib is imported by the caller
(bench.report.plots) before anything here draws; every label goes through `_mpl_text`.

The panels are read together, so they share what a reader compares by eye (issue 25, item 8): one x axis (the same
seconds in every panel, one label under the last), one y scale kind (log or linear, chosen from every panel's data,
never a mix), one y range for the runs that kept up (a saturated run's queue gets its own range: it would squash the
others to a line) and one legend above the panels, outside every plot.

A window's p99 is drawn only where the window holds at least MIN_P99_QUERIES queries. The runtime cuts a run into up
to 200 windows (edge_runtime.measure.stats.TIMELINE_WINDOWS), so a run of 3,000 queries has windows of 15, and the
nearest-rank p99 of 15 samples *is* their maximum: drawn as "p99" it told a reader the tail was the max. Below that
size a panel shows p50 and max, and says so in its title.
"""

from __future__ import annotations

import html

from bench.report.plot_common import (
    NO_SENSORS,
    NO_TIMELINE,
    PlotRun,
    figure_html,
    mpl_text,
    new_figure,
    plain_ticks,
    thermal_series,
    thin,
    unit_of,
)

MAX_TIMELINES = 12  # runs drawn in the timeline figure; the rest are named in its caption
MIN_P99_QUERIES = 1000  # a window's p99 is drawn only from this many queries: ten above it, not the window's max
PANEL_IN = 2.6  # inches per run's panel
LEGEND_IN = 0.55  # inches above the first panel for the figure's one legend
P99_LABEL = f"p99 (windows of >= {MIN_P99_QUERIES:,} queries)"
MAX_LABEL = "max (per window)"


def _latency_windows(windows: list[dict]) -> tuple[list, list, list, list, int]:
    """t, p50, p99, max per (merged) window, and the fewest queries in a window: a merged group keeps its
    count-weighted p50 and its highest max, and its highest p99 only where every window in it held MIN_P99_QUERIES."""
    t, p50, p99, top, fewest = [], [], [], [], None
    for group in thin([w for w in windows if isinstance(w, dict) and w.get("t_s") is not None]):
        counts = [max(int(w.get("count") or 0), 0) for w in group]
        n = sum(counts)
        fewest = n if fewest is None else min(fewest, n)
        mids = [(w.get("p50"), c) for w, c in zip(group, counts, strict=True) if w.get("p50") is not None]
        t.append(group[-1]["t_s"])
        p50.append(sum(v * c for v, c in mids) / n if n and mids else (mids[0][0] if mids else None))
        enough = min(counts) >= MIN_P99_QUERIES
        p99.append(max((w["p99"] for w in group if w.get("p99") is not None), default=None) if enough else None)
        top.append(max((w["max"] for w in group if w.get("max") is not None), default=None))
    return t, p50, p99, top, fewest or 0


def _series(runs: list[PlotRun]) -> list[tuple]:
    return [_latency_windows(r.result.get("timeline_us") or []) for r in runs]


def _y_policy(series: list[tuple], runs: list[PlotRun]) -> tuple[bool, tuple[float, float] | None]:
    """(log scale?, the y range of the runs that kept up): one scale kind for every panel, from all their data."""
    every = [v for s in series for v in (*s[1], *s[3]) if v]
    kept = [v for s, r in zip(series, runs, strict=True) if not r.saturated for v in (*s[1], *s[3]) if v]
    log = bool(every) and min(every) > 0 and max(every) / min(every) > 20
    if not kept:
        return log, None
    lo, hi = min(kept), max(kept)
    return log, ((lo / 1.5, hi * 1.5) if log else (0, hi * 1.08))


def timeline_figure(runs: list[PlotRun]):
    """(the figure, its caption) of the first MAX_TIMELINES runs."""
    import numpy as np

    shown = runs[:MAX_TIMELINES]
    height = LEGEND_IN + 0.5 + PANEL_IN * len(shown)
    fig = new_figure(12, height, layout=None)
    # Fixed margins, not a layout engine: every run's plot gets the same width, whatever axes it has on the right.
    fig.subplots_adjust(left=0.07, right=0.85, top=1 - (LEGEND_IN + 0.3) / height, bottom=0.5 / height, hspace=0.5)
    axes = fig.subplots(len(shown), 1, squeeze=False, sharex=True)[:, 0]
    series = _series(shown)
    log, kept_range = _y_policy(series, shown)
    kept_unit = unit_of(v for s, r in zip(series, shown, strict=True) if not r.saturated for v in s[3] if v)
    f = lambda v, div=1.0: np.array([np.nan if x is None else x / div for x in v], dtype=float)  # noqa: E731
    handles: dict[str, object] = {}
    no_lat, no_sensor = [], []
    for ax, run, (t, p50, p99, top, fewest) in zip(axes, shown, series, strict=True):
        unit, div = unit_of(v for v in top if v) if run.saturated else kept_unit  # a saturated run: its own range
        ax.set_ylabel(f"latency ({unit})")
        ax.grid(True, alpha=0.3)
        title = mpl_text(run.label)
        if t:
            lines = ax.plot(t, f(p50, div), color="tab:blue", linewidth=1.2, label="p50")
            if any(v is not None for v in p99):
                lines += ax.plot(t, f(p99, div), color="tab:orange", linewidth=1.2, label=P99_LABEL)
            # The max last and on top, dotted with markers: above p99 in value and in drawing order, never hidden.
            lines += ax.plot(t, f(top, div), color="black", linestyle=":", linewidth=0.9, marker=".", markersize=3,
                             label=MAX_LABEL, zorder=3)  # fmt: skip
            handles.update((h.get_label(), h) for h in lines)
            if log:
                ax.set_yscale("log")
            plain_ticks(ax)
            if run.saturated:
                title += " — SATURATED: its own y range"
            elif kept_range:
                ax.set_ylim(kept_range[0] / div, kept_range[1] / div)
            if fewest < MIN_P99_QUERIES:
                title += f" — windows of {fewest:,} queries: too few for a p99"
        else:
            no_lat.append(run.label)
            ax.text(0.5, 0.5, NO_TIMELINE, transform=ax.transAxes, ha="center", va="center", color="0.4")
            ax.set_yticks([])
        sensed = _sensors(ax, run, handles, f)
        if not sensed:
            no_sensor.append(run.label)
            title += f" — {NO_SENSORS}"
        ax.set_title(title, fontsize=10, loc="left", color=run.colour)
    for ax in axes[:-1]:
        ax.tick_params(labelbottom=False)  # one x axis: its numbers and its label under the last panel only
    axes[-1].set_xlabel("time in the measured part (s)")
    if handles:  # latency first, low to high, then the sensors in the order the panels met them
        first = [k for k in ("p50", P99_LABEL, MAX_LABEL) if k in handles]
        handles = {k: handles[k] for k in [*first, *(k for k in handles if k not in first)]}
        fig.legend(list(handles.values()), list(handles), loc="upper left", ncol=min(len(handles), 6), fontsize=8,
                   bbox_to_anchor=(0.07, 1 - 0.08 / height))  # fmt: skip
    return fig, _caption(runs, shown, no_lat, no_sensor, log)


def _sensors(ax, run: PlotRun, handles: dict, f) -> bool:
    """The run's temperature and CPU frequencies on second axes, its throttled spans shaded; False when it has none."""
    tt, temp, freq, throttled = thermal_series((run.result.get("thermal") or {}).get("timeline") or [])
    has_temp = any(v is not None for v in temp)
    if has_temp:
        tax = ax.twinx()
        handles.update((h.get_label(), h) for h in tax.plot(tt, f(temp), color="tab:red", linewidth=1.2,
                                                             label="temperature (hottest sensor)"))  # fmt: skip
        tax.set_ylabel("temperature (°C)", color="tab:red")
    if freq:
        fax = ax.twinx()
        if has_temp:
            fax.spines["right"].set_position(("outward", 55))
        for i, (cpu, mhz) in enumerate(freq.items()):
            (line,) = fax.plot(tt, f(mhz), color="tab:green", linestyle=("--", ":", "-.")[i % 3], linewidth=1,
                               label=f"CPU {cpu} frequency")  # fmt: skip
            handles.setdefault(line.get_label(), line)
        fax.set_ylabel("CPU frequency (MHz)", color="tab:green")
    for start, end in throttled:
        span = ax.axvspan(start, end, color="tab:red", alpha=0.15, linewidth=2, label="throttled")
        handles.setdefault("throttled", span)
    return has_temp or bool(freq)


def _caption(runs, shown, no_lat, no_sensor, log: bool) -> str:
    cap = ("Latency over each run, in windows of equal query count (p50, p99, max; a long run's windows merged, "
           "keeping the highest p99 and max), on one time axis and one "
           f"{'log' if log else 'linear'} latency scale (the runs that kept up share its range; a saturated run has "
           "its own), with the hottest sensor's temperature and the measured CPUs' frequency from the run's thermal "
           f"sampler. A window's p99 is drawn only where the window holds at least {MIN_P99_QUERIES:,} queries: the "
           "p99 of fewer is a few samples from the max (of 15, it is the max).")  # fmt: skip
    if no_lat:
        cap += f" {NO_TIMELINE.capitalize()}: {', '.join(no_lat)} (results without timeline_us)."
    if no_sensor:
        cap += f" No temperature or frequency readings (no sensors): {', '.join(no_sensor)}."
    ends = [max((w.get("t_s") or 0 for w in r.result.get("timeline_us") or [{}]), default=0) for r in shown]
    if ends and min(ends) > 0 and max(ends) > 5 * min(ends):
        cap += (" The runs differ in length (the shortest is a small part of the shared time axis): give their "
                "scenarios one duration_s to compare them over time.")  # fmt: skip
    if len(runs) > len(shown):
        cap += f" Not drawn (only the first {MAX_TIMELINES}): {', '.join(r.label for r in runs[len(shown) :])}."
    return cap


def timeline(runs: list[PlotRun]) -> str:
    fig, cap = timeline_figure(runs)
    return figure_html("timeline", fig, html.escape(cap))
