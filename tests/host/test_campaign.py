"""Campaign files: typed and checked, run end to end (two local targets on different backends and a board's agent
over a pty) into a store, with SLO verdicts, JUnit XML, Markdown, CSV and JSON; the mistakes a user makes in one."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET

import pytest
from agentkit import AgentProcess, Cable
from conftest import MODELS, ROOT, need
from helpers import read_until

from bench.campaign import CampaignWarning, load
from bench.store import Store
from edge_runtime.errors import UserError

pytest.importorskip("serial")
DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"


def write(tmp_path, text: str):
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def edge_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)  # fmt: skip


def test_a_campaign_of_two_local_targets_and_a_board_runs_into_the_store(tmp_path):
    need("onnxruntime")
    need("openvino")
    cable = Cable()
    try:
        with AgentProcess(cable.agent_url, tmp_path / "state"):
            camp = write(
                tmp_path,
                f"""
[campaign]
name = "three-targets"
repetitions = 2
[[target]]
name = "ort"
url = "local:"
cpus = "1"
backend = "onnxruntime"
[[target]]
name = "ov"
url = "local:"
cpus = "1"
backend = "openvino"
[[target]]
name = "board"
url = "{cable.host_url}"
cpus = "1"
[target.slo]
p99_ms = 0.001
[[model]]
name = "digits"
path = "{DIGITS}"
[[scenario]]
kind = "single-stream"
iterations = 300
[slo]
p99_ms = 50
error_budget = 0.05
""",
            )
            out = {k: tmp_path / f"r.{k}" for k in ("json", "md", "csv", "xml")}
            proc = edge_bench("run", str(camp), "--store", str(tmp_path / "s.sqlite"), "--json", str(out["json"]),
                              "--md", str(out["md"]), "--csv", str(out["csv"]), "--junit", str(out["xml"]))  # fmt: skip
    finally:
        cable.close()
    assert proc.returncode == 1, proc.stderr  # the board's own SLO (p99 <= 1 us) cannot be met
    doc = json.loads(out["json"].read_text())
    runs = doc["runs"]
    assert [(r["target"], r["repetition"]) for r in runs] == [
        (t, rep) for rep in (0, 1) for t in ("ort", "ov", "board")
    ]  # interleaved: every target in each repetition
    assert {r["result"]["backend"]["name"] for r in runs} == {"onnxruntime", "openvino"}
    assert all(r["result"]["latency_us"]["count"] == 300 and r["run"] for r in runs)
    assert [r["slo"] for r in runs] == ["pass", "pass", "FAIL"] * 2
    assert "link" in runs[2]["result"] and "link" not in runs[0]["result"]
    suite = ET.parse(out["xml"]).getroot()
    # p99 and the error budget for 6 runs; the board misses both twice (every query is over its 1 us bound)
    assert suite.get("tests") == "12" and suite.get("failures") == "4"
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert all("0.001 ms" in n and "board" not in n for n in failed) and len(failed) == 4
    assert {c.get("classname") for c in suite.iter("testcase") if c.find("failure") is not None} == {
        "three-targets.board"
    }
    assert out["csv"].read_text().count("\n") == 7 and "| board | digits |" in out["md"].read_text()
    with Store(tmp_path / "s.sqlite") as st:
        stored = st.runs()
        assert len(stored) == 6 and {r.campaign for r in stored} == {"three-targets"}
        assert {r.target for r in stored} == {"ort", "ov", "board"}
    # report, baseline and compare on what the campaign stored; the verdicts were kept with the runs
    ids = {(r["target"], r["repetition"]): str(r["run"]) for r in runs}
    store = ["--store", str(tmp_path / "s.sqlite")]
    proc = edge_bench("report", *ids.values(), "--md", "-", *store)
    assert proc.returncode == 0 and proc.stdout.count("**FAIL**") == 4
    assert "| board | digits | single-stream |" in proc.stdout
    proc = edge_bench("baseline", "set", "board-main", ids["board", 0], *store)
    assert proc.returncode == 0, proc.stderr
    proc = edge_bench("compare", "--baseline", "board-main", ids["board", 1], "--threshold", "200", *store)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the same work twice: within 200%
    proc = edge_bench("compare", ids["ort", 0], ids["ov", 0], *store)  # configurations compare (issue 25)
    assert proc.returncode in (0, 1) and "differs: target ort vs ov; backend onnxruntime vs openvino" in proc.stdout


SERVER = 'url = "kserve+http://127.0.0.1:8000/m"\n'


def test_campaign_mistakes_are_one_line_and_name_the_key(tmp_path):
    base = f'[campaign]\nname = "c"\n[[target]]\nurl = "local:"\n[[model]]\npath = "{DIGITS}"\n'
    cases = [
        ("[campaign]\nrepetitons = 2\n" + base.split("\n", 2)[2], "did you mean 'repetitions'"),
        (base + '[[scenario]]\nkind = "single-streem"\n', "unknown scenario"),
        (base + '[[scenario]]\nkind = "multi-stream"\nrate_qps = 5\n', "rate_qps goes with kind = 'server' or 'burst'"),
        (base + '[[scenario]]\nkind = "replay"\n', 'kind = "replay" needs arrivals'),
        (base + '[[scenario]]\nkind = "replay"\narrivals = "/nope.txt"\n', "/nope.txt"),
        (base + '[[scenario]]\nkind = "burst"\nrate_qps = 9\nburst_on_s = 0\n', "burst_on_s"),
        (base + '[[scenario]]\nkind = "multi-stream"\nsamples_per_query = 0\n', "samples_per_query"),
        (base + '[[scenario]]\nkind = "server"\n', 'kind = "server" needs rate_qps'),
        (base + '[[scenario]]\nkind = "server"\nrate_qps = nan\n', "rate_qps"),
        (base.replace("local:", "http://x"), "unknown scheme"),
        (base + "[slo]\np99ms = 3\n", "did you mean 'p99_ms'"),
        (base.replace('url = "local:"', 'url = "local:"\nheaders = { a = "b" }'), "headers go with server targets"),
        (base.replace('url = "local:"', 'url = "kserve+http://127.0.0.1:8000/m"\ncpus = "1"'), "cpus is a board's"),
        (base.replace('url = "local:"', 'url = "kserve+http://127.0.0.1/m"'), "HOST:PORT is needed"),
        # Headers are checked when the campaign is read, ${VAR}s included, not when the target's turn comes.
        (base.replace('url = "local:"', SERVER + 'headers = { t = "${EDGE_BENCH_NO_VAR}" }'), "NO_VAR is not set"),
        (base.replace('url = "local:"', SERVER + 'headers = { t = "caf\u00e9" }'), "must be ASCII"),
        (base.replace('url = "local:"', SERVER + 'headers = { Content-Length = "0" }'), "set by the HTTP/gRPC client"),
        (base + '[[scenario]]\nconcurrency = 0\n', "concurrency"),
        # Mistakes that once passed loading and failed when their run's turn came (exit 1, after other runs):
        (base.replace('url = "local:"', 'url = "local:"\nbackend = "tensorrtx"'), "backend 'tensorrtx': not one"),
        (base.replace('url = "local:"', 'url = "local:?backend=nope"'), "backend 'nope': not one"),
        (base.replace('url = "local:"', 'url = "local:"\ncpus = "4096"'), "cpus 4096: this machine has CPUs"),
        (base.replace('url = "local:"', 'url = "local:"\nbackend = "tflite"'), "cannot read [[model]]"),
        (base.replace(str(DIGITS), str(tmp_path / "notes.txt")), "unknown file type"),
        (base + '[[scenario]]\nkind = "server"\nrate_qps = 1e6\nduration_s = 604800\n', "over the 50,000,000"),
        (base + "[slo]\np99_ms = -1\n", "p99_ms"),
        (base + "[slo]\nerror_budget = 2\n", "error_budget"),
        (base.replace(str(DIGITS), "/nope.onnx"), "/nope.onnx"),
        ("this is = not [ toml", "not TOML"),
        ('[campaign]\nname = "c"\n', "no [[target]]"),
    ]
    (tmp_path / "notes.txt").write_text("not a model\n")
    for text, needle in cases:
        p = write(tmp_path, text)
        with pytest.raises(UserError, match=None) as err:
            load(str(p))
        assert needle in err.value.one_line(), (text, err.value.one_line())
        proc = edge_bench("run", str(p), "--store", str(tmp_path / "s.sqlite"))
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], (text, proc.stderr)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        camp = load(str(write(tmp_path, base + "colour = 'blue'\n")))  # resembles nothing known: a warning
    assert camp.targets[0].url == "local:"
    assert any(issubclass(w.category, CampaignWarning) and "colour" in str(w.message) for w in caught)
    proc = edge_bench("run", str(write(tmp_path, base + "colour = 'blue'\n[[scenario]]\niterations = 20\n")),
                      "--store", str(tmp_path / "s.sqlite"))  # fmt: skip
    warned = [ln for ln in proc.stderr.splitlines() if "colour" in ln]  # one line, not a source path and its code
    assert proc.returncode == 0 and len(warned) == 1 and warned[0].startswith("edge-bench: warning: "), proc.stderr
    proc = edge_bench("run", str(write(tmp_path, base)), "--store", str(tmp_path / "s.sqlite"), "--bogus")
    assert proc.returncode == 2 and "--bogus" in proc.stderr
    proc = edge_bench("run", str(write(tmp_path, base)), "--store", str(tmp_path / "s.sqlite"), "--slo", "p99=1ms")
    assert proc.returncode == 2 and "--slo goes with the one-off form" in proc.stderr  # not silently ignored


def test_ctrl_c_stops_a_campaign_and_keeps_what_finished(tmp_path):
    need("onnxruntime")
    import signal

    camp = write(
        tmp_path,
        f"""
[campaign]
name = "long"
repetitions = 3
[[target]]
url = "local:"
cpus = "1"
[[model]]
path = "{DIGITS}"
[[scenario]]
duration_s = 3
""",
    )
    store = tmp_path / "s.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "bench.cli", "run", str(camp), "--store", str(store), "--json",
                             str(tmp_path / "r.json")], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        lines = read_until(proc, "[2/3]")
        lines += read_until(proc, "measuring")  # the second run is measuring (a second in; 2 s of it left)
        # numbered as the table numbers repetitions: from 0, of 0-2 (issue 25, item 9)
        assert lines[-1].startswith("target1 digits_cnn_int8 single-stream repetition 1 of 0-2: measuring"), lines
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 130, [*lines, err]
    assert "interrupted: 2 of 3 runs kept" in err
    runs = json.loads((tmp_path / "r.json").read_text())["runs"]
    assert [r["slo"] for r in runs] == [None, None] and runs[1]["result"]["aborted"]["kind"] == "interrupted"
    with Store(store) as st:
        assert len(st.runs()) == 2  # the finished run and the partial one, both whole
    # Issue 22: with no SLO and no run rules, the cut run is not shown as a whole one (`slo - valid -`): partial, in
    # the campaign's table, its JSON, and every report of the stored runs.
    assert [r["partial"] for r in runs] == ["no", "yes"]
    assert "1 of 2 runs partial" in _out and f"run {runs[1]['run']} target1: partial: interrupted by SIGINT" in _out
    ids = [str(r["run"]) for r in runs]
    md = edge_bench("report", *ids, "--md", "-", "--store", str(store))
    assert "| no | - |" in md.stdout and "| yes | - |" in md.stdout
    assert "repetition 1: partial: interrupted by SIGINT" in md.stdout
    rows = list(csv.DictReader(edge_bench("report", *ids, "--csv", "-", "--store", str(store)).stdout.splitlines()))
    assert [r["partial"] for r in rows] == ["no", "yes"] and [r["slo"] for r in rows] == ["", ""]
    html = edge_bench("report", *ids, "--html", str(tmp_path / "r.html"), "--store", str(store))
    assert html.returncode == 0, html.stderr
    page = (tmp_path / "r.html").read_text()
    assert '<td class="fail">yes</td>' in page and "target1: partial: interrupted by SIGINT" in page


def test_run_rules_and_the_server_scenario_in_a_campaign(tmp_path):
    need("onnxruntime")
    camp = write(tmp_path, f"""
[campaign]
name = "rules"
[[target]]
url = "local:"
cpus = "1"
[[model]]
path = "{DIGITS}"
[[scenario]]
kind = "server"
rate_qps = 200
duration_s = 1.5
min_duration_s = 1.0
[[scenario]]
kind = "server"
rate_qps = 100
duration_s = 1.0
min_queries = 5000
""")
    out = tmp_path / "r.json"
    xml = tmp_path / "j.xml"
    proc = edge_bench("run", str(camp), "--store", str(tmp_path / "s.sqlite"), "--json", str(out), "--junit", str(xml))
    assert proc.returncode == 1, proc.stderr  # the second scenario cannot reach 5,000 queries in 1 s at 100/s
    runs = json.loads(out.read_text())["runs"]
    assert [r["scenario"] for r in runs] == ["server@200qps", "server@100qps"]
    assert [r["valid"] for r in runs] == ["yes", "NO"]
    first = runs[0]["result"]["scenario"]
    assert first["kind"] == "server" and first["rate_qps"] == 200 and abs(first["queries"] / 1.5 - 200) < 60
    failed = [c for c in ET.parse(xml).getroot().iter("testcase") if c.find("failure") is not None]
    assert len(failed) == 1 and "run rules" in failed[0].get("name")
    assert "under min_queries 5,000" in failed[0].find("failure").get("message")
    bad = write(tmp_path, camp.read_text().replace("min_duration_s = 1.0", "min_duration_s = 2.0"))
    with pytest.raises(UserError, match="under min_duration_s"):
        load(str(bad))


def test_the_board_runs_every_scenario_of_a_campaign_itself(tmp_path):
    """Over the pty the board's agent gets the schedule (an arrivals file's numbers included) and runs it on its own
    cores; the host only stores what comes back, under the scenario's label."""
    need("onnxruntime")
    (tmp_path / "gaps.txt").write_text("# ms\n" + "1\n" * 60)
    cable = Cable()
    try:
        with AgentProcess(cable.agent_url, tmp_path / "state"):
            camp = write(tmp_path, f"""
[campaign]
name = "scenarios"
[[target]]
name = "board"
url = "{cable.host_url}"
cpus = "1"
[[model]]
name = "digits"
path = "{DIGITS}"
[[scenario]]
kind = "multi-stream"
samples_per_query = 2
interval_ms = 20
duration_s = 0.4
[[scenario]]
kind = "burst"
rate_qps = 500
burst_on_s = 0.1
burst_off_s = 0.1
duration_s = 0.6
[[scenario]]
kind = "replay"
arrivals = "gaps.txt"
[[scenario]]
kind = "offline"
iterations = 300
""")
            out = tmp_path / "r.json"
            proc = edge_bench("run", str(camp), "--store", str(tmp_path / "s.sqlite"), "--json", str(out))
    finally:
        cable.close()
    assert proc.returncode == 0, proc.stderr
    runs = json.loads(out.read_text())["runs"]
    assert [r["scenario"] for r in runs] == [
        "multi-stream@2x/20ms", "burst@500qps/0.1s-on/0.1s-off", "replay:gaps.txt", "offline"
    ]
    secs = [r["result"]["scenario"] for r in runs]
    assert [s["kind"] for s in secs] == ["multi-stream", "burst", "replay", "offline"]
    assert secs[0]["queries"] == 20 and secs[0]["samples_per_query"] == 2
    assert 60 < secs[1]["queries"] < 250 and secs[2]["queries"] == 60 and secs[3]["queries"] == 300
    assert all("link" in r["result"] for r in runs)  # it crossed the cable
    with Store(tmp_path / "s.sqlite") as st:
        assert sorted(r.scenario for r in st.runs()) == sorted(r["scenario"] for r in runs)


def test_a_terminal_gets_a_progress_bar_and_names_are_shown_as_they_are(tmp_path):
    """On a terminal: one bar over the campaign (runs done, elapsed, ETA) and the run under way; a target named like
    rich markup is shown literally, not taken as markup (or refused as bad markup)."""
    need("onnxruntime")
    import fcntl
    import os
    import pty
    import re
    import select
    import struct
    import termios

    camp = write(tmp_path, f"""
[campaign]
name = "bars[/]"
[[target]]
name = "x[red]y"
url = "local:"
cpus = "1"
[[model]]
path = "{DIGITS}"
[[scenario]]
iterations = 200
[[scenario]]
kind = "offline"
iterations = 200
""")
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    cmd = [sys.executable, "-m", "bench.cli", "run", str(camp), "--store", str(tmp_path / "s.sqlite")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    seen = b""
    while select.select([leader], [], [], 120)[0]:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the other side closed
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 0
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode())
    last = [line for line in screen.split("\r") if "2/2" in line]
    assert last and "━" in last[-1] and "ETA" in last[-1] and "bars[/]" in last[-1], screen[-500:]
    assert "x[red]y digits_cnn_int8" in screen and "1/2" in screen
    assert "x[red]y" in out  # and the table on stdout, not drawn over


def test_a_campaign_whose_target_is_down_says_what_failed_not_an_slo_missed(tmp_path):
    """Issue 22: no SLOs, and a target that is down (a KServe URL on a loopback port nobody listens on: refused at
    once). Every run failed, and the verdict says so with the reason, in the terminal, the Markdown and the HTML; it
    once said "SLO missed: 2 of 2 checks" of a campaign that had no SLO."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    camp = write(tmp_path, f"""
[campaign]
name = "down"
repetitions = 2
[[target]]
name = "pi"
url = "kserve+http://127.0.0.1:{dead}/digits"
[[model]]
path = "{DIGITS}"
[[scenario]]
iterations = 20
""")
    md, page = tmp_path / "r.md", tmp_path / "r.html"
    proc = edge_bench("run", str(camp), "--store", str(tmp_path / "s.sqlite"), "--md", str(md), "--html", str(page))
    assert proc.returncode == 1, proc.stderr  # a run that failed is a failed check, as before
    verdict = proc.stdout.strip().splitlines()[-1]
    said = f"2 of 2 runs failed: target 'pi': kserve+http://127.0.0.1:{dead}/digits: no KServe v2 server at"
    assert verdict.startswith(said) and "(x2); no SLOs given; stored in" in verdict, verdict
    assert "SLO missed" not in proc.stdout + md.read_text() + page.read_text()
    assert said in md.read_text() and said.replace("'", "&#x27;") in page.read_text()


def test_a_saturated_local_target_is_said_in_every_output(tmp_path):
    """Issue 22 on a `local:` target: a server scenario at 20 times what the model sustains here (measured first) and
    one at a tenth of it. The first ends at its time and is saturated in the table, the JSON, the Markdown, the CSV,
    the JUnit XML and the HTML, with the rates and the queries not sent ("achieved X of Y queries/s", issue 25); the
    second kept up and says so; the answer says the first's target was saturated."""
    need("onnxruntime")
    from helpers import sustained_ips

    model = MODELS / "resnet8" / "resnet8_int8.onnx"
    sustained = sustained_ips(str(model))
    camp = write(tmp_path, f"""
[campaign]
name = "overload"
[[target]]
name = "pc"
url = "local:"
cpus = "1"
[[model]]
path = "{model}"
[[scenario]]
kind = "server"
rate_qps = {min(20 * sustained, 1e6):.0f}
duration_s = 1.5
[[scenario]]
kind = "server"
rate_qps = {sustained / 10:.0f}
duration_s = 1.5
""")
    out = {k: tmp_path / f"r.{k}" for k in ("json", "md", "csv", "html", "junit")}
    proc = edge_bench("run", str(camp), "--store", str(tmp_path / "s.sqlite"), *[x for k, p in out.items()
                      for x in (f"--{k}", str(p))])  # fmt: skip
    assert proc.returncode == 0, proc.stderr  # no SLO: saturated is said, not a failed check
    doc = json.loads(out["json"].read_text())
    over, kept = doc["runs"]
    sc = over["result"]["scenario"]
    assert over["saturated"] == "yes" and kept["saturated"] == "no" and over["partial"] == kept["partial"] == "no"
    assert over["result"]["wall_s"] < 1.5 + 0.5 and sc["saturated"] and sc["not_sent_share"] > 0.5
    achieved = f"achieved {sc['achieved_qps']:,.0f} of {sc['scheduled_qps']:,.0f} queries/s"
    note = f"saturated: {achieved}; {sc['not_sent']:,} of {sc['scheduled']:,} queries"
    assert [n for n in over["notes"] if n.startswith(note)] and kept["notes"] == []  # the JSON rows
    assert f"run {over['run']} pc: {note}" in proc.stdout and "1 of 2 runs saturated; no SLOs given" in proc.stdout
    table = proc.stdout.splitlines()
    header = next(k for k, line in enumerate(table) if line.startswith("run  "))
    assert table[header].split()[-2:] == ["partial", "saturated"]
    assert [line.split()[-1] for line in table[header + 1:header + 3]] == ["yes", "no"]
    assert "  saturated yes: an open loop that fell behind its schedule" in proc.stdout  # the legend, as one was
    # the answer, first: this scenario's one target, saturated, said before the table
    assert doc["answer"][0]["targets"][0]["saturated"] and not doc["answer"][1]["targets"][0]["saturated"]
    first = proc.stdout.index("pc only (p50 ")
    assert first < proc.stdout.index("run  ") and achieved in proc.stdout[first:proc.stdout.index("run  ")]
    md = out["md"].read_text()
    assert note in md and "| no | yes |" in md and md.index("## Answer") < md.index("| run |")
    rows = list(csv.DictReader(out["csv"].open()))
    assert [r["saturated"] for r in rows] == ["yes", "no"] and int(rows[0]["not_sent"]) == sc["not_sent"]
    assert float(rows[0]["achieved_qps"]) < float(rows[0]["scheduled_qps"]) / 2
    props = {p.get("name"): p.get("value") for p in ET.parse(out["junit"]).getroot().iter("property")}
    said = [v for k, v in props.items() if k.startswith(f"run {over['run']} pc ") and k.endswith(": saturated")]
    assert said and said[0].startswith(note) and not [k for k in props if k.startswith(f"run {kept['run']} ")
                                                      and k.endswith(": saturated")]  # fmt: skip
    assert note in out["html"].read_text() and '<td class="fail">yes</td>' in out["html"].read_text()


def test_the_error_budget_is_a_share_of_every_query_sent():
    """Failed queries have no latency but were asked: the share is (over the bound + failed) / (answered + failed),
    so a run exactly at its budget passes and no share exceeds 1."""
    from bench.campaign import SLO
    from bench.slo import evaluate

    slo = SLO(bounds_ms={"p99_ms": 10.0}, error_budget=0.001)
    at_budget = {"latency_us": {"count": 999, "p99": 900.0}, "histogram_us": [[900, 999]], "failed_queries": 1}
    got = evaluate(at_budget, slo)["error_budget"]
    assert got["share"] == 0.001 and got["pass"] and got["spent_pct"] == 100.0
    over = {"latency_us": {"count": 1000, "p99": 900.0}, "histogram_us": [[900, 990], [20000, 10]], "failed_queries": 0}
    assert evaluate(over, slo)["error_budget"]["share"] == 0.01
    dead = {"latency_us": {"count": 10, "p99": 900.0}, "histogram_us": [[900, 10]], "failed_queries": 990}
    got = evaluate(dead, slo)["error_budget"]
    assert got["share"] == 0.99 and not got["pass"]
    # An open loop that fell behind: what it had no time to send counts; a run that kept up and left one query due
    # at its very end is not charged for it.
    served = {"latency_us": {"count": 900, "p99": 900.0}, "histogram_us": [[900, 900]], "failed_queries": 0}
    saturated = {**served, "scenario": {"scheduled": 1000, "not_sent": 100, "saturated": True}}
    got = evaluate(saturated, slo)["error_budget"]
    assert got["share"] == 0.1 and not got["pass"]
    kept_up = {**served, "scenario": {"scheduled": 901, "not_sent": 1, "saturated": False}}
    assert evaluate(kept_up, slo)["error_budget"]["share"] == 0.0


def test_a_campaign_over_its_cap_says_the_cap_and_many_unknown_keys_are_counted_not_listed(tmp_path):
    """A 21 MB campaign is over the 16 MiB campaign cap (it was "more than this machine can hold"); 100,005 unknown
    keys are ten warnings and one line counting the rest (each was a line of its own: 700,000 keys, 700,000 lines)."""
    need("onnxruntime")
    import os

    from bench.campaign import MAX_CAMPAIGN_BYTES, MAX_UNKNOWN_SHOWN

    big = tmp_path / "big.toml"
    big.touch()
    os.truncate(big, 21_000_000)  # sparse: the size is what is checked, before a byte is read
    with pytest.raises(UserError) as err:
        load(str(big))
    line = err.value.one_line()
    assert str(big) in line and "21,000,000 bytes (20.0 MiB)" in line and "over the 16 MiB cap" in line, line
    assert "machine" not in line and MAX_CAMPAIGN_BYTES == 16 << 20
    proc = edge_bench("run", str(big), "--store", str(tmp_path / "s.sqlite"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "over the 16 MiB cap" in lines[0], proc.stderr

    n = 100_000
    camp = write(tmp_path, '[campaign]\nname = "many"\n' + "".join(f"k{i:06d} = 1\n" for i in range(n))
                 + f'[[target]]\nurl = "local:"\ncpus = "1"\nzz1 = 1\nzz2 = 2\nzz3 = 3\n[[model]]\npath = "{DIGITS}"\n'
                 '[[scenario]]\niterations = 20\n[slo]\nqq1 = 1\nqq2 = 2\n')  # fmt: skip
    total = n + 5
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load(str(camp))
    said = [str(w.message) for w in caught if issubclass(w.category, CampaignWarning)]
    assert len(said) == MAX_UNKNOWN_SHOWN + 1
    assert all("unknown key 'k0000" in s for s in said[:MAX_UNKNOWN_SHOWN])  # the first ones, named
    assert said[-1].endswith(f"... and {total - MAX_UNKNOWN_SHOWN:,} more unknown keys ignored ({total:,} in all)")
    proc = edge_bench("run", str(camp), "--store", str(tmp_path / "s.sqlite"))
    warned = [ln for ln in proc.stderr.splitlines() if "unknown key" in ln]
    assert proc.returncode == 0 and len(warned) == MAX_UNKNOWN_SHOWN + 1, proc.stderr[-2000:]
    assert warned[-1] == (f"edge-bench: warning: campaign {str(camp)!r}: ... and {total - MAX_UNKNOWN_SHOWN:,} more "
                          f"unknown keys ignored ({total:,} in all)")  # fmt: skip


def test_one_path_runs_a_request_into_the_store():
    """Issue 23, step 23: `edge-bench run --target` and a campaign's runs go through bench/campaign/execute.py, the one
    place that calls the store's add_run in its sink (they each wrote their own `keep` and Ctrl-C handling)."""
    import ast

    callers = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "bench").rglob("*.py") if p.parent.name != "store"
                     for n in ast.walk(ast.parse(p.read_text()))
                     if isinstance(n, ast.Attribute) and n.attr == "add_run")  # fmt: skip
    assert callers == ["bench/campaign/execute.py"]
    for module in ("bench/cli/run.py", "bench/campaign/runner.py"):
        assert "from bench.campaign.execute import" in (ROOT / module).read_text(), module
