"""The load engine over client processes (bench/scenarios/procs.py), the fast HTTP sender (bench/targets/kserve_fast.py)
and the client's own cost (bench/scenarios/client.py), against real servers on 127.0.0.1: tests/servers/fast_server.py
(answers at once, or late) and raw sockets that misbehave. Behaviour, not speed: every query exactly once, intended
times kept, a dead child counted, signals obeyed, no child left behind, client-bound said when it is true."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest
import serverkit as servers
from conftest import ROOT
from helpers import read_until, reaped

from bench.store import Store

pytest.importorskip("tritonclient")


def edge_bench(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)  # fmt: skip


def started(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bench.cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def client_children(proc: subprocess.Popen, count: int, timeout: float = 30.0) -> list[psutil.Process]:
    """The client processes `proc` started (its Python children running procs_child), once there are `count`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = [k for k in psutil.Process(proc.pid).children() if "procs_child" in " ".join(k.cmdline())]
        if len(kids) >= count:
            return kids
        time.sleep(0.05)
    pytest.fail(f"{count} client processes of {proc.pid} not seen within {timeout:g} s")


def gone(pids: list[int], timeout: float = 15.0) -> list[int]:
    """The pids still alive (not zombies) after up to `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


@pytest.fixture(scope="module")
def fast():
    with servers.fast(processes=2) as srv:
        yield srv


@pytest.fixture(scope="module")
def slow():
    with servers.fast(processes=1, delay_ms=20) as srv:
        yield srv


def test_a_closed_loop_over_three_processes_sends_every_query_exactly_once(fast, tmp_path):
    url = f"kserve+http://{fast.http}/fast?processes=3"
    proc = edge_bench("run", "--target", url, "--concurrency", "6", "--iterations", "3001", "--warmup", "12",
                      "--json", "-", "--store", str(tmp_path / "s.sqlite"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["latency_us"]["count"] == 3001 and doc["errors"]["failed"] == 0
    assert doc["server"]["statistics"]["requests"] == 3001  # the server saw each timed query once, no more
    client = doc["server"]["client"]
    assert client["processes"] == 3 and client["workers"] == 6 and client["engine"] == "fast"
    assert client["cpu_s"] > 0 and client["cpu_us_per_query"] > 0 and "CLOCK_MONOTONIC" in client["clock"]
    assert doc["scenario"]["concurrency"] == 6


def test_an_open_loop_over_processes_keeps_the_plan_intended_times(fast):
    from bench.scenarios.client import run_load
    from bench.targets.kserve import KServeTarget
    from bench.targets.kserve_fast import choose_engine
    from edge_runtime.measure.request import BenchRequest
    from edge_runtime.measure.schedule import plan_for

    target = KServeTarget(f"kserve+http://{fast.http}/fast?processes=2")
    target.connect()
    feeds = target.feeds(0)
    spec, processes, _ = choose_engine(target, feeds, True, 1, 4)
    assert spec.engine == "fast" and processes == 2
    request = BenchRequest(model="fast", scenario="server", rate_qps=300, duration_s=2.0, concurrency=4, warmup=4)
    run, load = run_load(request, spec, workers=4, processes=2)
    plan = plan_for(request, *request.length)
    np.testing.assert_array_equal(run.intended_ns, plan.intended_ns)  # every scheduled query, its own time
    assert run.from_intended and run.failed == 0 and load["processes"] == 2
    assert np.all(run.started_ns >= run.intended_ns)  # nobody sent early: one clock, one start instant
    lat = run.latency_ns
    assert len(lat) == len(plan.intended_ns) and np.all(lat > 0)


def test_the_merge_orders_each_loop_and_counts_a_dead_child():
    """procs.merge on two children's rows: a closed loop by send time, an open loop by intended time, and a child
    that sent nothing counted as failed queries of its own kind."""
    from types import SimpleNamespace

    from bench.scenarios import procs
    from edge_runtime.measure.request import BenchRequest

    req = BenchRequest(model="m", concurrency=4)

    def child(job, done=None, progress=0):
        proc = SimpleNamespace(pid=1234, poll=lambda: -9, wait=lambda _t=None: -9)
        return procs.Child(job, proc, None, done=done, progress=progress)

    rows = lambda s, f, e: {"intended": np.array(s), "started": np.array(s), "finished": np.array(f), "errors": e,  # noqa: E731
                            "wall_s": 1.0, "stopped": False, "warmup": 2, "examples": {}, "cpu_s": 0.1}  # fmt: skip
    a = child(procs.Job(0, 2, True), rows([10, 30], [25, 40], [None, None]))
    b = child(procs.Job(1, 2, True), rows([5, 20], [50, 21], [None, "timeout"]))
    run = procs.merge([a, b], req)
    assert list(run.started_ns) == [5, 10, 20, 30] and run.errors == [None, None, "timeout", None]
    assert list(run.latency_ns) == [15, 10, 45]  # answered, in the order they finished (25, 40, 50)
    dead = child(procs.Job(2, 3, True), progress=7)
    run = procs.merge([a, dead], req)
    assert run.kinds[procs.CHILD_DIED] == 7 and len(run.errors) == 9 and "SIGKILL" in run.examples[procs.CHILD_DIED]
    lost = child(procs.Job(1, 2, False, schedule_ns=np.array([15, 35])))
    a_open = child(procs.Job(0, 2, False, schedule_ns=np.array([10, 30])), rows([10, 30], [25, 40], [None, None]))
    run = procs.merge([a_open, lost], req)
    assert list(run.intended_ns) == [10, 15, 30, 35] and run.kinds[procs.CHILD_DIED] == 2 and run.from_intended


def test_a_killed_client_process_is_counted_as_failed_queries_not_a_hang(fast, tmp_path):
    url = f"kserve+http://{fast.http}/fast?processes=2"
    args = ["run", "--target", url, "--concurrency", "4", "--duration", "4", "--json", "-", "--store",
            str(tmp_path / "s.sqlite")]  # fmt: skip
    with reaped(started(*args)) as proc:
        kids = client_children(proc, 2)
        read_until(proc, "measuring:")
        kids[0].kill()
        t = time.monotonic()
        out, err = proc.communicate(timeout=90)
    assert time.monotonic() - t < 30, "the run waited for a dead child"
    doc = json.loads(out)
    assert doc["errors"]["kinds"].get("client process died", 0) >= 2, err  # at least its connections' queries
    assert "SIGKILL" in doc["errors"]["examples"]["client process died"]
    assert doc["latency_us"]["count"] > 100  # the other process's queries are kept


def test_sigterm_to_the_run_stops_its_client_processes_and_stores_what_they_measured(fast, tmp_path):
    store = tmp_path / "s.sqlite"
    url = f"kserve+http://{fast.http}/fast?processes=2"
    args = ["run", "--target", url, "--concurrency", "4", "--duration", "120", "--json", "-", "--store", str(store)]
    with reaped(started(*args)) as proc:
        pids = [k.pid for k in client_children(proc, 2)]
        read_until(proc, "measuring:")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=90)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert out.strip(), err  # the run's JSON: what it measured before the signal
    doc = json.loads(out)
    assert doc["aborted"]["signal"] == "SIGTERM" and doc["latency_us"]["count"] > 100
    assert doc["errors"]["failed"] == 0  # the children stopped cleanly: none died, nothing lost
    assert doc["server"]["client"]["processes"] == 2
    assert gone(pids) == []
    with Store(store) as st:
        assert len(st.runs()) == 1


def test_kill_9_of_the_run_leaves_no_client_process_behind(fast, tmp_path):
    url = f"kserve+http://{fast.http}/fast?processes=3"
    args = ["run", "--target", url, "--concurrency", "3", "--duration", "120", "--store", str(tmp_path / "s.sqlite")]
    with reaped(started(*args)) as proc:
        pids = [k.pid for k in client_children(proc, 3)]
        read_until(proc, "measuring:")
        proc.kill()
        proc.wait(10)
    assert gone(pids) == []  # PR_SET_PDEATHSIG: the kernel ended them with their parent


def test_one_tritonclient_process_at_high_concurrency_is_flagged_client_bound(fast, tmp_path):
    url = f"kserve+http://{fast.http}/fast?processes=1&engine=tritonclient"
    proc = edge_bench("run", "--target", url, "--concurrency", "64", "--duration", "3", "--store",
                      str(tmp_path / "s.sqlite"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "CLIENT-BOUND" in proc.stdout and "client-bound: the client, not the server, was the limit" in proc.stdout
    with Store(tmp_path / "s.sqlite") as st:
        (run,) = st.runs()
        client = run.result["server"]["client"]
    assert client["client_bound"] is True and client["engine"] == "tritonclient" and client["processes"] == 1
    assert client["busiest_process_share"] >= 0.8


def test_a_slow_server_is_not_called_client_bound(slow, tmp_path):
    proc = edge_bench("run", "--target", f"kserve+http://{slow.http}/fast", "--concurrency", "4", "--duration", "2",
                      "--json", "-", "--store", str(tmp_path / "s.sqlite"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    client = doc["server"]["client"]
    assert client["client_bound"] is False and client["busiest_process_share"] < 0.5
    assert doc["latency_us"]["p50"] >= 20_000  # the server's own 20 ms, as the client sees it
    assert not any(w.startswith("client-bound") for w in doc["quality"]["warnings"])


BAD_OPTIONS = [
    ("processes=0", "processes '0': a whole number from 1 to 256"),
    ("engine=warp", "engine 'warp': one of auto, fast, tritonclient"),
]


@pytest.mark.parametrize(("option", "words"), BAD_OPTIONS)
def test_a_bad_engine_option_is_one_line_and_exit_2(fast, option, words, tmp_path):
    proc = edge_bench("run", "--target", f"kserve+http://{fast.http}/fast?{option}", "--iterations", "10", "--store",
                      str(tmp_path / "s.sqlite"))  # fmt: skip
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2


def test_the_fast_sender_bounds_the_whole_request_and_calls_the_answer_check(fast):
    from bench.targets.kserve_fast import WRONG_ANSWER, FastSender

    # a server that trickles one byte every 0.2 s: the query ends at its timeout, not at the last byte
    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle() -> None:
        conn, _ = srv.accept()
        conn.recv(65536)
        for b in b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n":
            if stop.wait(0.2):
                break
            conn.send(bytes([b]))
        conn.close()

    threading.Thread(target=trickle, daemon=True).start()
    try:
        sender = FastSender(f"127.0.0.1:{srv.getsockname()[1]}", b"POST /x HTTP/1.1\r\n\r\n", 1.0)
        t = time.monotonic()
        assert sender.send() == "timeout"
        assert time.monotonic() - t < 3.0
    finally:
        stop.set()
        srv.close()

    from bench.targets.kserve import KServeTarget
    from bench.targets.kserve_fast import request_bytes

    target = KServeTarget(f"kserve+http://{fast.http}/fast")
    target.connect()
    req = request_bytes(fast.http, "fast", "", target._inputs(target.feeds(0), True), target._outputs(True), {})
    seen = []
    ok = FastSender(fast.http, req, 5.0, lambda header, n: seen.append((header, n)))
    assert ok.send() is None and ok.send() is None  # one keep-alive connection, two queries
    assert seen[0][0]["outputs"][0]["name"] == "OUTPUT0" and seen[0][1] == 64  # the binary bytes after the header
    bad = FastSender(fast.http, req, 5.0, lambda header, n: f"output {header['outputs'][0]['name']!r} is wrong")
    assert bad.send() == WRONG_ANSWER and bad.examples[WRONG_ANSWER] == "output 'OUTPUT0' is wrong"
    gone_model = req.replace(b"/v2/models/fast/", b"/v2/models/nope/")
    assert FastSender(fast.http, gone_model, 5.0).send() == "status 404"
