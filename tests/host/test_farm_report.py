"""The farm report (issue 28): boards of one kind compared, the one >= 20% slower than its siblings' median flagged with
its environment beside theirs, in the terminal, Markdown, HTML and JSON.

The records are real: a campaign of two models and two scenarios on `local:` on this machine, each run's record as
the board wrote it. Runs on this shared VM differ by 2x and more from one to the next, so a place's "real" run
cannot stand for a known slowdown: each place gets a copy of ONE real record (its place section added, as a labgrid
run carries it), and the slow place's copy has its latency section multiplied by a known factor (and its
throughput divided by it). What is tested is the rule, on the shape and values of real records."""

from __future__ import annotations

import copy
import json
import math
import re
import subprocess
import sys

import pytest
from conftest import MODELS, ROOT, need

from bench.report import farm
from bench.store import Store
from edge_runtime import results

DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"
KWS = MODELS / "dscnn_kws" / "dscnn_kws_int8.onnx"
HOSTILE = "<img src=x onerror=alert(1)>|`7` [x](http://127.0.0.1:9/)"


def edge_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)  # fmt: skip


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """A real campaign (2 models x single-stream and offline, 50 iterations each) with its --json document: the
    records by (model, scenario), and the document."""
    need("onnxruntime")
    tmp = tmp_path_factory.mktemp("farm")
    (tmp / "c.toml").write_text(f"""[campaign]
name = "farm"
[[target]]
name = "rock5b"
url = "local:"
cpus = "1"
threads = 1
[[model]]
name = "digits"
path = "{DIGITS}"
[[model]]
name = "kws"
path = "{KWS}"
[[scenario]]
iterations = 50
[[scenario]]
kind = "offline"
iterations = 50
""")
    proc = edge_bench("run", str(tmp / "c.toml"), "--store", str(tmp / "s.sqlite"), "--json", str(tmp / "c.json"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((tmp / "c.json").read_text())
    runs = {(r["model"], r["scenario"]): r["result"] for r in doc["runs"]}
    assert set(runs) == {(m, s) for m in ("digits", "kws") for s in ("single-stream", "offline")}
    return runs, doc


def placed(record: dict, name: str, group: str = "rock5b", factor: float = 1.0, **env) -> dict:
    """A copy of a real record as run on place `name` of `group`: its latencies x `factor`, its throughput / `factor`,
    its environment with `env` changed (temperature_c: its thermal max)."""
    r = copy.deepcopy(record)
    r["place"] = {"name": name, "group": group, "tags": {"board": "rock-5b"}, "board": f"exp1/{name}",
                  "coordinator": "127.0.0.1:20408", "power_cycled": False}  # fmt: skip
    r["latency_us"] = {k: v * factor if isinstance(v, (int, float)) and k != "count" else v
                       for k, v in r["latency_us"].items()}  # fmt: skip
    r["throughput_ips"] = r["throughput_ips"] / factor
    temp = env.pop("temperature_c", None)
    if temp is not None:
        r["thermal"] = {**r["thermal"], "available": True, "max_c": temp}
    r["environment"] = {**r["environment"], "hostname": f"host-{name}", **env}
    return r


def items(*records: dict, scenario: str = "single-stream") -> list[tuple[str, str, dict]]:
    return [(f"run {i} rock5b", scenario, r) for i, r in enumerate(records)]


def findings(doc: dict) -> list[tuple[str, str]]:
    return [(f["place"], f["measure"]) for g in doc["groups"] for f in g["findings"]]


def test_a_place_section_loads_is_stored_and_round_trips(real, tmp_path):
    runs, _ = real
    rec = placed(runs["digits", "single-stream"], "rack1-b")
    assert results.load(rec).to_dict() == rec and results.load(rec).place["group"] == "rock5b"
    assert "place" not in results.BenchResult().to_dict()  # absent, not null, where no place ran it
    with Store(tmp_path / "s.sqlite") as st:
        st.add_run(rec, target="rock5b")
        assert st.runs()[0].result["place"] == rec["place"]


def test_a_place_1_5x_slower_is_flagged_by_both_measures_with_the_ratio_and_the_figures(real):
    base = runs_of(real)
    doc = farm.compare_places(items(*(placed(base, n) for n in "abc"), placed(base, "d", factor=1.5)))
    (g,) = doc["groups"]
    assert [p["place"] for p in g["places"]] == ["a", "b", "c", "d"] and g["model"] == DIGITS.name
    assert findings(doc) == [("d", "p50"), ("d", "throughput")]
    p50, ips = g["findings"]
    assert p50["ratio"] == pytest.approx(1.5, rel=1e-3) and ips["ratio"] == pytest.approx(1 / 1.5, rel=1e-3)
    assert p50["siblings"] == ["a", "b", "c"] and p50["siblings_median"] == base["latency_us"]["p50"]
    assert p50["line"].startswith("d: p50 1.50x its 3 siblings' median (") and p50["provisional"]
    assert "from one run each: provisional" in p50["line"]
    text = farm.text(items(*(placed(base, n) for n in "abc"), placed(base, "d", factor=1.5)))
    assert "d: p50 1.50x its 3 siblings' median" in text and "d: throughput 0.67x its 3 siblings' median" in text


def runs_of(real, model: str = "digits", scenario: str = "single-stream") -> dict:
    return real[0][model, scenario]


def test_identical_places_and_a_place_1_1x_slower_are_not_flagged(real):
    base = runs_of(real)
    same = farm.compare_places(items(*(placed(base, n) for n in "abcd")))
    near = farm.compare_places(items(*(placed(base, n) for n in "abc"), placed(base, "d", factor=1.1)))
    assert findings(same) == findings(near) == [] and len(near["groups"][0]["places"]) == 4
    assert "none is 20% slower than its siblings" in farm.text(items(*(placed(base, n) for n in "abcd")))
    faster = farm.compare_places(items(*(placed(base, n) for n in "abc"), placed(base, "d", factor=0.5)))
    assert findings(faster) == []  # twice as fast: not a finding of this report


def test_throughput_alone_is_said_as_throughput(real):
    """An offline run 30% short of its siblings' throughput at the same p50: flagged on throughput only."""
    base = runs_of(real, scenario="offline")
    slow = placed(base, "c")
    slow["throughput_ips"] = base["throughput_ips"] / 1.3
    doc = farm.compare_places(items(placed(base, "a"), placed(base, "b"), slow, scenario="offline"))
    assert findings(doc) == [("c", "throughput")]
    assert doc["groups"][0]["findings"][0]["ratio"] == pytest.approx(1 / 1.3, rel=1e-3)


def test_a_place_is_its_runs_median_and_repetitions_make_it_no_longer_provisional(real):
    base = runs_of(real)
    runs = [placed(base, n) for n in "ab" for _ in range(3)]
    runs += [placed(base, "c", factor=f) for f in (1.0, 1.6, 1.6)]  # median 1.6x: slow
    runs += [placed(base, "d", factor=f) for f in (1.0, 1.0, 1.6)]  # median 1.0x: one slow run is not the board
    doc = farm.compare_places(items(*runs))
    assert findings(doc) == [("c", "p50"), ("c", "throughput")]
    f = doc["groups"][0]["findings"][0]
    assert not f["provisional"] and "provisional" not in f["line"] and f["ratio"] == pytest.approx(1.6, rel=1e-3)
    assert [len(p["runs"]) for p in doc["groups"][0]["places"]] == [3, 3, 3, 3]


def test_groups_models_scenarios_and_devices_are_never_mixed(real):
    """Two groups, each with its own slow place; a slower model and a slower scenario on other places of the same
    group; a GPU's run beside the CPUs': each compared only with its own kind of work."""
    digits, kws, offline = runs_of(real), runs_of(real, "kws"), runs_of(real, scenario="offline")
    slow_kws = placed(kws, "e", factor=5.0)  # another model, much slower: its own group of one place
    gpu = placed(digits, "f", factor=5.0)
    gpu["backend"] = {**gpu["backend"], "device": "cuda"}
    doc = farm.compare_places([
        *items(placed(digits, "a"), placed(digits, "b"), placed(digits, "c", factor=1.5), slow_kws, gpu),
        *items(placed(digits, "p", "pi5"), placed(digits, "q", "pi5", factor=1.3)),
        *items(placed(offline, "a"), placed(offline, "b", factor=8.0), scenario="offline"),
    ])  # fmt: skip
    by = {(g["group"], g["scenario"]): g for g in doc["groups"]}
    assert set(by) == {("rock5b", "single-stream"), ("pi5", "single-stream"), ("rock5b", "offline")}
    assert [p["place"] for p in by["rock5b", "single-stream"]["places"]] == ["a", "b", "c"]
    assert {f["place"] for f in by["rock5b", "single-stream"]["findings"]} == {"c"}
    assert {f["place"] for f in by["pi5", "single-stream"]["findings"]} == {"q"}
    assert {f["place"] for f in by["rock5b", "offline"]["findings"]} == {"b"}
    assert doc["not_compared"] == ["rock5b (e)", "rock5b (f)"]


def test_a_group_of_one_place_is_not_compared_and_said_in_one_line(real):
    base = runs_of(real)
    group_of_one = items(placed(base, "a"), placed(base, "a", factor=2.0), placed(base, "solo", "solo"))
    doc = farm.compare_places(group_of_one)
    assert doc["groups"] == [] and doc["not_compared"] == ["rock5b (a)", "solo (solo)"]
    assert farm.text(group_of_one).strip().count("\n") == 0 and "not compared" in farm.text(group_of_one)
    assert farm.markdown(group_of_one).strip().count("\n") == 0
    assert farm.text(items(runs_of(real))) == farm.markdown(items(runs_of(real))) == ""  # no place: nothing said
    assert farm.html_section(items(runs_of(real))) == ""


def test_the_outliers_environment_is_beside_its_siblings_with_what_differs_from_all_marked(real):
    base = runs_of(real)
    perf = {"governor": {"0": "performance", "1": "performance"}}
    runs = [placed(base, "a", temperature_c=51.0, kernel="6.1.0", **perf),
            placed(base, "b", temperature_c=54.0, kernel="6.1.0", **perf),
            placed(base, "c", temperature_c=52.0, kernel="6.1.1", **perf),
            placed(base, "d", factor=1.5, temperature_c=78.0, kernel="6.1.1", firmware={"uboot": "2024.01"},
                   governor={"0": "powersave", "1": "performance"})]  # fmt: skip
    doc = farm.compare_places(items(*runs))
    f = doc["groups"][0]["findings"][0]
    # the governor and the heat differ from every sibling; the kernel is c's too; the firmware is unknown on the
    # others; the hostname is one a board by nature
    assert f["differs"] == ["governor", "temperature"]
    text = farm.text(items(*runs))
    assert "governor     performance, powersave (differs from every sibling); siblings: a performance" in text
    assert "temperature  78 C (differs from every sibling); siblings: a 51 C, b 54 C, c 52 C" in text
    assert "firmware     uboot 2024.01; siblings: a n/a, b n/a, c n/a" in text
    assert "kernel       6.1.1; siblings" in text and "hostname     host-d; siblings: a host-a" in text
    md = farm.markdown(items(*runs))
    assert "| governor | performance, powersave **(differs)** | performance | performance | performance |" in md
    assert "| kernel | 6.1.1 | 6.1.0 | 6.1.0 | 6.1.1 |" in md
    page = farm.html_section(items(*runs))
    assert page.count('class="fail" title="differs from every sibling"') == 2 and "78 C (differs)" in page


def test_markup_in_place_and_group_names_stays_text(real):
    base = runs_of(real)
    runs = [placed(base, n, group=HOSTILE) for n in ("a", "b")] + [placed(base, HOSTILE, group=HOSTILE, factor=2.0)]
    page = farm.html_section(items(*runs))
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    md = farm.markdown(items(*runs))
    assert not re.search(r"<(?!br>)[A-Za-z/!?]", md) and not re.search(r"(?<!\\)[`\[\]]", md)
    # every line of a table as many cells as its header: no pipe in a name split a cell
    tables = [[len(re.findall(r"(?<!\\)\|", ln)) for ln in block.splitlines() if ln.startswith("|")]
              for block in md.split("\n\n")]  # fmt: skip
    assert len([t for t in tables if t]) == 2 and all(len(set(t)) == 1 for t in tables if t), tables


def test_bad_values_and_missing_sections_are_skipped_with_a_word(real):
    base = runs_of(real)
    nan = placed(base, "c")
    nan["latency_us"]["p50"] = math.nan  # p50 unknown, throughput known: judged on throughput alone
    nan["throughput_ips"] = base["throughput_ips"] / 2
    empty = placed(base, "d")
    del empty["latency_us"]
    empty["throughput_ips"] = None
    odd = [placed(base, "e"), placed(base, "f")]
    odd[0]["place"] = "rack1-e"  # not a section
    del odd[1]["place"]["name"]
    stuff = [*items(placed(base, "a"), placed(base, "b"), nan, empty, *odd), ("run 9 rock5b", "single-stream", None)]
    doc = farm.compare_places(stuff)
    (g,) = doc["groups"]
    assert [p["place"] for p in g["places"]] == ["a", "b", "c"]
    assert g["skipped"] == ["d: no p50 or throughput in its runs (a failed or empty run): skipped"]
    assert findings(doc) == [("c", "throughput")]
    assert "d: no p50 or throughput" in farm.text(stuff) and farm.markdown(stuff) and farm.html_section(stuff)


def test_edge_bench_report_over_a_store_shows_the_section_in_every_format(real, tmp_path):
    base = runs_of(real)
    db = tmp_path / "s.sqlite"
    with Store(db) as st:
        for name, factor in (("rack1-a", 1.0), ("rack1-b", 1.0), ("rack1-c", 1.46), ("rack1-d", 1.0)):
            st.add_run(placed(base, name, factor=factor), target="rock5b", campaign="farm", model_name="digits")
        bad = placed(base, "rack1-e")
        bad["latency_us"]["p50"] = math.nan  # stored as null
        st.add_run(bad, target="rock5b", campaign="farm", model_name="digits")
    proc = edge_bench("report", "--store", str(db))
    assert proc.returncode == 0, proc.stderr
    assert "Boards of one kind (farm)" in proc.stdout and "rack1-c: p50 1.46x its 3 siblings' median" in proc.stdout
    outs = {k: tmp_path / f"r.{k}" for k in ("html", "md", "json")}
    proc = edge_bench("report", "--store", str(db), *[x for k, f in outs.items() for x in (f"--{k}", str(f))])
    assert proc.returncode == 0, proc.stderr
    assert '<section id="farm">' in outs["html"].read_text()
    assert "## Boards of one kind (farm)" in outs["md"].read_text()
    doc = json.loads(outs["json"].read_text())["farm"]
    assert findings(doc) == [("rack1-c", "p50"), ("rack1-c", "throughput")]
    assert doc["groups"][0]["findings"][0]["siblings"] == ["rack1-a", "rack1-b", "rack1-d", "rack1-e"]


def test_a_campaigns_json_carries_the_farm_document(real):
    """The campaign's own reports go through the same section: no place here (local:), so no group and nothing said."""
    _, doc = real
    assert doc["farm"]["groups"] == [] and doc["farm"]["not_compared"] == [] and "20%" in doc["farm"]["rule"]


def test_boards_of_another_kind_and_one_name_on_two_farms_are_not_siblings(real):
    """Hostile review, round 4: a rack tagged by rack, not board, holds a pi4 beside two rock-5b: the pi4 is not
    their slow sibling; and `p0` of one coordinator is not `p0` of another."""
    digits = runs_of(real)
    rock = [placed(digits, n, board="Radxa ROCK 5B") for n in ("r1", "r2")]
    pi = placed(digits, "pi", factor=2.5, board="Raspberry Pi 4 Model B")
    doc = farm.compare_places(items(*rock, pi))
    assert [sorted(p["place"] for p in g["places"]) for g in doc["groups"]] == [["r1", "r2"]]
    assert findings(doc) == [] and any("pi" in s for s in doc["not_compared"])
    a, b = placed(digits, "p0"), placed(digits, "p0", factor=1.5)
    b["place"]["coordinator"] = "farm-b:20408"
    (g,) = farm.compare_places(items(a, b))["groups"]
    assert sorted(p["place"] for p in g["places"]) == ["p0 (127.0.0.1:20408)", "p0 (farm-b:20408)"]
    assert {f["place"] for f in g["findings"]} == {"p0 (farm-b:20408)"}
