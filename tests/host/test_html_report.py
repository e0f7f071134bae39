"""The HTML report (`--html`) of a campaign, of a one-off run and of stored runs: one self-contained file that reaches
nothing on the network, with the three plots (ids cdf, timeline, percentiles), SLO verdicts, the table and each
environment once; a run measured against a captured board tree (temperatures and frequencies) draws them on a second
axis; a result from before `timeline_us` says so. Headless Chromium opens it and draws it. Real runs, no mocks."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import MODELS, ROOT, need
from helpers import fixture

from bench.report.plots import NO_SENSORS, NO_TIMELINE
from bench.store import Store

pytest.importorskip("matplotlib", reason="--html needs matplotlib: pip install 'edge-runtime[host]' (make test does)")
DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"
FIGURES = ("cdf", "timeline", "percentiles")
SVG_NAMESPACES = {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
ODD_TARGET = 'old<board> & "$5"'  # a board named by a user: escaped in HTML, shown literally by matplotlib


def edge_bench(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env={**os.environ, **(env or {})})  # fmt: skip


def one_line(proc, *needles: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("edge-bench: error: "), proc.stderr
    assert all(n in lines[0] for n in needles), lines[0]


def figures(text: str) -> dict[str, str]:
    return dict(re.findall(r'<figure id="([a-z]+)">(.*?)</figure>', text, flags=re.S))


def svg_of(figure: str) -> str:
    return figure[figure.index("<svg") : figure.index("</svg>")]


def assert_self_contained(text: str) -> None:
    """Nothing a browser would fetch: no script, no linked style, font or image, no URL but the SVG namespaces."""
    assert set(re.findall(r"https?://[^\s\"'<>)]+", text)) <= SVG_NAMESPACES
    assert not re.search(r"<script|<link|<img|<iframe|@import|\bsrc=", text, flags=re.I)
    assert all(u.startswith("#") for u in re.findall(r"url\(([^)]*)\)", text))
    assert all(h.startswith("#") for h in re.findall(r'href="([^"]*)"', text))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A campaign of two local targets (with --html), a run measured against the x86 capture (temperatures and
    frequencies), and that run again as a board from before timeline_us, all in one store."""
    need("onnxruntime")
    tmp = tmp_path_factory.mktemp("html")
    store = tmp / "s.sqlite"
    camp = tmp / "c.toml"
    camp.write_text(f"""
[campaign]
name = "html-report"
[[target]]
name = "ort-1"
url = "local:"
cpus = "1"
[[target]]
name = "ort-1-t1"
url = "local:"
cpus = "1"
threads = 1
[[model]]
name = "digits"
path = "{DIGITS}"
[[scenario]]
kind = "single-stream"
iterations = 300
[slo]
p99_ms = 50
""")
    proc = edge_bench("run", str(camp), "--store", str(store), "--html", str(tmp / "campaign.html"))
    assert proc.returncode == 0, proc.stderr
    sysroot = tmp / "x86"
    shutil.copytree(fixture("x86-node-exporter"), sysroot)
    proc = subprocess.run([sys.executable, "-m", "edge_runtime.cli", "bench", str(DIGITS), "--sysroot", str(sysroot),
                           "--cpus", "1", "--duration", "1.2", "--json", str(tmp / "x86.json")], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    captured = json.loads((tmp / "x86.json").read_text())
    assert captured["thermal"]["timeline"] and captured["thermal"]["timeline"][0]["freq_khz"]
    old = {k: v for k, v in captured.items() if k != "timeline_us"}
    with Store(store) as st:
        ids = [r.id for r in reversed(st.runs())]
        ids += [st.add_run(captured, target="x86-capture"), st.add_run(old, target=ODD_TARGET)]
        results = {r.target: r.result for r in (st.run(i) for i in ids)}
    return tmp, store, ids, results


def test_a_campaign_html_has_its_plots_and_slo_verdicts(runs):
    tmp, *_ = runs
    text = (tmp / "campaign.html").read_text()
    assert_self_contained(text)
    assert set(figures(text)) == set(FIGURES)
    assert "all 2 SLO checks pass" in text and "p99 &lt;= 50 ms" in text
    assert re.search(r"<th>p99 (us|ms)</th>", text) and "Campaign html-report" in text  # the terminal's headers
    legend = svg_of(figures(text)["cdf"])
    assert "ort-1-t1" in legend and ">ort-1<" in legend  # one line per target, named


def test_stored_runs_render_with_temperature_frequency_and_the_old_result_note(runs):
    tmp, store, ids, results = runs
    out = tmp / "report.html"
    proc = edge_bench("report", *map(str, ids), "--html", str(out), "--store", str(store))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert len(text) < 1_000_000  # paths, not embedded data: 4 runs are a few hundred kB
    assert_self_contained(text)
    figs = figures(text)
    assert list(figs) == list(FIGURES)
    for name, body in figs.items():
        svg = svg_of(body)
        assert len(re.findall(r"<path d=", svg)) > 20, name
        assert "<figcaption>" in body
    ids_ = re.findall(r'\sid="([^"]+)"', text)  # three SVGs in one page: no id twice, every reference resolves
    assert len(ids_) == len(set(ids_)) and set(re.findall(r'(?:href="#|url\(#)([^")]+)', text)) <= set(ids_)
    timeline = svg_of(figs["timeline"])
    assert "temperature (°C)" in timeline and "CPU frequency (MHz)" in timeline
    assert timeline.count(NO_TIMELINE) == sum("timeline_us" not in r for r in results.values()) >= 1
    no_sensors = [t for t, r in results.items() if not any(p.get("max_c") is not None or p.get("freq_khz")
                                                           for p in r["thermal"].get("timeline") or [])]  # fmt: skip
    assert timeline.count(NO_SENSORS) == len(no_sensors)  # this VM has none: the campaign's runs
    # Every string from a user or a board is escaped; matplotlib shows the odd name literally, not as mathtext.
    assert "old<board>" not in text and "old&lt;board&gt; &amp; &quot;$5&quot;" in text
    assert 'old&lt;board&gt; &amp; "$5"' in svg_of(figs["cdf"])
    # The campaign's runs keep the verdicts they were given when they ran; the two added by hand have none
    assert "all 2 SLO checks pass" in text and "p99 &lt;= 50 ms" in text
    # The environment: the capture's board and the model's hash; the two x86 runs share one environment.
    assert "Dell Inc. PowerEdge R6515" in text and results["x86-capture"]["model"]["sha256"] in text
    heads = re.findall(r"<h3>(.*?)</h3>", text[text.index("<h2>Environment</h2>") :])
    assert len(heads) == 2 and any("x86-capture" in h and "old&lt;board&gt;" in h for h in heads), heads
    assert all(f"<td>{i}</td>" in text or f'<td class="n">{i}</td>' in text for i in ids)


def test_chromium_draws_the_report(runs):
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium not installed: apt-get install chromium (make test installs it when root)")
    from PIL import Image

    tmp, store, ids, _ = runs
    page = tmp / "view.html"
    proc = edge_bench("report", *map(str, ids), "--html", str(page), "--store", str(store))
    assert proc.returncode == 0, proc.stderr
    base = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            f"--user-data-dir={tmp / 'chromium'}"]  # fmt: skip
    shot = tmp / "view.png"
    run = subprocess.run([*base, "--window-size=1280,4000", f"--screenshot={shot}", page.as_uri()],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp)})  # fmt: skip
    assert shot.exists(), run.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3)
    assert len(np.unique(pixels, axis=0)) > 100  # lines in several colours, text anti-aliased: not a blank page
    assert (pixels.min(axis=1) < 240).mean() > 0.03
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HOME": str(tmp)}).stdout  # fmt: skip
    for name in FIGURES:
        assert re.search(rf'<figure id="{name}">\s*<svg[^>]*>.*?<path ', dom, flags=re.S), name


def test_one_off_run_writes_html_and_outputs_are_checked_before_anything_runs(runs):
    tmp, store, ids, _ = runs
    out = tmp / "one.html"
    proc = edge_bench("run", "--target", "local:", "--model", str(DIGITS), "--cpus", "1", "--iterations", "200",
                      "--store", str(store), "--html", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert set(figures(out.read_text())) == set(FIGURES) and "no SLO given" in out.read_text()
    proc = edge_bench("report", str(ids[0]), "--html", "/dev/null", "--store", str(store))
    assert proc.returncode == 0, proc.stderr
    with Store(store) as st:
        before = len(st.runs())
    one_line(edge_bench("report", str(ids[0]), "--html", str(store), "--store", str(store)), "--html", "the store")
    # The store named by the environment, not --store: still an input (it was overwritten by --md before).
    one_line(edge_bench("report", "--md", str(store), env={"EDGE_BENCH_STORE": str(store)}), "--md", "the store")
    one_line(edge_bench("run", "--target", "local:", "--model", str(DIGITS), "--iterations", "200", "--store",
                        str(store), "--html", str(DIGITS)), "--html", "the model")  # fmt: skip
    with Store(store) as st:
        assert len(st.runs()) == before  # refused before the run
    assert DIGITS.read_bytes()[:2] != b"<!"


def test_without_matplotlib_html_is_one_line_and_the_cli_never_imports_it(runs):
    _, store, ids, _ = runs
    code = ("import sys; sys.modules['matplotlib'] = None\nfrom bench.cli import main\n"
            f"sys.exit(main(['report', '{ids[0]}', '--html', '/dev/null', '--store', {str(store)!r}]))")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    one_line(proc, "--html needs matplotlib", "pip install 'edge-runtime[host]'")
    code = "import sys, bench, bench.cli, bench.report.html; print('matplotlib' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr


def test_a_long_throttled_run_is_thinned_and_a_report_of_failed_runs_still_renders(runs):
    """An hour at 1 window a second and a sampler at 4 Hz: the page stays small, the throttled span is shown."""
    from bench.report import html

    *_, results = runs
    windows = [{"t_s": i + 1.0, "count": 500, "p50": 20 + i % 7, "p99": 40 + i % 97, "max": 90 + i % 301}
               for i in range(3600)]  # fmt: skip
    long = {**results["x86-capture"], "timeline_us": windows}
    point = results["x86-capture"]["thermal"]["timeline"][0]
    long["thermal"] = {**long["thermal"], "timeline": [{**point, "t_s": i / 4, "max_c": 50 + i / 1440,
                                                        "throttled": i > 10_000} for i in range(14_400)]}  # fmt: skip
    row = {"run": 9, "target": "soak", "model": "digits", "scenario": "single-stream", "repetition": 0}
    text = html.render("soak", [row], [long])
    assert len(text) < 300_000
    timeline = svg_of(figures(text)["timeline"])
    assert ">throttled<" in timeline and NO_TIMELINE not in timeline
    failed = html.render("failed", [{**row, "error": "link <lost>"}], [None], [])
    assert "no run finished" in failed and "link &lt;lost&gt;" in failed and "no SLO given" in failed


def _box(svg: str, group_id: str) -> tuple[float, float, float, float]:
    """(x0, y0, x1, y1) of the first path drawn in the SVG group `group_id`: an axes' background, a legend's frame."""
    d = re.search(r'<path d="([^"]+)"', svg[svg.index(f'id="{group_id}"') :]).group(1)
    xy = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", d)]
    xs, ys = xy[0::2], xy[1::2]
    return min(xs), min(ys), max(xs), max(ys)


def test_a_report_of_100_runs_keeps_its_legends_beside_the_plots_and_stderr_quiet(runs, tmp_path):
    """100 stored runs (one real result under 100 names, one long, one in CJK with an emoji): the CDF and percentile
    legends sit outside the axes and inside the figure, name at most MAX_LEGEND entries (the last "+K more"), and no
    matplotlib warning reaches stderr (it said "constrained_layout not applied" twice, and a missing glyph per
    character a font lacks)."""
    from bench.report.plots import LEGEND_CHARS, MAX_LEGEND

    *_, results = runs
    names = ["rack-7 " * 30, "板子-中文 🚀"] + [f"board-{i:03d}" for i in range(98)]
    store = tmp_path / "100.sqlite"
    with Store(store) as st:
        for name in names:
            st.add_run(results["x86-capture"], target=name)
    page = tmp_path / "100.html"
    proc = edge_bench("report", "--last", "100", "--html", str(page), "--store", str(store))
    assert proc.returncode == 0 and proc.stderr == f"edge-bench: report: {page}\n", proc.stderr  # only where it wrote
    text = page.read_text()
    assert "matplotlib:" not in text  # nothing was caught on its way to stderr either: the layout was applied
    figs = figures(text)
    for name in ("cdf", "percentiles"):
        svg = svg_of(figs[name])
        view = [float(v) for v in re.search(r'viewBox="([^"]+)"', svg).group(1).split()]
        ax0, ay0, ax1, ay1 = _box(svg, f"{name}-axes_1")
        lx0, ly0, lx1, ly1 = _box(svg, f"{name}-legend_1")
        assert lx0 > ax1, (name, (lx0, ly0, lx1, ly1), (ax0, ay0, ax1, ay1))  # right of the axes, not over them
        assert view[0] <= lx0 and lx1 <= view[0] + view[2] and view[1] <= ly0 and ly1 <= view[1] + view[3], name
        assert ax1 - ax0 > 0.5 * view[2] and ay1 - ay0 > 150, name  # the plot kept its room
        legend = re.findall(r"<text[^>]*>([^<]*)</text>", svg[svg.index(f'id="{name}-legend_1"') :])
        assert len(legend) == MAX_LEGEND, legend
        assert legend[:3] == [("rack-7 " * 30)[: LEGEND_CHARS - 1] + "…", "板子-中文 🚀", "board-000"]
        assert legend[-1] == f"+{len(names) - MAX_LEGEND + 1} more (all are in the table)"
        assert f"the first {MAX_LEGEND - 1} of {len(names)}" in figs[name]
    assert "rack-7 " * 30 in text and "板子-中文 🚀" in text  # whole in the tables
