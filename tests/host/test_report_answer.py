"""A campaign's reports open with its answer and tell the truth (issue 25, items 2, 5, 9): per model and scenario the
targets ranked by p50 with the lead weighed by compare(); quality warnings and a legend for `valid` in every text
format; one vocabulary (p99.9) and a unit per column. A real campaign on this machine: the same model on two
`local:` targets, one running batches of 32 (slower per query, by about 10x here), two repetitions each."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from batchmodels import dynamic_batch
from conftest import MODELS, ROOT, need

from bench.compare import compare
from bench.report.answer import answer_text, ranked
from bench.report.tables import people_columns
from bench.report.units import in_unit, latency_unit, shown_for
from bench.store import Store

DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    need("onnxruntime")
    tmp = tmp_path_factory.mktemp("answer")
    model = dynamic_batch(DIGITS, tmp / "digits_dyn.onnx")
    camp = tmp / "c.toml"
    camp.write_text(f"""
[campaign]
name = "rank"
repetitions = 2
[[target]]
name = "fast"
url = "local:"
cpus = "1"
[[target]]
name = "slow"
url = "local:?batch=32"
cpus = "1"
[[model]]
name = "digits"
path = "{model}"
[[scenario]]
iterations = 300
min_queries = 100
[slo]
p99_ms = 1000
""")
    out = {k: tmp / f"r.{k}" for k in ("json", "md", "csv", "junit")}
    proc = subprocess.run([sys.executable, "-m", "bench.cli", "run", str(camp), "--store", str(tmp / "s.sqlite"),
                           *[x for k, p in out.items() for x in (f"--{k}", str(p))]], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr  # and its terminal report on stdout: the outputs went to files
    with Store(tmp / "s.sqlite") as st:
        stored = st.runs()
    return {"doc": json.loads(out["json"].read_text()), "md": out["md"].read_text(), "csv": out["csv"],
            "junit": ET.parse(out["junit"]).getroot(), "term": proc, "stored": stored,
            "store": tmp / "s.sqlite"}  # fmt: skip


def test_the_answer_ranks_the_targets_by_p50_and_weighs_the_lead_with_compare(campaign):
    doc = campaign["doc"]
    (a,) = doc["answer"]
    assert (a["model"], a["scenario"], a["winner"], a["runner_up"]) == ("digits", "single-stream", "fast", "slow")
    fast, slow = a["targets"]
    assert fast["p50_us"] < slow["p50_us"] and [fast["rank"], slow["rank"]] == [1, 2] and fast["runs"] == 2
    lead = a["lead"]
    assert lead["p50_change_pct"] == pytest.approx(100 * (slow["p50_us"] / fast["p50_us"] - 1), abs=0.01)
    assert lead["throughput_change_pct"] > 0  # batches of 32: slower per query, more inferences a second
    # the lead's verdict is compare()'s on the same runs (runs as the unit of evidence; 2 + 2 runs: not provisional)
    results = {t: [r["result"] for r in doc["runs"] if r["target"] == t] for t in ("fast", "slow")}
    said = compare(results["fast"], results["slow"], threshold_pct=1.0, metrics=("p50",))["metrics"]["p50"]
    assert lead["verdict"] == said["verdict"] and lead["provisional"] is False and lead["runs"] == {"a": 2, "b": 2}
    assert lead["significant"] == (said["verdict"] in ("regression", "within threshold"))
    # the stored runs give the same answer as the campaign's outcomes
    assert ranked(campaign["stored"]) == ranked(doc["runs"]) == doc["answer"]
    text = answer_text(doc["answer"])
    assert "digits, single-stream: fast fastest (p50 " in text and " ahead of slow (" in text
    assert ("significant, 2 runs a side" if lead["significant"] else "not significant") in text
    assert "the throughput" in text  # the slower target's batches: said, not hidden behind the rank


def test_the_answer_comes_first_in_the_terminal_and_the_markdown(campaign):
    out = campaign["term"].stdout
    assert out.startswith("Answer (p50, best first):\n  digits, single-stream: fast fastest")
    assert out.index("fast fastest") < out.index("\nrun ")
    md = campaign["md"]
    assert md.index("## Answer (p50, best first)") < md.index("| run |") and "- digits, single-stream: fast" in md


def test_edge_bench_report_of_stored_runs_opens_with_the_same_answer(campaign):
    """`edge-bench report` of the stored runs: the campaign's answer first, in the terminal and its JSON."""
    proc = subprocess.run([sys.executable, "-m", "bench.cli", "report", "--store", str(campaign["store"])],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("Answer (p50, best first):\n  digits, single-stream: fast")
    doc = subprocess.run([sys.executable, "-m", "bench.cli", "report", "--store", str(campaign["store"]), "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)  # fmt: skip
    assert json.loads(doc.stdout)["answer"] == campaign["doc"]["answer"]


def test_one_run_a_side_is_provisional_and_says_so(campaign):
    first = [r for r in campaign["stored"] if r.repetition == 0]
    (a,) = ranked(first)
    assert a["lead"]["provisional"] is True and a["lead"]["runs"] == {"a": 1, "b": 1}
    assert "provisional" in answer_text([a]) and a["winner"] == "fast"
    (alone,) = ranked([r for r in first if r.target == "fast"])
    assert alone["lead"] is None and "fast only (p50 " in answer_text([alone])


def test_quality_warnings_and_a_legend_for_valid_in_every_text_format(campaign):
    doc, out, md = campaign["doc"], campaign["term"].stdout, campaign["md"]
    runs = doc["runs"]
    rows = list(csv.DictReader(campaign["csv"].open()))
    props = {p.get("name"): p.get("value") for p in campaign["junit"].iter("property")}
    for r, row in zip(runs, rows, strict=True):
        q = r["result"]["quality"]
        word = {True: "UNSTABLE", False: "stable", None: "stability unknown"}[q["unstable"]]
        assert r["quality"].startswith(word) and row["quality"] == r["quality"] and r["valid"] == "yes"
        assert r["quality_warnings"] == q["warnings"] and row["quality_warnings"] == "; ".join(q["warnings"])
        for w in q["warnings"]:  # each said under the table and in the Markdown (once if every run shares it)
            assert w in out and w in md
        junit = [v for k, v in props.items() if k.startswith(f"run {r['run']} ") and k.endswith(": quality")]
        assert (junit == []) == (q["warnings"] == []) and all(w in junit[0] for w in q["warnings"])
    for text in (out, md):
        assert "valid: the run rules (min_duration_s, min_queries, not cut short): yes met, NO missed" in text
        assert "\"-\": not applicable (no SLO given, no run rule set, a closed loop keeps no schedule" in text
    shaky = sum(r["quality"].startswith("UNSTABLE") for r in runs)  # and the verdict line says how many
    assert (f"; {shaky} of {len(runs)} runs UNSTABLE (see the quality warnings); stored in" in out) == (shaky > 0)
    cases = [c for c in campaign["junit"].iter("testcase")]
    assert cases and all(c.find("properties/property[@name='quality']") is not None for c in cases)


def test_one_vocabulary_and_a_unit_per_column_for_people_exact_numbers_for_machines(campaign):
    doc, term, md = campaign["doc"], campaign["term"], campaign["md"]
    header = next(line for line in term.stdout.splitlines() if line.startswith("run "))
    assert re.search(r"p50 (us|ms) +p99 (us|ms) +p99\.9 (us|ms) +max (us|ms)", header) and "p999" not in header
    assert "| p99.9 " in md and "p999" not in md.split("## Answer")[0] + md.split("\n| run |")[1].split("\n")[0]
    # 300 samples a run: p99.9 is the max, shown "-" for people, kept exact for machines
    lines = term.stdout.splitlines()
    at = lines.index(header)
    heads = re.split(r"\s{2,}", header.strip())
    table = [re.split(r"\s{2,}", line.strip()) for line in lines[at + 1:at + 1 + len(doc["runs"])]]
    col = next(i for i, h in enumerate(heads) if h.startswith("p99.9"))
    assert [cells[col] for cells in table] == ["-"] * len(doc["runs"])
    assert all(r["p999_us"] == r["result"]["latency_us"]["p999"] for r in doc["runs"])
    rows = list(csv.DictReader(campaign["csv"].open()))
    assert [float(r["p999_us"]) for r in rows] == [r["p999_us"] for r in doc["runs"]]
    assert "in p99, p99.9: the run holds too few samples for it (p99.9 needs 1,000; below that it is the max)" \
        in term.stdout  # fmt: skip
    # no run fell behind a schedule: no line but the header names the column (a reader scanning for it finds none)
    assert [line for line in term.stdout.splitlines() if "saturated" in line] == [header]
    # numbers for people: no exponent, no float noise
    shown = term.stdout.split("\nlegend:")[0] + md.split("Legend:")[0]
    assert not re.search(r"\d[eE][+-]\d|\.\d{4,}", shown), shown
    # repetitions numbered as the table numbers them: from 0, in progress lines and the table alike
    assert "fast digits single-stream repetition 0 of 0-1" in term.stderr and "repetition 1 of 0-1" in term.stderr
    rep = heads.index("repetition")
    assert [cells[rep] for cells in table] == ["0", "0", "1", "1"]


@pytest.mark.parametrize(
    ("values", "unit", "shown"),
    [
        ([17.6, 204.9, 9_999.0], "us", ["17.6", "204.9", "9,999.0"]),
        ([17.6, 136_810.4], "ms", ["0.018", "136.810"]),  # one unit per column: the small one in ms too
        ([2_555_500.0, None], "ms", ["2,555.500", "-"]),
    ],
)
def test_a_latency_column_takes_one_unit_for_its_largest_value(values, unit, shown):
    assert latency_unit(values) == unit
    rows = [{"p50_us": v, "count": 5000} for v in values]
    heads, cells = people_columns(rows)
    col = heads.index(f"p50 {unit}")
    assert [c[col] for c in cells] == shown
    assert in_unit(1_145_090_000.0, "ms") == "1,145,090.000"  # never 1.14509e+09


@pytest.mark.parametrize(("key", "count", "shown"), [("p99_us", 99, False), ("p99_us", 100, True), ("p50", 1, True),
                                                      ("p999_us", 999, False), ("p999_us", 1000, True),
                                                      ("p9999", 9999, False), ("max_us", 1, True)])  # fmt: skip
def test_a_percentile_is_shown_only_where_the_run_holds_it_as_more_than_its_max(key, count, shown):
    assert shown_for(key, count) is shown


def test_a_warning_several_runs_share_is_said_once_naming_them():
    """A board's 'CPU 1 not isolated' on its runs but not on a server's: one line naming the runs, not one a run."""
    from bench.report.tables import quality_notes

    iso, irq = "CPU 1 not isolated", "19 IRQ(s) may be delivered to CPU 1"
    rows = [{"run": 1, "target": "board", "quality": "UNSTABLE", "quality_warnings": [iso, irq, "unstable: std 17%"]},
            {"run": 2, "target": "triton", "quality": "stable", "quality_warnings": [irq]},
            {"run": 3, "target": "board", "quality": "stable", "quality_warnings": [iso, irq]},
            {"run": 4, "target": "gone", "quality": None, "quality_warnings": None}]  # fmt: skip
    assert quality_notes(rows) == [("every run", irq), ("runs 1, 3", iso), ("run 1 board", "unstable: std 17%")]
