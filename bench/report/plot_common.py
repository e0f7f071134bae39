"""What the HTML report's figures share (bench.report.plots: the CDF and the percentile bars;
bench.report.plot_timeline: latency over time): the runs as the figures draw them, each target's colour and each
repetition's look, the panels that keep a saturated run apart, and matplotlib figures turned into inline SVG.
matplotlib is imported when a figure is drawn, never at import.

What the figures promise a reader (issue 25, item 8): a target keeps one colour in every figure and its repetitions
differ by line style (bars: by hatch and shade), never by colour; legends sit outside the plots; a saturated run (its
target fell behind the schedule, so its latencies are its queue's) is drawn on a panel of its own with its own latency
scale, so it squashes no other run's line or bar.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

MAX_POINTS = 500  # per line: a long run's timeline or a wide histogram is thinned to this many points
PERCENTILES = (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99.9"), ("max", "max"))
NO_TIMELINE = "no latency timeline in this run"
NO_SENSORS = "no temperature or CPU frequency readings in this run (no sensors)"
SATURATED_TITLE = "saturated runs, on their own latency scale (their target fell behind the schedule)"
# A repetition's look: the k-th run of a target (k from 0) takes entry k % 4 of each (colour stays the target's).
LINESTYLES = ("-", "--", ":", "-.")
HATCHES = ("", "//", "..", "xx")
ALPHAS = (1.0, 0.75, 0.6, 0.45)


@dataclass(frozen=True)
class PlotRun:
    """A run as the figures draw it: its label, its record, its target's colour and its repetition's look."""

    label: str
    result: dict
    target: str
    colour: str
    repetition: int  # the how-many-th run of its target in this report, from 0
    saturated: bool

    @property
    def linestyle(self) -> str:
        return LINESTYLES[self.repetition % len(LINESTYLES)]

    @property
    def hatch(self) -> str:
        return HATCHES[self.repetition % len(HATCHES)]

    @property
    def alpha(self) -> float:
        return ALPHAS[self.repetition % len(ALPHAS)]


def plot_runs(named: list[tuple[str, dict]], targets: list[str] | None = None) -> list[PlotRun]:
    """`named` (label, result) as PlotRuns: one colour per distinct target (`targets[i]` names run i's; the label
    when not given), in the order targets first appear (tab10, tab20 past ten targets, then again)."""
    import matplotlib

    targets = targets or [lab for lab, _ in named]
    order = list(dict.fromkeys(targets))
    palette = matplotlib.colormaps["tab10" if len(order) <= 10 else "tab20"].colors
    colour = {t: matplotlib.colors.to_hex(palette[i % len(palette)]) for i, t in enumerate(order)}
    seen: dict[str, int] = {}
    out = []
    for (lab, res), target in zip(named, targets, strict=True):
        k = seen[target] = seen.get(target, -1) + 1
        out.append(PlotRun(lab, res, target, colour[target], k, bool((res.get("scenario") or {}).get("saturated"))))
    return out


def panels(runs: list[PlotRun]) -> list[tuple[list[PlotRun], str | None]]:
    """The runs that kept up on one panel, the saturated ones on another below it (title None: the main panel)."""
    kept, saturated = [r for r in runs if not r.saturated], [r for r in runs if r.saturated]
    return [(group, title) for group, title in ((kept, None), (saturated, SATURATED_TITLE)) if group]


def unit_of(values_us) -> tuple[str, float]:
    """A latency axis's unit and what its values in us are divided by: ms once the largest reaches 10 ms, as a table
    column's (bench.report.units.latency_unit), so a plot and the table above it say one number one way."""
    from bench.report.units import latency_unit

    unit = latency_unit(list(values_us))
    return unit, 1000.0 if unit == "ms" else 1.0


def plain_ticks(ax) -> None:
    """The latency axis's numbers as people write them (0.01, 20, 3000), not as powers of ten: log axes included."""
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.10g}"))


def mpl_text(text: str) -> str:
    """A label as matplotlib shows it literally ('$' would start mathtext; a legend leaves out labels starting '_')."""
    return ("\u200b" if text.startswith("_") else "") + text.replace("$", r"\$")


def svg(fig, fig_id: str) -> str:
    """The figure as inline SVG: text kept as text (searchable, small), no XML prologue or metadata, its ids prefixed
    so several plots in one page never share one."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": fig_id}):
        fig.savefig(buf, format="svg", bbox_inches="tight",
                    metadata={"Date": None, "Creator": None, "Format": None, "Type": None})  # fmt: skip
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    prefix = lambda m: f"{m.group(1)}{fig_id}-"  # noqa: E731 - in tags only: a label is text, and left alone
    text = re.sub(r"<[^>]+>", lambda tag: re.sub(r'(\sid="|href="#|url\(#)', prefix, tag.group(0)), text)
    return re.sub(r"\n\s*", "\n", text)  # the indentation is a fifth of the file


def figure_html(fig_id: str, fig, caption: str, extra: str = "") -> str:
    return f'<figure id="{fig_id}">\n{svg(fig, fig_id)}\n<figcaption>{caption}</figcaption>{extra}</figure>'


def new_figure(width: float, height: float, layout: str | None = "constrained"):
    from matplotlib.figure import Figure  # the object API: no pyplot, no GUI backend, no global state

    return Figure(figsize=(width, height), dpi=100, layout=layout)


def thin(points: list, n: int = MAX_POINTS) -> list[list]:
    """Consecutive points merged into at most n groups (each a list), in order."""
    if len(points) <= n:
        return [[p] for p in points]
    step = -(-len(points) // n)
    return [points[i : i + step] for i in range(0, len(points), step)]


def thermal_series(points: list[dict]) -> tuple[list, list, dict, list]:
    """t, hottest temperature, {cpu: MHz list} and the throttled spans [(from, to)] of a thermal timeline (thinned:
    each group's hottest point, so a peak is never thinned away)."""
    t, temp, freq, throttled = [], [], {}, []
    groups = thin([p for p in points if isinstance(p, dict) and p.get("t_s") is not None])
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
