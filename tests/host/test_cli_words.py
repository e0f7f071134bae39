"""edge-bench's names, messages and help tell the truth (issue 25, items 7 and 9), as a user meets them: the CLI in
child processes, real runs of a reference model on local: and over a real agent on 127.0.0.1, a real store. Each test
is one thing the first hour got wrong: the help without the campaign form, reports written without saying where, a
one-off named by its whole URL, a refused token called UNREACHABLE, a baseline overwritten in silence, a run's link
round trip unlike `targets`', `targets` passing what `run` refuses, compare's figures unlike the table's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from agentkit import AgentProcess
from conftest import MODELS, ROOT, need

from bench.store import Store
from bench.targets import registry
from bench.transports import bare

pytest.importorskip("serial")
DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"
LOCAL = "local:?cpus=1"


def edge_bench(*args, store=None, cwd=ROOT, timeout: float = 180) -> subprocess.CompletedProcess:
    """`edge-bench ARGS` in a child, from this checkout (PYTHONPATH: a cwd elsewhere must not import another)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if store is not None:
        env["EDGE_BENCH_STORE"] = str(store)
    return subprocess.run([sys.executable, "-m", "bench.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env=env)  # fmt: skip


def written(proc) -> list[str]:
    return [line.removeprefix("edge-bench: report: ") for line in proc.stderr.splitlines()
            if line.startswith("edge-bench: report: ")]  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two one-off runs of the digits model on local: in a store, the first with --html and --json written to
    relative paths (each said with its absolute path). (directory, store, [run ids])."""
    need("onnxruntime")
    tmp = tmp_path_factory.mktemp("words")
    store = tmp / "s.sqlite"
    ids = []
    for outputs in (("--html", "one.html", "--json", "one.json"), ()):
        proc = edge_bench("run", "--target", LOCAL, "--model", DIGITS, "--iterations", "400", *outputs, store=store,
                          cwd=tmp)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        ids.append(int(re.search(r"stored as run (\d+)", proc.stderr).group(1)))
        assert sorted(written(proc)) == sorted(str(tmp / name) for name in outputs[1::2]), proc.stderr
    assert (tmp / "one.html").stat().st_size > 0 and json.loads((tmp / "one.json").read_text())["run"] == ids[0]
    return tmp, store, ids


# ------------------------------------------------------------------------------------------------ help and reports
def test_run_help_shows_the_campaign_form_and_every_report_flag_on_a_line():
    proc = edge_bench("run", "--help")
    assert proc.returncode == 0, proc.stderr
    usage = proc.stdout.split("\n\n")[0]
    assert "usage: edge-bench run CAMPAIGN.toml [--store F]" in usage, usage
    assert "edge-bench run --target URL --model PATH" in usage, usage
    lines = proc.stdout.splitlines()
    assert any(line.split()[:1] == ["CAMPAIGN.toml"] and "campaign file" in line for line in lines), proc.stdout
    for flag in ("--html", "--md", "--csv", "--junit", "--json"):
        assert flag in usage, (flag, usage)
        described = [line for line in lines if line.split()[:1] == [flag]]
        assert len(described) == 1 and len(described[0].split()) > 3, (flag, described)  # flag, FILE, what it is
    proc = edge_bench("run")  # neither form: both are named
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "CAMPAIGN.toml" in lines[0] and "--target URL" in lines[0]


def test_a_campaigns_reports_each_say_where_they_were_written(runs):
    tmp, _, _ = runs
    camp = tmp / "words.toml"
    camp.write_text(f'[campaign]\nname = "words"\n[[target]]\nname = "here"\nurl = "{LOCAL}"\n[[model]]\n'
                    f'name = "digits"\npath = "{DIGITS}"\n[[scenario]]\nkind = "single-stream"\n'
                    'iterations = 300\n')  # fmt: skip
    proc = edge_bench("run", camp, "--md", "c.md", "--csv", "c.csv", "--junit", "c.xml", store=tmp / "c.sqlite",
                      cwd=tmp)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    said = written(proc)
    assert sorted(said) == sorted(str(tmp / n) for n in ("c.md", "c.csv", "c.xml")), proc.stderr
    assert all(os.path.isabs(p) and os.path.getsize(p) > 0 for p in said)
    proc = edge_bench("report", "--last", "1", "--md", "r.md", "--json", "-", store=tmp / "c.sqlite", cwd=tmp)
    assert proc.returncode == 0 and written(proc) == [str(tmp / "r.md")], proc.stderr  # stdout is not named
    assert json.loads(proc.stdout)["runs"][0]["target"] == "here"


# ------------------------------------------------------------------------------------------------ names
@pytest.mark.parametrize(
    "url, name",
    [
        ("local:", "local"),
        ("local:?device=cuda&gpu=1", "local"),
        ("kserve+http://127.0.0.1:8000/resnet8?metrics=18102", "kserve:127.0.0.1:8000"),
        ("kserve+grpc://gpu-host:8001/dscnn_kws", "kserve:gpu-host:8001"),
        ("tcp://10.0.0.2:7000", "tcp:10.0.0.2:7000"),
        ("serial:///dev/ttyUSB0?baud=921600", "serial:/dev/ttyUSB0"),
        ("/dev/ttyACM0", "/dev/ttyACM0"),
        ("loop://", "loop"),
    ],
)
def test_a_one_off_target_has_a_short_name_without_options(url, name):
    assert registry.check(url).short_name(url) == name


def test_a_one_off_run_is_stored_under_the_short_name_with_its_whole_url_and_model(runs):
    _, store, ids = runs
    with Store(store) as st:
        run = st.run(ids[0])
    assert (run.target, run.target_url, run.model_name) == ("local", LOCAL, DIGITS.name)


def test_a_server_runs_model_column_is_the_model_not_the_urls_query(tmp_path):
    pytest.importorskip("tritonclient")
    import serverkit

    with serverkit.fast(processes=1) as srv:
        url = f"kserve+http://{srv.http}/fast?timeout=5"
        proc = edge_bench("run", "--target", url, "--iterations", "50", store=tmp_path / "s.sqlite")
        assert proc.returncode == 0, proc.stderr
    proc = edge_bench("report", "--json", "-", store=tmp_path / "s.sqlite")
    (row,) = json.loads(proc.stdout)["runs"]
    assert (row["target"], row["model"]) == (f"kserve:{srv.http}", "fast"), row
    with Store(tmp_path / "s.sqlite") as st:
        assert st.run(row["run"]).target_url == url


# ------------------------------------------------------------------------------------------------ baselines
def test_baseline_set_refuses_to_move_a_name_unless_told_to_replace_it(runs):
    _, store, (first, second) = runs
    proc = edge_bench("baseline", "set", "words-main", first, store=store)
    assert proc.returncode == 0 and f"baseline words-main = run {first} (local, " in proc.stdout, proc.stderr
    proc = edge_bench("baseline", "set", "words-main", second, store=store)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and f"baseline words-main is run {first}" in lines[0], proc.stderr
    assert "--replace" in lines[0]
    assert f"run {first}," in edge_bench("baseline", "show", "words-main", store=store).stdout  # unchanged
    proc = edge_bench("baseline", "set", "words-main", second, "--replace", "--json", "-", store=store)
    assert proc.returncode == 0 and json.loads(proc.stdout)["replaced"] == first, proc.stderr
    proc = edge_bench("baseline", "set", "words-main", first, "--replace", store=store)
    assert proc.stdout.startswith(f"baseline words-main: run {first} replaces run {second} "), proc.stdout
    proc = edge_bench("baseline", "set", "words-main", first, store=store)  # the run it holds: nothing moves
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------------------------------------ compare's figures
def test_compare_prints_a_single_runs_figures_as_the_run_table_does(runs):
    _, store, (first, second) = runs
    table = {r["run"]: r for r in json.loads(edge_bench("report", first, second, "--json", "-", store=store).stdout)
             ["runs"]}  # fmt: skip
    proc = edge_bench("compare", first, second, "--json", "-", store=store)
    doc = json.loads(proc.stdout)
    assert doc["values"] == {"a": "as recorded", "b": "as recorded"}
    for side, run in (("a", first), ("b", second)):
        for key in ("p50", "p99", "p999"):
            assert doc["metrics"][key][side] == pytest.approx(table[run][f"{key}_us"], abs=5e-4), (side, key)
    text = edge_bench("compare", first, second, store=store).stdout
    p50 = next(line for line in text.splitlines() if line.startswith("p50 "))
    assert p50.split()[2:4] == [f"{table[first]['p50_us']:,.1f}", f"{table[second]['p50_us']:,.1f}"], text
    assert "values:" not in text
    more = []
    for _ in range(2):  # two more runs: a side pools only runs of its own (a run on both sides is refused)
        proc = edge_bench("run", "--target", LOCAL, "--model", DIGITS, "--iterations", "400", store=store)
        more.append(re.search(r"stored as run (\d+)", proc.stderr).group(1))
    pooled = edge_bench("compare", "--a", first, second, "--b", *more, store=store).stdout
    assert "values:  A and B from the runs' pooled 1-us histograms" in pooled, pooled


# ------------------------------------------------------------------------------------------------ targets and run
def test_a_refused_token_is_said_as_refused_by_targets_and_run_not_unreachable(tmp_path):
    good, bad = tmp_path / "token", tmp_path / "wrong"
    for path, text in ((good, "correct horse battery staple\n"), (bad, "wrong horse battery staple\n")):
        path.write_text(text)
        path.chmod(0o600)
    with AgentProcess("tcp://127.0.0.1:0", tmp_path / "state", "--token-file", str(good)) as agent:
        proc = edge_bench("targets", agent.url, "--token-file", bad, "--reconnect-for", "0")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stdout.startswith(f"{agent.url}  TOKEN REFUSED  wrong or missing token") and \
            "UNREACHABLE" not in proc.stdout and "not the one the agent was started with" in proc.stdout, proc.stdout
        proc = edge_bench("targets", agent.url, "--json", "-")
        (row,) = json.loads(proc.stdout)["targets"]
        assert proc.returncode == 2 and row["kind"] == "auth" and "none was given" in row["error"], row
        proc = edge_bench("run", "--target", agent.url, "--model", DIGITS, "--token-file", bad, "--iterations", "5",
                          store=tmp_path / "s.sqlite")  # fmt: skip
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0].startswith(f"edge-bench: error: agent at {agent.url} refused the token: "), lines
        assert proc.returncode == 2 and edge_bench("targets", agent.url, "--token-file", good).returncode == 0


def test_a_runs_link_round_trip_is_measured_as_targets_measures_it(tmp_path):
    # Issue 25 (item 9): over a loopback agent the run said "rtt 39.6 ms" where `targets` said 0.5 ms. The run's
    # board time is said apart ("board busy"), never counted in the link's round trip.
    need("onnxruntime")
    with AgentProcess("tcp://127.0.0.1:0", tmp_path / "state") as agent:
        proc = edge_bench("targets", agent.url, "--json", "-")
        assert proc.returncode == 0, proc.stderr
        alone = json.loads(proc.stdout)["targets"][0]["link"]["rtt_ms"]
        proc = edge_bench("run", "--target", agent.url, "--model", DIGITS, "--iterations", "300", "--cpus", "1",
                          "--json", tmp_path / "r.json", store=tmp_path / "s.sqlite")  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    link = json.loads((tmp_path / "r.json").read_text())["link"]
    assert 0 < link["rtt_ms"] <= 3 * alone + 2.0, (alone, link)  # the same link, the same way: one order
    assert link["board_busy_ms"] > link["rtt_ms"], link
    said = next(line for line in proc.stdout.splitlines() if line.startswith("link "))
    assert f"rtt {link['rtt_ms']:.1f} ms, board busy {link['board_busy_ms']:.1f} ms per request" in said, said


def no_gpu_here() -> bool:
    from bench.metrics import nvml
    from edge_runtime.errors import UserError

    try:
        nvml.check()
    except UserError:
        return True
    return False


@pytest.mark.parametrize("url", ["local:?device=cuda", "local:?backend=nope", "local:?cpus=0-4095"])
def test_targets_refuses_what_run_refuses_here_in_the_same_words(url, tmp_path):
    if "cuda" in url and not no_gpu_here():
        pytest.skip("an NVIDIA GPU is here: tests/gpu (make gpu-check) covers it")
    ran = edge_bench("run", "--target", url, "--model", DIGITS, "--iterations", "5", store=tmp_path / "s.sqlite")
    (line,) = ran.stderr.strip().splitlines()
    said = edge_bench("targets", url, "local:")
    assert ran.returncode == said.returncode == 2, said.stdout + said.stderr
    why = bare(url, line.removeprefix("edge-bench: error: "))
    assert said.stdout.startswith(f"{url}  UNUSABLE HERE  {why}\n"), (line, said.stdout)
    assert "local:  this machine" in said.stdout  # the other target is still described
    assert not (tmp_path / "s.sqlite").exists()  # refused before anything ran or was kept
