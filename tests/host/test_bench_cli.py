"""`edge-bench targets` and `edge-bench run --target`, and `edge-runtime agent`'s own errors, as a user meets them:
child processes, a real agent on 127.0.0.1, one-line errors with the right exit code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from agentkit import AgentProcess, free_port, lost_nothing
from conftest import MODELS, ROOT, need
from helpers import read_until, run_cli

from bench.targets.agent import AgentTarget

pytest.importorskip("serial")
DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.tflite"


STORE_ENV: dict[str, str] = {}  # every edge-bench call here keeps its runs in the test's store, not in the checkout


@pytest.fixture(autouse=True)
def _store(tmp_path_factory):
    STORE_ENV["EDGE_BENCH_STORE"] = str(tmp_path_factory.getbasetemp() / "edge-bench.sqlite")


def edge_bench(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env={**os.environ, **STORE_ENV},
    )


def one_line(proc, code: int, *needles: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("edge-bench: error: "), proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    with AgentProcess("tcp://127.0.0.1:0", tmp_path_factory.mktemp("agent") / "state") as a:
        yield a


def test_targets_says_what_each_board_is_and_fails_on_an_unreachable_one(agent):
    dead = f"tcp://127.0.0.1:{free_port()}"
    proc = edge_bench("targets", agent.url, dead)
    assert proc.returncode == 1, proc.stderr
    assert f"{agent.url}  reachable" in proc.stdout and "backends  " in proc.stdout
    assert f"{dead}  UNREACHABLE" in proc.stdout and "refused" in proc.stdout
    proc = edge_bench("targets", agent.url, "--json", "-")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["targets"]
    assert row["reachable"] and row["protocol"] == 1 and row["cpus"]["online"]
    assert row["link"]["frames_in"] >= 6 and row["link"]["rtt_ms"] > 0  # hello and five pings
    # local: is a target too: this machine, described as a board is (it was "unknown scheme local://")
    proc = edge_bench("targets", "local:", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["targets"]
    assert row["kind"] == "local" and row["cpus"]["online"] and row["python"]
    proc = edge_bench("targets", "ftp://x")
    assert proc.returncode == 2 and "local:" in proc.stderr and "kserve+http://" in proc.stderr, proc.stderr


def test_a_one_off_run_prints_the_boards_result_as_edge_runtime_bench_does(agent):
    need("tflite")
    proc = edge_bench("run", "--target", agent.url, "--model", str(DIGITS), "--cpus", "1", "--iterations", "200")
    assert proc.returncode == 0, proc.stderr
    for head in ("model ", "backend ", "latency us", "pinning      all", "link         tcp://"):
        assert head in proc.stdout, proc.stdout
    local = run_cli("bench", str(DIGITS), "--cpus", "1", "--iterations", "200")

    def heads(text: str) -> list[str]:  # warnings come and go with the machine's noise
        return [ln.split()[0] for ln in text.splitlines() if not ln.startswith((" ", "warning"))]

    assert heads(proc.stdout) == [*heads(local.stdout), "link"]  # the same report, and the link under it
    proc = edge_bench("run", "--target", agent.url, "--model", str(DIGITS), "--iterations", "50", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "edge-runtime/bench/1" and doc["latency_us"]["count"] == 50
    assert lost_nothing(doc["link"]) and doc["link"]["bytes_out"] > 0, doc["link"]


def test_user_mistakes_are_one_line(agent, tmp_path):
    one_line(edge_bench("targets", "http://127.0.0.1:80/x"), 2, "unknown scheme http://")
    one_line(edge_bench("targets", "tcp://127.0.0.1:0"), 2, "tcp://HOST:PORT")
    one_line(edge_bench("targets", "serial:///dev/ttyS0?baud=fast"), 2, "baud")
    one_line(edge_bench("run", "--target", agent.url), 2, "--model")
    one_line(edge_bench("run", "--target", agent.url, "--model", str(DIGITS), "--histogram"), 2, "--histogram")
    one_line(edge_bench("run", "--target", agent.url, "--model", str(DIGITS), "--iterations", "nan"), 2, "iterations")
    one_line(edge_bench("run", "--target", agent.url, "--model", str(tmp_path / "none.tflite")), 2, "none.tflite")
    one_line(edge_bench("run", "--target", agent.url, "--model", str(DIGITS), "--cpus", "board"), 2, "--cpus board")
    one_line(edge_bench("run", "--target", agent.url, "--model", str(DIGITS), "--json", str(DIGITS)), 2, "--json")
    one_line(edge_bench("run", "--target", agent.url, "--model", str(DIGITS), "--bogus"), 2, "--bogus")
    fifo = tmp_path / "fifo.tflite"
    os.mkfifo(fifo)
    one_line(edge_bench("run", "--target", agent.url, "--model", str(fifo)), 2, "fifo")
    dead = f"tcp://127.0.0.1:{free_port()}"
    one_line(edge_bench("run", "--target", dead, "--model", str(DIGITS), "--reconnect-for", "0"), 1, "refused")
    one_line(edge_bench("run", "--target", dead, "--model", str(DIGITS), "--reconnect-for", "1e12"), 2, "reconnect")
    # None of those mistakes cost the board anything: it ran no bench and holds no answer for anyone.
    with AgentTarget(agent.url) as t:
        assert t.pending() == [] and t.call("results")["active"] == []


def test_a_one_off_model_that_is_not_a_file_says_what_it_is(agent, tmp_path):
    """A directory or a fifo given as --model is said as what it is, as `edge-runtime run` says it, for a board as for
    this machine (a board's target called both "missing"); the board is asked for nothing."""
    folder = tmp_path / "model.tflite"
    folder.mkdir()
    fifo = tmp_path / "pipe.tflite"
    os.mkfifo(fifo)
    board = run_cli("run", str(folder))  # the board side's own words for the same mistake
    assert "is a directory, not a file" in board.stderr and board.returncode == 2
    for url in (agent.url, "local:"):
        for path, what in ((folder, "is a directory, not a file"), (fifo, "is a fifo, not a regular file")):
            line = one_line(edge_bench("run", "--target", url, "--model", str(path), "--iterations", "20"), 2, what)
            assert str(path) in line and "--model" in line and "missing" not in line, line
    with AgentTarget(agent.url) as t:
        assert t.pending() == [] and t.call("results")["active"] == []


def test_the_agents_own_mistakes_are_one_line(tmp_path):
    for args, needle in (
        (["ftp://x"], "unknown scheme"),
        (["tcp://127.0.0.1"], "tcp://HOST:PORT"),
        (["serial:///dev/does-not-exist?baud=115200"], "does-not-exist"),
        (["tcp://127.0.0.1:0", "--max-frame", "10"], "--max-frame"),
        (["tcp://127.0.0.1:0", "--state-dir", "/dev/null/x"], "state-dir"),
    ):
        proc = run_cli("agent", *args, "--state-dir" if "--state-dir" not in args else "--quiet",
                       str(tmp_path / "s") if "--state-dir" not in args else "--quiet")  # fmt: skip
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stderr


def test_ctrl_c_stops_the_boards_run_and_keeps_what_it_measured(agent):
    need("tflite")
    import signal
    import time

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.cli",
            "run",
            "--target",
            agent.url,
            "--model",
            str(DIGITS),
            "--duration",
            "30",
            "--json",
            "-",
        ],
        env={**os.environ, **STORE_ENV},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # progress: upload, starting, then the board's own "measuring ..." lines, until one counts what it measured
    lines = read_until(proc, re.compile(r"measuring: .*[1-9][\d,]* inferences"), timeout=60)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, [*lines, err]
    assert time.monotonic() - t0 < 20  # the board stopped at its next chunk, not at the end of 30 s
    doc = json.loads(out)
    assert doc["aborted"]["kind"] == "interrupted" and doc["latency_us"]["count"] > 0
    assert doc["wall_s"] < 25
    assert "asking the board to stop" in err
    from bench.targets.agent import AgentTarget

    with AgentTarget(agent.url) as t:
        assert t.pending() == []  # the partial result was acknowledged, not left behind


def test_the_local_target_runs_the_same_engine_here(tmp_path):
    need("tflite")
    proc = edge_bench("run", "--target", "local:?cpus=1&threads=1", "--model", str(DIGITS), "--iterations", "300",
                      "--json", "-")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["config"]["cpus"] == [1] and doc["config"]["threads"] == 1 and doc["pinning"]["all_threads_pinned"]
    assert "link" not in doc and doc["latency_us"]["count"] == 300
    for url, needle in (("local:?cpus=x", "cpus"), ("local:?turbo=1", "unknown option 'turbo'"),
                        ("local://host", "expected local:")):  # fmt: skip
        one_line(edge_bench("run", "--target", url, "--model", str(DIGITS)), 2, needle)


def _fill(disk) -> None:
    """Every block of the small file system taken (bounded: a 64 KB tmpfs holds 16 pages)."""
    fd = os.open(disk / "fill", os.O_WRONLY | os.O_CREAT)
    try:
        for _ in range(1000):
            try:
                os.write(fd, b"\0" * 4096)
            except OSError:
                return
    finally:
        os.close(fd)
    raise AssertionError(f"{disk} did not fill up")


def test_a_full_disk_under_standard_output_is_one_line_as_edge_runtime_says_it(tmp_path):
    """Issue 23, step 20: edge-bench ends through edge-runtime's run_program, so standard output on a full disk is the
    same one line and exit code from both programs (edge-bench's own main called it an internal error,
    exit 3)."""
    from agentkit import tmpfs

    said = {}
    with tmpfs(tmp_path / "full") as disk:
        _fill(disk)
        for prog, argv in (("edge-bench", ["bench.cli", "targets", "--schemes"]), ("edge-runtime", ["edge_runtime.cli",
                           "info"])):  # fmt: skip
            with open(disk / f"{prog}.out", "w") as out:
                proc = subprocess.run([sys.executable, "-m", *argv], stdout=out, stderr=subprocess.PIPE, text=True,
                                      cwd=ROOT, timeout=120, env={**os.environ, **STORE_ENV})  # fmt: skip
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), proc.stderr
            said[prog] = (proc.returncode, lines[0].removeprefix(f"{prog}: "))
    assert said["edge-bench"] == said["edge-runtime"] == (2, "error: cannot write the output: No space left on device")


def test_a_command_imports_only_itself():
    """Issue 23, step 20: edge-bench's table names modules, so `report` loads no target, no other command and no
    server client (edge-bench imported all five commands before it parsed a word)."""
    code = ("import sys\nfrom bench.cli import main\ntry:\n    main(['report', '--help'])\n"
            "except SystemExit:\n    pass\n"
            "watch = ('bench.cli.run', 'bench.cli.targets', 'bench.cli.compare', 'bench.targets', 'tritonclient')\n"
            "print('loaded:', ','.join(m for m in watch if m in sys.modules), 'bench.cli.report' in sys.modules,"
            " file=sys.stderr)\n")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert "usage: edge-bench report" in proc.stdout, proc.stderr
    assert proc.stderr.strip() == "loaded:  True", proc.stderr
