"""Per-op profiles on the host side (issue 29): `edge-bench run --ops`, a campaign's `[campaign] ops = true`, and the
reports of runs whose result carries an `ops` section (OpsReport.summary()): the verdict line in the terminal and
Markdown, a per-op bar chart (or a placement table) in the HTML, the section kept whole by the store and --json,
compare untouched by it; targets that cannot profile refuse --ops in one line and are said once in a campaign.

Real parts: a campaign of this machine and a real KServe v2 server (tests/servers/fast_server.py), real bench results
from it, and `ops` sections from real engines on models/ files (edge_runtime.ops.profile.profile_model)."""

from __future__ import annotations

import html as htmllib
import importlib.util
import json
import re
import subprocess
import sys

import pytest
from conftest import MODELS, ROOT, need

from bench.store import Store

pytest.importorskip("matplotlib", reason="--html needs matplotlib: pip install 'edge-runtime[host]' (make test does)")
DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"
RESNET = MODELS / "resnet8" / "resnet8_fp32.onnx"
CUMSUM = MODELS / "partial_cumsum" / "partial_cumsum_fp32.tflite"
PARTIAL = MODELS / "partial_fastgelu" / "partial_fastgelu_fp32.onnx"
FEW = {"iterations": 20, "warmup": 2}  # the profile's own runs: the report needs rows, not precise times


def edge_bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)  # fmt: skip


def one_line(proc, *needles: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("edge-bench: error: "), proc.stderr
    assert all(n in lines[0] for n in needles), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def profiles():
    """Real `ops` sections: ONNX Runtime on CPU (bars, all on the target), ONNX Runtime's OpenVINO provider leaving
    FastGelu on CPU between two OpenVINO subgraphs (bars, one op elsewhere: with the onnxruntime-ep-openvino plugin),
    ONNX Runtime asked for CUDA and fallen back to CPU (bars, every op elsewhere than the target), LiteRT's placement
    of the CUMSUM model (no times)."""
    need("onnxruntime")
    import warnings

    import onnxruntime

    from edge_runtime.ops.profile import profile_model

    out = {"cpu": profile_model(RESNET, **FEW).summary()}
    if importlib.util.find_spec("onnxruntime_ep_openvino") is not None:  # FastGelu on CPU between two OpenVINO parts
        out["partial"] = profile_model(PARTIAL, backend="onnxruntime", device="openvino", **FEW).summary()
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the FallbackWarning: the point of this profile
            out["fallback"] = profile_model(RESNET, device="cuda", fallback=True, **FEW).summary()
    try:
        need("tflite")
        out["placement"] = profile_model(CUMSUM, **FEW).summary()
    except pytest.skip.Exception:
        pass
    return out


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """A campaign with `ops = true` of this machine (twice) and a KServe server (which cannot profile), with every
    report asked for."""
    need("onnxruntime")
    pytest.importorskip("tritonclient")
    import serverkit

    tmp = tmp_path_factory.mktemp("ops")
    store = tmp / "s.sqlite"
    model = _served_model(tmp / "served.onnx")
    with serverkit.fast(processes=1) as srv:
        camp = tmp / "c.toml"
        camp.write_text(f"""
[campaign]
name = "ops"
repetitions = 2
ops = true
[[target]]
name = "here"
url = "local:"
[[target]]
name = "srv"
url = "kserve+http://{srv.http}/fast?timeout=5"
[[model]]
name = "served"
path = "{model}"
[[scenario]]
iterations = 30
warmup = 2
""")
        outs = {f: tmp / f"c.{f}" for f in ("json", "md", "html")}
        proc = edge_bench("run", str(camp), "--store", str(store), *[x for f, p in outs.items()
                                                                     for x in (f"--{f}", str(p))])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return {"proc": proc, "store": store, "outs": {f: p.read_text() for f, p in outs.items()}, "tmp": tmp}


def _served_model(path):
    """The model the fast server answers for (input INPUT0 FP32 [1,16], output OUTPUT0), as an ONNX file built in
    code, so this machine and the server run one model in one campaign."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, save

    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 16]) for n in ("INPUT0", "OUTPUT0")]
    graph = helper.make_graph([helper.make_node("Relu", ["INPUT0"], ["OUTPUT0"])], "served", [io[0]], [io[1]])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path


# ------------------------------------------------------------------------------------------------ the campaign
def test_a_campaign_with_ops_asks_the_boards_and_says_once_why_the_server_gives_none(campaign):
    from bench.campaign import load
    from bench.campaign.runner import request_for

    proc, outs = campaign["proc"], campaign["outs"]
    said = "srv: its runs carry no per-op profile: a server's protocol (KServe v2) carries no per-op profile"
    assert proc.stderr.count(said) == 1, proc.stderr
    why = "srv: no per-op profile: a server's protocol (KServe v2)"
    assert proc.stdout.count(why) == 1, proc.stdout
    assert outs["md"].count("no per-op profile: a server's protocol") == 1, outs["md"]
    section = re.search(r'<section id="ops">.*?</section>', outs["html"], flags=re.S)
    assert section and section.group(0).count("srv: no per-op profile:") == 1
    doc = json.loads(outs["json"])
    served = [r for r in doc["runs"] if r["target"] == "srv"]
    assert len(served) == 2 and all("ops" not in r["result"] for r in served)
    here = [r for r in doc["runs"] if r["target"] == "here"]
    assert len(here) == 2 and all(r["result"]["ops"]["verdict"].startswith("CPU only") for r in here)
    for r in here:  # each board run's verdict in the terminal and Markdown, its chart in the HTML
        verdict = r["result"]["ops"]["verdict"]
        assert f"run {r['run']} here: {verdict}" in proc.stdout, proc.stdout
        assert f"run {r['run']} here" in outs["md"] and verdict in outs["md"]
    figs = _figures(outs["html"])
    assert len(figs) == 2 and all("Relu" in _svg_text(f) for f in figs.values())
    # The requests as the runner builds them: ops on this machine's runs, absent (None) on the server's.
    c = load(str(campaign["tmp"] / "c.toml"))
    here, srv = c.targets
    assert request_for(c, c.scenarios[0], c.models[0], here).ops is True
    assert request_for(c, c.scenarios[0], c.models[0], srv).ops is None
    assert "ops" not in request_for(c, c.scenarios[0], c.models[0], srv).to_dict()


def test_the_campaign_key_is_a_boolean_and_says_so_in_one_line(tmp_path):
    need("onnxruntime")
    camp = tmp_path / "c.toml"
    camp.write_text(f'[campaign]\nops = "yes"\n[[target]]\nurl = "local:"\n[[model]]\npath = "{DIGITS}"\n')
    one_line(edge_bench("run", str(camp), "--store", str(tmp_path / "s.sqlite")), "[campaign] ops 'yes': true or false")
    assert not (tmp_path / "s.sqlite").exists()
    camp.write_text(f'[campaign]\nops = true\n[[target]]\nurl = "local:"\n[[model]]\npath = "{DIGITS}"\n')
    one_line(edge_bench("run", str(camp), "--ops"), "--ops goes with the one-off form", "ops = true")


# ------------------------------------------------------------------------------------------ one-off refusals
def test_ops_against_a_kserve_server_is_refused_in_one_line_before_anything(tmp_path):
    pytest.importorskip("tritonclient")
    import serverkit

    store = tmp_path / "s.sqlite"
    with serverkit.fast(processes=1) as srv:
        url = f"kserve+http://{srv.http}/fast?timeout=5"
        one_line(edge_bench("run", "--target", url, "--ops", "--store", str(store)), f"--ops: {url}: ",
                 "carries no per-op profile")  # fmt: skip
    assert not store.exists()  # refused before the store was made
    one_line(edge_bench("run", "--target", "local:", "--model", str(DIGITS), "--ops", "--ops"), "--ops is given twice")
    one_line(edge_bench("run", "--target", "eembc:///dev/null", "--model", str(DIGITS), "--ops"),
             "MLPerf Tiny firmware", "no per-op profile")  # fmt: skip
    one_line(edge_bench("run", "--target", "local:?device=cuda", "--model", str(DIGITS), "--ops"),
             "NVIDIA GPU (device=cuda) has no per-op profile")  # fmt: skip


def test_a_one_off_run_with_ops_prints_stores_and_draws_its_profile(tmp_path):
    """`edge-bench run --target local: --ops --html F --json F`, end to end: the board's bench profiles the model
    (edge_runtime.measure.ops_section), the JSON keeps the section, the terminal says the verdict once, the HTML
    draws it with the verdict as the caption."""
    need("onnxruntime")
    j, h = tmp_path / "r.json", tmp_path / "r.html"
    proc = edge_bench("run", "--target", "local:", "--model", str(DIGITS), "--iterations", "40", "--warmup", "2",
                      "--ops", "--store", str(tmp_path / "s.sqlite"), "--json", str(j), "--html", str(h))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    section = json.loads(j.read_text())["ops"]
    assert section["schema"] == "edge-runtime/ops/1" and section["verdict"].startswith("CPU only"), section
    assert proc.stdout.count(section["verdict"]) == 1, proc.stdout
    (fig,) = _figures(h.read_text()).values()
    assert _caption(fig) == section["verdict"]
    assert section["ops"][0]["name"] in _svg_text(fig)


# ---------------------------------------------------------------------------------------------- the HTML chart
def _with(campaign, ops: dict) -> dict:
    """A real bench result of this campaign (this machine's run) carrying `ops`."""
    doc = json.loads(campaign["outs"]["json"])
    res = next(r["result"] for r in doc["runs"] if r["target"] == "here")
    return {**res, "ops": ops}


def _figures(text: str) -> dict[str, str]:
    return dict(re.findall(r'<figure id="(ops-\d+)"[^>]*>(.*?)</figure>', text, flags=re.S))


def _caption(figure: str) -> str:
    return htmllib.unescape(re.search(r"<figcaption>(.*?)</figcaption>", figure, flags=re.S).group(1))


def _svg_text(figure: str) -> str:
    return htmllib.unescape(" ".join(re.findall(r"<text[^>]*>(.*?)</text>", figure, flags=re.S)))


def test_the_html_draws_each_runs_ops_and_marks_the_fallback(campaign, profiles):
    from bench.report import html, ops

    kinds = list(profiles)
    plain = _with(campaign, None)
    plain.pop("ops")
    results = [*(_with(campaign, profiles[k]) for k in kinds), plain]
    rows = [{"run": i + 1, "target": f"t-{k}", "model": "m", "scenario": "s", "repetition": 0}
            for i, k in enumerate([*kinds, "none"])]  # fmt: skip
    page = html.render("ops", rows, results)
    figs = _figures(page)
    assert len(figs) == len(kinds)  # one per run with an ops section; none for the run without
    section = re.search(r'<section id="ops">(.*?)</section>', page, flags=re.S).group(1)
    assert "t-none" not in section and all(f"t-{k}" in section for k in kinds)
    for i, k in enumerate(kinds, 1):
        fig, summary = figs[f"ops-{i}"], profiles[k]
        assert _caption(fig) == summary["verdict"]
        if k == "placement":
            assert "<svg" not in fig and ops.NO_TIMES in fig  # no bars without times
            marked = re.findall(r'<tr class="fallback"><td>([^<]*)</td><td>([^<]*)</td>', fig)
            assert [t for _, t in marked] == sorted(summary["fallback"]["types"])  # CUMSUM, the op on CPU
            assert fig.count(f"fallback: not on {summary['target']}") == len(marked)  # said in words, not colour only
            continue
        drawn = _svg_text(fig)
        names = [r["name"] for r in summary["ops"] if r["share"] is not None][: ops.MAX_BARS]
        assert all(n[: ops.LABEL_CHARS - 4] in drawn for n in names), drawn
        assert "(overhead)" in drawn and f"fill: {ops.OVERHEAD}" in fig  # the overhead row, grey
        if k == "fallback":  # every op ran on CPU, not on the CUDA asked for: marked, with the legend saying so
            assert "elsewhere than CUDA (fallback)" in drawn and f"fill: {ops.FALLBACK}" in fig
            assert f"fill: {ops.ON_TARGET}" not in fig
        elif k == "partial":  # FastGelu's bar in the fallback colour, the OpenVINO subgraphs' in the target's
            assert "elsewhere than OpenVINO (fallback)" in drawn and "on OpenVINO" in drawn
            assert f"fill: {ops.FALLBACK}" in fig and f"fill: {ops.ON_TARGET}" in fig
            colours = {label: colour for label, _, _, colour in ops.bars(summary)}
            assert colours["fastgelu (FastGelu)"] == ops.FALLBACK
            assert {c for lab, c in colours.items() if lab.startswith("OpenVINO subgraph")} == {ops.ON_TARGET}
        else:
            assert "(fallback)" not in drawn and f"fill: {ops.FALLBACK}" not in fig
    assert '<section id="ops">' not in html.render("none", rows[-1:], results[-1:])


# ------------------------------------------------------------------------------ the store, report and compare
def test_the_store_keeps_the_section_and_edge_bench_report_shows_it(campaign, profiles, tmp_path):
    import shutil

    store = tmp_path / "s.sqlite"
    shutil.copy(campaign["store"], store)
    with Store(store) as st:
        rid = st.add_run(_with(campaign, profiles["cpu"]), target="here+ops", model_name="served")
        assert st.run(rid).result["ops"] == profiles["cpu"]  # read back whole
    h, m = tmp_path / "r.html", tmp_path / "r.md"
    proc = edge_bench("report", str(rid), "--store", str(store), "--json", str(tmp_path / "r.json"), "--html", str(h),
                      "--md", str(m))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run,) = json.loads((tmp_path / "r.json").read_text())["runs"]
    assert run["result"]["ops"] == profiles["cpu"]
    assert profiles["cpu"]["verdict"] in m.read_text()
    assert len(_figures(h.read_text())) == 1
    proc = edge_bench("report", str(rid), "--store", str(store))
    assert f"run {rid} here+ops: {profiles['cpu']['verdict']}" in proc.stdout, proc.stdout


def test_compare_is_not_moved_by_an_ops_section(campaign, profiles, tmp_path):
    import shutil

    store = tmp_path / "s.sqlite"
    shutil.copy(campaign["store"], store)
    doc = json.loads(campaign["outs"]["json"])
    a, b = [r["run"] for r in doc["runs"] if r["target"] == "here"]
    with Store(store) as st:
        plain = st.run(a)
        with_ops = st.add_run({**plain.result, "ops": profiles["cpu"]}, target=plain.target, model_name="served")
    answers = []
    for first in (a, with_ops):
        proc = edge_bench("compare", str(first), str(b), "--store", str(store), "--json", "-")
        assert proc.returncode in (0, 1), proc.stderr
        answers.append(json.loads(proc.stdout))
    for key in ("verdict", "metrics", "differs", "not_comparable", "runs_to_settle"):
        assert answers[0][key] == answers[1][key], key
    proc = edge_bench("compare", "--a", str(a), str(with_ops), "--b", str(b), "--store", str(store), "--json", "-")
    assert proc.returncode in (0, 1), proc.stderr  # pooled with a run without ops: one configuration


def test_a_model_with_more_ops_than_bars_draws_the_rest_as_one_bar():
    """OpenVINO's MobileNet has more timed ops than a chart draws: the rest are one bar, and the bars (ops, the rest,
    the overhead) still make up the profiled run; ops a bench result left out (its slowest 200 are kept) count in
    the rest too."""
    need("openvino")
    from bench.report import ops
    from edge_runtime.ops.profile import profile_model

    section = profile_model(MODELS / "mobilenet_v1_025_vww" / "mobilenet_v1_025_vww_int8.xml", **FEW).summary()
    timed = [r for r in section["ops"] if r["share"] is not None and r["status"] != "overhead"]
    assert len(timed) > ops.MAX_BARS
    cut = {**section, "ops": timed[: ops.MAX_BARS + 5] + section["ops"][-1:]}  # as if the result kept 35 ops
    for shown in (section, cut):
        drawn = ops.bars(shown)
        listed = [r for r in shown["ops"] if r["status"] != "overhead"]
        beyond = len([r for r in listed if r["share"] is not None]) - ops.MAX_BARS
        assert [b[0] for b in drawn if b[0].endswith("more ops)")] == [
            f"({beyond + section['ops_total'] - len(listed)} more ops)"
        ]
        assert sum(b[1] for b in drawn) == pytest.approx(1.0, abs=1e-3)
        assert drawn[-1][0] == "(overhead)" and len(drawn) == ops.MAX_BARS + 2


@pytest.mark.parametrize(
    "lie",
    [
        {"ops": [{"name": "conv", "share": "most", "mean_us": 1.0}]},
        {"ops": [{"name": "conv", "share": float("nan"), "mean_us": 1.0}]},
        {"profiled_us": 1e300},
        {"partitions": "all of them"},
        {"ops": "conv"},
    ],
)
def test_an_ops_section_a_board_would_not_write_is_said_unreadable_never_a_failed_report(campaign, profiles, lie):
    """A real section with one field made a lie (an agent that is broken or lying, a hand-edited store): the
    terminal, Markdown and HTML reports and the run's own text each say the section is unreadable, and go on."""
    from bench.report import html, ops
    from edge_runtime.program.bench_text import format_report

    res = _with(campaign, {**profiles["cpu"], **lie})
    named = [("run 1", res)]
    for said in (ops.text(named), ops.markdown(named)):
        assert "unreadable ops section" in said, said
    page = html.render("lie", [{"run": 1, "target": "t", "model": "m", "scenario": "s", "repetition": 0}], [res])
    assert "unreadable ops section" in page and '<figure id="ops-1"' not in page
    text = format_report(res)
    assert "unreadable ops section" in text or "ops          " + profiles["cpu"]["verdict"] in text
