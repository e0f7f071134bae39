"""The HTML report's figures as a reader sees them (issue 25, item 8), asserted on the real matplotlib figures built
from a real campaign store: two board targets run twice each and a Triton server (when .venv-triton is built), a
local target driven far past what it sustains (saturated), and one long run whose windows hold enough queries for a
p99. Legends sit outside every plot; the timeline's panels share one x axis and one y scale kind; a target keeps one
colour across its repetitions; a saturated run never shares the others' axes; the page puts the edge-vs-server
comparison right under the runs' table and says what its columns mean. Real runs, no mocks."""

from __future__ import annotations

import contextlib
import html
import os
import re
import subprocess
import sys

import pytest
import serverkit
from conftest import MODELS, ROOT, need
from helpers import sustained_ips

from bench.report import stored_row
from bench.store import Store

pytest.importorskip("matplotlib", reason="--html needs matplotlib: pip install 'edge-runtime[host]' (make test does)")
DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"
BOARDS = ("board-a", "board-b")


def edge_bench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env=dict(os.environ))  # fmt: skip


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """(the runs in the store, oldest first; the HTML report of them all, as text)."""
    need("onnxruntime")
    tmp = tmp_path_factory.mktemp("plots")
    store = tmp / "s.sqlite"
    triton_built = (serverkit.TRITON_VENV / ".done").exists()
    with contextlib.ExitStack() as stack:
        server = ""
        if triton_built:
            srv = stack.enter_context(serverkit.triton(DIGITS, "digits"))
            server = f"""
[[target]]
name = "triton"
url = "kserve+http://{srv.http}/digits"
[target.headers]
triton-access-token = "{srv.token}"
"""
        camp = tmp / "c.toml"
        camp.write_text(f"""
[campaign]
name = "plots"
repetitions = 2
[[target]]
name = "{BOARDS[0]}"
url = "local:"
cpus = "1"
[[target]]
name = "{BOARDS[1]}"
url = "local:"
cpus = "1"
threads = 1
{server}
[[model]]
name = "digits"
path = "{DIGITS}"
[[scenario]]
iterations = 300
""")
        proc = edge_bench("run", str(camp), "--store", str(store))
        assert proc.returncode == 0, proc.stderr
    over = tmp / "over.toml"  # 20 times what the model sustains here: the target falls behind, saturated
    over.write_text(f"""
[campaign]
name = "over"
[[target]]
name = "overloaded"
url = "local:"
cpus = "1"
[[model]]
path = "{DIGITS}"
[[scenario]]
kind = "server"
rate_qps = {min(20 * sustained_ips(str(DIGITS)), 1e6):.0f}
duration_s = 1
""")
    proc = edge_bench("run", str(over), "--store", str(store))
    assert proc.returncode == 0, proc.stderr
    # 200 windows of >= 1,000 queries each: the one run here whose windows are wide enough for a p99.
    proc = edge_bench("run", "--target", "local:", "--model", str(DIGITS), "--cpus", "1", "--iterations", "201000",
                      "--store", str(store))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with Store(store) as st:
        runs = list(reversed(st.runs()))
    page = tmp / "r.html"
    proc = edge_bench("report", *[str(r.id) for r in runs], "--store", str(store), "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    return runs, page.read_text()


def plot_runs_of(runs):
    """The PlotRuns the report draws: labelled and coloured as bench.report.html does it."""
    from bench.report.html import _labels
    from bench.report.plot_common import plot_runs

    rows = [stored_row(r) for r in runs]
    return plot_runs(list(zip(_labels(rows), [r.result for r in runs], strict=True)), [r.target for r in runs])


def drawn(fig):
    """The figure drawn once (Agg), and its renderer: what extents are measured with."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def figures_of(runs):
    from bench.report.plot_timeline import timeline_figure
    from bench.report.plots import cdf_figure, percentiles_figure

    pr = plot_runs_of(runs)
    return pr, {name: f(pr)[0] for name, f in (("cdf", cdf_figure), ("timeline", timeline_figure),
                                               ("percentiles", percentiles_figure))}  # fmt: skip


def test_every_legend_sits_outside_every_plot(stored):
    runs, _ = stored
    _, figs = figures_of(runs)
    for name, fig in figs.items():
        r = drawn(fig)
        (legend,) = fig.legends
        box = legend.get_window_extent(r)
        assert not any(ax.get_legend() for ax in fig.axes), name  # no legend inside a plot
        for ax in fig.axes:  # twin axes (temperature, frequency) included
            assert not box.overlaps(ax.get_window_extent(r)), (name, box, ax.get_window_extent(r))


def test_the_timeline_panels_share_one_x_axis_and_one_y_scale_kind(stored):
    from bench.report.plot_timeline import MAX_LABEL, MIN_P99_QUERIES, P99_LABEL

    runs, _ = stored
    pr, figs = figures_of(runs)
    fig = figs["timeline"]
    drawn(fig)
    panels = [ax for ax in fig.axes if ax.get_ylabel() in ("latency (us)", "latency (ms)")]
    assert len(panels) == len(runs)
    ends = [max(w["t_s"] for w in r.result["timeline_us"]) for r in runs]
    assert max(ends) > 3 * min(ends)  # runs of different lengths: a panel of its own range would differ
    assert len({ax.get_xlim() for ax in panels}) == 1 and panels[0].get_xlim()[1] >= max(ends)
    assert len({ax.get_yscale() for ax in panels}) == 1
    assert [bool(ax.get_xlabel()) for ax in panels] == [False] * (len(panels) - 1) + [True]
    kept = [ax for ax, r in zip(panels, pr, strict=True) if not r.saturated]
    assert len({ax.get_ylim() for ax in kept}) == 1  # the runs that kept up: one range to compare by eye
    for ax, r in zip(panels, pr, strict=True):
        lines = {line.get_label(): line for line in ax.get_lines()}
        wide = min(w["count"] for w in r.result["timeline_us"]) >= MIN_P99_QUERIES
        assert (P99_LABEL in lines) == wide, r.label  # a window's p99 only from >= 1,000 queries
        top = lines[MAX_LABEL]
        assert top.get_zorder() > max(x.get_zorder() for k, x in lines.items() if k != MAX_LABEL)
        assert top.get_linestyle() != lines["p50"].get_linestyle() and top.get_color() != lines["p50"].get_color()
    assert sum(min(w["count"] for w in r.result["timeline_us"]) >= MIN_P99_QUERIES for r in runs) == 1


def test_a_target_keeps_one_colour_across_its_repetitions(stored):
    from matplotlib.colors import to_hex

    runs, _ = stored
    pr, figs = figures_of(runs)
    by_label = {r.label: r for r in pr}
    assert {r.target for r in pr} >= set(BOARDS) and all(sum(r.target == t for r in pr) == 2 for t in BOARDS)
    lines = [line for ax in figs["cdf"].axes for line in ax.get_lines()]
    colours: dict[str, set] = {}
    styles: dict[str, set] = {}
    for line in lines:
        target = by_label[line.get_label()].target
        colours.setdefault(target, set()).add(to_hex(line.get_color()))
        styles.setdefault(target, set()).add(line.get_linestyle())
    assert all(len(c) == 1 for c in colours.values()), colours
    assert len({c for cs in colours.values() for c in cs}) == len(colours)  # targets told apart by colour
    assert all(len(styles[t]) == 2 for t in BOARDS), styles  # repetitions told apart by line style
    bars: dict[str, set] = {}
    for ax in figs["percentiles"].axes:
        for container in ax.containers:
            target = by_label[container.get_label()].target
            bars.setdefault(target, set()).update(to_hex(p.get_facecolor(), keep_alpha=False) for p in container)
    assert bars == colours


def test_a_saturated_run_is_on_axes_of_its_own(stored):
    from bench.report.plot_common import SATURATED_TITLE

    runs, _ = stored
    pr, figs = figures_of(runs)
    saturated = {r.label for r in pr if r.saturated}
    assert len(saturated) == 1 and len(pr) > 1
    for name in ("cdf", "percentiles"):
        labels = [{a.get_label() for a in [*ax.get_lines(), *ax.containers]} for ax in figs[name].axes]
        (own,) = [i for i, ls in enumerate(labels) if ls & saturated]
        assert labels[own] == saturated and figs[name].axes[own].get_title(loc="left") == SATURATED_TITLE, name
        assert all(not (ls & saturated) for i, ls in enumerate(labels) if i != own)
        assert figs[name].axes[own].get_ylabel() == "latency (ms)", name  # a queue's seconds, in the table's unit
    cdf = figs["cdf"].axes
    assert cdf[0].get_xlim() == cdf[1].get_xlim()  # the same percentile axis, only the latency scale its own


def test_the_page_puts_the_comparison_under_the_table_and_says_what_the_table_means(stored):
    runs, text = stored
    order = ["<h2>Runs</h2>", 'id="warnings"', '<section id="edge-vs-server">', "<h2>SLOs</h2>", "<h2>Latency</h2>",
             '<figure id="cdf">', "<h2>Environment</h2>"]  # fmt: skip
    if any(r.target == "triton" for r in runs):  # a board and a server on one model: the comparison is there
        assert '<section id="edge-vs-server">' in text
    order = [x for x in order if x in text]  # without .venv-triton no server ran; without warnings, no list
    at = [text.index(x) for x in order]
    assert at == sorted(at), dict(zip(order, at, strict=True))
    for column in ("valid", "quality", "saturated yes", "achieved of scheduled (queries/s)"):  # the legend
        assert f"<strong>{column}</strong>: " in text, column
    (over,) = [r for r in runs if (r.result.get("scenario") or {}).get("saturated")]
    sc = over.result["scenario"]
    row = re.search(rf"<tr><td class=\"n\">{over.id}</td>.*?</tr>", text).group(0)
    assert re.search(r'<td class="w fail" title="achieved [\d,.]+ of [\d,.]+ queries/s: saturated">', row), row
    assert f"{sc['achieved_qps']:,.0f} of {sc['scheduled_qps']:,.0f}</td>" in row
    section = text[text.index("<h2>Runs</h2>") : text.index("<h2>SLOs</h2>")]
    assert text.index('<section id="answer">') < text.index("<h2>Runs</h2>")  # the answer first
    for r in runs:  # every quality warning of every run is said, under the table (the saturation one with the rates)
        for w in r.result["quality"]["warnings"]:
            if not w.startswith("saturated:"):
                assert html.escape(w) in section, w
