"""Targets as plugins (issue 23): the registry by URL scheme, what each kind declares instead of being tested by its
scheme, and a kind added from outside the package: tests/plugins/echo_target.py, registered through its entry point
(a dist-info on the path, as an installed package has) and used by `edge-bench` in a child process as a built-in
kind is: targets, run, the store, report, compare, Ctrl-C. No server, no board: the echo answers itself."""

from __future__ import annotations

import json
import os
import pkgutil
import re
import signal
import subprocess
import sys

import pytest
from agentkit import free_port
from conftest import MODELS, ROOT
from helpers import assert_one_line_error, read_until, reaped

from bench.store import Store
from bench.targets import TargetError, registry
from bench.transports import parse_endpoint
from edge_runtime.errors import EdgeRuntimeError, UserError
from edge_runtime.results import load

PLUGINS = ROOT / "tests" / "plugins"
DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"


def edge_bench(*args: str, plugins=(PLUGINS,), timeout: float = 120) -> subprocess.CompletedProcess:
    """`edge-bench ARGS` in a child whose path holds `plugins` (their dist-info directories are what
    importlib.metadata finds, as it finds an installed package's)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *map(str, plugins)])}
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env=env)  # fmt: skip


def assert_one_line(proc, *needles: str, code: int = 2) -> None:
    assert_one_line_error(proc, *needles, code=code, program="edge-bench")


def plugin(where, name: str, entry_points: str, source: str | None = None):
    """A package of one module in `where`, with its dist-info: what `pip install` would have left there."""
    info = where / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[edge_bench.targets]\n{entry_points}\n")
    if source is not None:
        (where / f"{name}.py").write_text(source)
    return where


def test_a_kind_from_a_plugin_is_listed_and_described_and_without_it_is_unknown():
    proc = edge_bench("targets", "--schemes")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^echo:\s+server\s+echo_target:EchoTarget\s+echo://NAME", proc.stdout, re.M), proc.stdout
    assert re.search(r"^kserve\+grpc:\s+server\s+bench\.targets\.kserve:KServeTarget$", proc.stdout, re.M)
    bare = edge_bench("targets", "--schemes", plugins=())
    assert bare.returncode == 0 and "local:" in bare.stdout and "echo" not in bare.stdout, bare.stdout
    proc = edge_bench("targets", "echo://t?latency_us=50", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["targets"]
    assert row["reachable"] and row["kind"] == "echo" and row["latency_us"] == 50
    proc = edge_bench("targets", "echo://t")
    assert proc.returncode == 0 and proc.stdout == "echo://t  reachable  (echo t)\n", proc.stdout
    assert_one_line(edge_bench("targets", "echo://t", plugins=()), "unknown scheme echo://", "local:", "kserve+http://")
    # the plugin's own check
    assert_one_line(edge_bench("targets", "echo://t?latency_us=fast"), "echo://NAME?latency_us=N")
    assert_one_line(edge_bench("targets"), "--schemes")
    assert_one_line(edge_bench("targets", "--schemes", "local:"), "--schemes")


def test_a_plugin_kind_runs_into_the_store_and_reads_back_as_a_built_in_one(tmp_path):
    store = ["--store", str(tmp_path / "s.sqlite")]
    runs = []
    for _ in range(2):
        proc = edge_bench("run", "--target", "echo://t?latency_us=200", "--iterations", "300", *store, "--json", "-")
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        rec = load(doc)  # the record of the board's schema, read by the board's reader
        assert rec.latency_us.count == 300 and rec.backend.name == "echo" and rec.latency_us.min >= 200  # a sleep
        runs.append(str(doc["run"]))
    # The host's open loop, with no server at all: every 7th call fails, and each failure is counted and charged.
    proc = edge_bench("run", "--target", "echo://t?latency_us=100&fail_every=7", "--scenario", "server", "--rate",
                      "500", "--duration", "1", *store, "--json", "-")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    calls = doc["latency_us"]["count"] + doc["errors"]["failed"]
    assert doc["scenario"]["kind"] == "server" and doc["scenario"]["latency_from"].startswith("intended send time")
    assert doc["errors"]["kinds"] == {"status 503": calls // 7} and doc["failed_queries"] == calls // 7, doc["errors"]
    report = edge_bench("report", *runs, str(doc["run"]), *store)
    # A one-off is named short, by scheme and place (issue 25: the whole URL was its name); the URL is kept whole.
    rows = [line for line in report.stdout.splitlines() if re.match(r"\s*\d+\s+echo:t ", line)]
    assert report.returncode == 0 and len(rows) == 3, report.stdout
    assert "latency_us=" not in report.stdout
    with Store(tmp_path / "s.sqlite") as st:
        assert st.run(runs[0]).target_url == "echo://t?latency_us=200"
    compared = edge_bench("compare", *runs, *store)
    assert compared.returncode in (0, 1) and "p99 us" in compared.stdout, compared.stderr  # 1: a change was found


def test_ctrl_c_keeps_what_a_plugin_kind_measured(tmp_path):
    """A kind that does not recover (info.recovers False) keeps its partial result itself; the CLI needs no case
    for it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(PLUGINS)])}
    cmd = [sys.executable, "-m", "bench.cli", "run", "--target", "echo://t?latency_us=500", "--duration", "60",
           "--json", "-", "--store", str(tmp_path / "s.sqlite")]  # fmt: skip
    with reaped(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)) as proc:  # fmt: skip
        read_until(proc, "measuring:")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    doc = json.loads(out)
    assert doc["aborted"]["signal"] == "SIGINT" and doc["latency_us"]["count"] > 0 and doc["wall_s"] < 60
    assert "asking the board" not in err  # nothing to ask: the echo stopped itself


def test_a_plugin_that_takes_a_taken_scheme_is_one_line_naming_both(tmp_path):
    dup = plugin(tmp_path, "dup_target", "local = echo_target:EchoTarget")
    assert_one_line(edge_bench("targets", "--schemes", plugins=(PLUGINS, dup)), "target scheme 'local'", "dup-target",
             "echo_target:EchoTarget", "bench.targets.local:LocalTarget")  # fmt: skip
    assert_one_line(edge_bench("targets", "ftp://x", plugins=(PLUGINS, dup)), "target scheme 'local'")
    broken = plugin(tmp_path / "broken", "gone_target", "gone = gone:X")  # installed without its module
    assert_one_line(edge_bench("targets", "gone://x", plugins=(broken,)), "target scheme 'gone'", "cannot be loaded")


def test_what_a_plugin_kind_declares_is_what_the_cli_and_the_campaign_hold_it_to(tmp_path):
    """A server kind that runs single-stream only and takes no option: refused in one line for what it does not
    declare, by `run` and by a campaign file, and run for what it does."""
    source = ('"""once://NAME: the echo, single-stream only."""\nfrom bench.targets.base import TargetInfo\n'
              "from echo_target import EchoTarget\n\n\nclass OnceTarget(EchoTarget):\n"
              '    schemes = ("once",)\n'
              '    info = TargetInfo(kind="server", summary="once://NAME", scenarios=frozenset({"single-stream"}))\n')
    once = plugin(tmp_path, "once_target", "once = once_target:OnceTarget", source)
    store = ["--store", str(tmp_path / "s.sqlite")]

    def run(*args: str):
        return edge_bench("run", *args, *store, plugins=(PLUGINS, once))

    assert_one_line(run("--target", "once://t", "--scenario", "server", "--rate", "10"), "--scenario server",
             "single-stream")  # fmt: skip
    assert_one_line(run("--target", "once://t", "--concurrency", "2"), "--concurrency goes with a server target",
             "echo://NAME", "once://t takes no concurrency")  # fmt: skip
    assert_one_line(run("--target", "once://t", "--header", "a: b"), "--header goes with a server target")
    assert_one_line(run("--target", "once://t", "--cpus", "1"), "--cpus is a board's option")
    proc = run("--target", "once://t?latency_us=10", "--iterations", "50", "--json", "-")
    assert proc.returncode == 0 and json.loads(proc.stdout)["latency_us"]["count"] == 50, proc.stderr
    camp = tmp_path / "c.toml"
    head = f'[[target]]\nname = "once"\nurl = "once://t"\n[[model]]\npath = "{DIGITS}"\n[[scenario]]\n'
    camp.write_text(head + 'kind = "server"\nrate_qps = 10\n')
    assert_one_line(run(str(camp)), "[[target]] 'once'", "kind = 'server' is not a scenario it runs")
    camp.write_text(head.replace('url = "once://t"', 'url = "once://t"\ncpus = "1"') + "iterations = 20\n")
    assert_one_line(run(str(camp)), "cpus is a board's option", "once://NAME")
    camp.write_text(head.replace('url = "once://t"', 'url = "once://t"\nheaders = { a = "b" }') + "iterations = 20\n")
    assert_one_line(run(str(camp)), "headers go with server targets that take them", "kserve+http://")
    camp.write_text(head + "iterations = 20\n")
    proc = run(str(camp))
    assert proc.returncode == 0 and "once" in proc.stdout, proc.stderr


def test_an_unknown_scheme_names_every_kind_registered():
    for url, shown in (("ftp://x", "unknown scheme ftp://"), ("board7", "unknown scheme (none)"),
                       ("http://[::1", "unknown scheme http://")):  # fmt: skip
        with pytest.raises(UserError) as err:
            registry.target_class(url)
        line = err.value.one_line()
        assert shown in line and repr(url) in line, line
        kinds = registry.classes()
        assert len(kinds) >= 3 and all(cls.info.summary in line for cls in kinds), line


def test_a_scheme_registered_twice_is_refused(monkeypatch):
    with pytest.raises(ValueError, match=r"'local' is already registered \(bench\.targets\.local:LocalTarget\)"):
        registry.register("local", "echo_target:EchoTarget")
    monkeypatch.setitem(registry._REGISTRY, "tcp2", "bench.targets.local:LocalTarget")  # a class, not its scheme
    with pytest.raises(UserError, match=r"LocalTarget is not a bench\.targets\.base\.Target that declares it"):
        registry.target_class("tcp2://x")


def test_every_built_in_kind_declares_the_schemes_it_is_registered_under():
    for scheme in registry.schemes():
        cls = registry.target_class(scheme + ":" if scheme else "/dev/ttyUSB0")
        assert scheme in cls.schemes and cls.info.kind in ("board", "server"), (scheme, cls)
    assert {c.__name__: c.info.kind for c in registry.classes()} == {"LocalTarget": "board", "AgentTarget": "board",
                                                                     "KServeTarget": "server",
                                                                     "EembcTarget": "board",
                                                                     "LabgridTarget": "board"}  # fmt: skip


def test_the_agent_takes_every_url_its_endpoint_reads():
    """The registry's board schemes and what the agent's endpoint parser accepts are one list: every pyserial URL
    handler it takes, tcp:, serial: and a device path, and nothing else."""
    import serial.urlhandler

    handlers = {m.name.removeprefix("protocol_") for m in pkgutil.iter_modules(serial.urlhandler.__path__)
                if m.name.startswith("protocol_")}  # fmt: skip
    candidates = handlers | {"tcp", "serial", "ftp", "http", "local", "kserve+http"}

    def reads(scheme: str) -> bool:
        url = {"tcp": "tcp://127.0.0.1:7000", "serial": "serial:///dev/ttyS0"}.get(scheme, f"{scheme}://x")
        try:
            parse_endpoint(url, "target", listen=False)
        except UserError as err:
            assert "unknown scheme" in err.message, err.message
            return False
        return True

    assert {s for s in candidates if reads(s)} | {""} == set(registry.BOARD_SCHEMES)
    assert registry.target_class("/dev/ttyUSB0").__name__ == "AgentTarget"


def test_a_target_error_exits_by_its_kind_through_main(tmp_path):
    assert isinstance(TargetError("x"), EdgeRuntimeError)
    assert [TargetError("x", k).exit_code for k in ("user-error", "auth", "unreachable", "timeout")] == [2, 2, 1, 1]
    pytest.importorskip("tritonclient")
    dead = f"kserve+http://127.0.0.1:{free_port()}/m"  # nobody listens: the user named the wrong server
    assert_one_line(edge_bench("run", "--target", dead, "--iterations", "5", "--store", str(tmp_path / "s.sqlite")),
             f"{dead}: no KServe v2 server at 127.0.0.1:")  # fmt: skip
