"""Reports that a name cannot run: targets and a campaign named with Markdown, HTML and spreadsheet syntax (a pipe, a
newline, backticks, a tag, `=HYPERLINK(...)`) stay text in every report. Markdown tables keep their columns, a CSV
cell never starts like a formula (real negative numbers stay numbers), HTML escapes. Real runs of a campaign on
this machine, kept in a real store and reported by `edge-bench report` as a user would."""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import sys

import pytest
from conftest import MODELS, ROOT, need

from bench.store import Store

DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"
PIPE = "pi5 | 2 cores"
FORMULA = '=HYPERLINK("http://127.0.0.1:9/x","click")'
HTML = "<img src=x onerror=alert(1)>\nrack `7`"
MINUS = "-2+3"  # text that a spreadsheet reads as a number sum: it is a name here, so neutralised
SERVER = "@gpu [box](http://127.0.0.1:9/)"
NAMES = (PIPE, FORMULA, HTML)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def edge_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)  # fmt: skip


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A campaign of three local targets with hostile names (and a hostile campaign name), run for real, with its
    Markdown and CSV; then a server's run of the same model added (a board's record, served slower than any, so its
    edge-vs-server crossover is negative) under a hostile name too."""
    need("onnxruntime")
    tmp = tmp_path_factory.mktemp("escaping")
    targets = "".join(f'[[target]]\nname = {toml_str(n)}\nurl = "local:"\ncpus = "1"\n' for n in NAMES)
    camp = tmp / "c.toml"
    camp.write_text(f'[campaign]\nname = {toml_str("nightly | <b>" + MINUS)}\n{targets}[[model]]\n'
                    f'name = {toml_str(MINUS)}\npath = "{DIGITS}"\n[[scenario]]\niterations = 50\n'
                    "[slo]\np99_ms = 1000\n")
    db = tmp / "s.sqlite"
    proc = edge_bench("run", str(camp), "--store", str(db), "--md", str(tmp / "c.md"), "--csv", str(tmp / "c.csv"))
    assert proc.returncode == 0, proc.stderr
    with Store(db) as st:
        runs = st.runs()
        board = min(runs, key=lambda r: r.id)
        # 4x the slowest board run's figures, so every board wins (a run of this loaded VM can be 4x another's)
        slower = {k: max(r.result["latency_us"][k] for r in runs) * 4 for k in board.result["latency_us"]}
        served = {**board.result, "backend": {**board.result["backend"], "name": "kserve"}, "latency_us": slower,
                  "server": {"network": {"rtt_ms": 0.01}, "statistics": {"available": False, "reason": "none"}}}
        st.add_run(served, target=SERVER, model_name=MINUS)
        ids = [str(r.id) for r in sorted(st.runs(), key=lambda r: r.id)]
    return tmp, db, ids


def md_tables(text: str) -> list[list[int]]:
    """Each Markdown table as the number of cells of each of its lines, split as GitHub splits them: on a pipe that
    no backslash escapes."""
    tables, current = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            current = None
            continue
        cells, escaped = 0, False
        for ch in line:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == "|":
                cells += 1
        if current is None:
            current = []
            tables.append(current)
        current.append(cells - 1)
    return tables


def assert_markdown_is_text(text: str, rows: int, names=(PIPE, HTML)) -> None:
    tables = md_tables(text)
    assert tables and all(len(set(t)) == 1 for t in tables), tables  # every row as many cells as its header
    assert len(tables[0]) == 2 + rows  # the runs table: a newline in a name did not start a line of its own
    assert not re.search(r"<(?!br>)[A-Za-z/!?]", text)  # no tag but the line breaks made of newlines
    assert not re.search(r"(?<!\\)[`\[\]]", text)  # no code span, no link or image
    for name in names:  # every character kept, escaped
        assert name.replace("\n", "<br>").replace("<img", "&lt;img") in re.sub(r"\\(.)", r"\1", text), name


def assert_csv_is_text(text: str) -> list[dict]:
    rows = list(csv.DictReader(io.StringIO(text)))
    for row in rows:
        for value in row.values():
            try:
                float(value.replace(",", ""))
            except ValueError:
                assert not value.startswith(FORMULA_START), value  # a text cell a spreadsheet would evaluate
    return rows


def test_markdown_tables_keep_their_columns_and_names_stay_text(store):
    tmp, db, ids = store
    campaign_md = (tmp / "c.md").read_text()
    assert_markdown_is_text(campaign_md, rows=3)
    assert campaign_md.startswith("# Campaign nightly \\| &lt;b>-2+3\n")
    proc = edge_bench("report", *ids, "--md", "-", "--store", str(db))
    assert proc.returncode == 0, proc.stderr
    assert_markdown_is_text(proc.stdout, rows=4, names=(PIPE, HTML, SERVER))
    assert "## Edge vs server" in proc.stdout and "| @gpu \\[box\\](http://127.0.0.1:9/) (server) |" in proc.stdout
    # A failed run's error (from a board: anything) in the runs table, the error list and the SLO table.
    from bench import report
    from bench.campaign.runner import RunOutcome

    failed = RunOutcome(0, "single-stream", MINUS, PIPE, "tcp://127.0.0.1:9", error="lost | <script>x</script>\nrow")
    text = report.markdown("t", [failed.row()], report.slo_cases([failed]))
    assert_markdown_is_text(text, rows=1, names=(PIPE,))
    assert "- pi5 \\| 2 cores / -2+3: lost \\| &lt;script>x&lt;/script><br>row" in text


def test_csv_cells_never_start_a_formula_and_negative_numbers_stay_numbers(store):
    tmp, db, ids = store
    rows = assert_csv_is_text((tmp / "c.csv").read_text())
    assert [r["target"] for r in rows] == [PIPE, "'" + FORMULA, HTML]  # the formula, neutralised; nothing lost
    assert {r["model"] for r in rows} == {"'" + MINUS} and all(float(r["p99_us"]) > 0 for r in rows)
    proc = edge_bench("report", *ids, "--csv", "-", "--store", str(db))
    assert proc.returncode == 0, proc.stderr
    rows = assert_csv_is_text(proc.stdout)
    assert [r["target"] for r in rows] == [PIPE, "'" + FORMULA, HTML, "'" + SERVER]
    crossed = [r for r in rows if r["side"]]
    assert {r["versus"] for r in crossed} >= {"'" + SERVER}  # a label in a comparison column is text too
    rtt = [float(r["crossover_rtt_p50_ms"]) for r in crossed]
    assert rtt and all(x < 0 for x in rtt)  # the board wins at any round trip: a number, not "'-0.1"


def test_html_escapes_every_name(store):
    tmp, db, ids = store
    page = tmp / "r.html"
    proc = edge_bench("report", *ids, "--html", str(page), "--store", str(db))
    assert proc.returncode == 0 and proc.stderr == f"edge-bench: report: {page}\n", proc.stderr  # only where it wrote
    text = page.read_text()
    assert "<img" not in text and "<b>" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "pi5 | 2 cores" in text and "=HYPERLINK(&quot;http://127.0.0.1:9/x&quot;,&quot;click&quot;)" in text
    assert os.path.getsize(page) < 2_000_000
