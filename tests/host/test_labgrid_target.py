"""The labgrid:// target against real labgrid on loopback (tests/labgridkit.py): a coordinator and an exporter on
127.0.0.1, boards that are pseudo-terminals with `edge-runtime agent` on their far end, reached through the exporter's
ser2net over rfc2217; a power relay over HTTP. `edge-bench` runs in a child process, as a user runs it."""

from __future__ import annotations

import getpass
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from conftest import MODELS, ROOT, need
from helpers import assert_one_line_error, read_until, reaped
from labgridkit import Farm, labgrid_bin

from bench.targets.labgrid import LabgridTarget
from bench.targets.labgrid_client import Place, owner_in, parse_places, parse_resources
from bench.targets.labgrid_url import parse_url
from edge_runtime.errors import UserError

DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"
OTHER = "someone-else"


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    """p1: board1 with its agent and a power relay (tags board=rock-5b); p2: board2, whose agent is not running
    (it starts when the relay switches it on, if a test says so), tags board=dead."""
    f = Farm(tmp_path_factory.mktemp("farm"))
    try:
        f.board("board1", power_index=0)
        f.board("board2", power_index=1, agent=False)
        f.start_exporter()
        f.places(("p1", "board1", {"board": "rock-5b"}), ("p2", "board2", {"board": "dead"}))
        yield f
    finally:
        f.close()


def edge_bench(farm: Farm, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "EDGE_BENCH_LABGRID_CLIENT": str(farm.bin / "labgrid-client")}
    env.pop("LG_COORDINATOR", None)  # the URL names the coordinator
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env=env)  # fmt: skip


def url(farm: Farm, where: str, **options) -> str:
    query = "&".join([f"coordinator={farm.coordinator}", *(f"{k}={v}" for k, v in options.items())])
    return f"labgrid://{where}{'&' if '?' in where else '?'}{query}"


def error_line(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """The run's last stderr line alone (the lines before it are its progress: reconnecting, power-cycling)."""
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", proc.stderr.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------ what labgrid-client prints
PLACES = """Place 'p1':
  tags: board=rock-5b, lab=b2
  matches:
    exp1/board1/NetworkSerialPort
    exp1/board1-power/NetworkPowerPort
  acquired: vm/root
  acquired resources:
    exp1/board1/NetworkSerialPort/RawSerialPort
  created: 2026-12-06 13:42:07.692374
Place 'p2':
  matches:
  acquired: None
  acquired resources:
"""
SHOW = """Place 'p1':
  tags: board=rock-5b
  acquired: vm/root
Acquired resource 'RawSerialPort' (exp1/board1/NetworkSerialPort/RawSerialPort):
  {'acquired': 'p1',
   'avail': True,
   'cls': 'NetworkSerialPort',
   'params': {'extra': {'path': '/dev/pts/0', 'proxy': 'localhost', 'proxy_required': False},
              'host': '127.0.0.1',
              'port': 46457,
              'speed': 115200}}
Acquired resource 'NetworkPowerPort' (exp1/board1-power/NetworkPowerPort/NetworkPowerPort):
  {'acquired': 'p1', 'avail': False, 'cls': 'NetworkPowerPort', 'params': {'index': 0, 'model': 'simplerest'}}
"""


def test_what_labgrid_client_prints_is_read():
    assert parse_places(PLACES) == [
        Place("p1", {"board": "rock-5b", "lab": "b2"}, ("exp1/board1/NetworkSerialPort",
                                                        "exp1/board1-power/NetworkPowerPort"), "vm/root"),
        Place("p2", {}, (), None),
    ]  # fmt: skip
    assert parse_places(PLACES)[0].boards == ["exp1/board1", "exp1/board1-power"]
    serial, power = parse_resources(SHOW)
    assert (serial.path, serial.cls, serial.avail, serial.params["port"]) == (
        "exp1/board1/NetworkSerialPort/RawSerialPort", "NetworkSerialPort", True, 46457)  # fmt: skip
    assert power.cls == "NetworkPowerPort" and not power.avail
    assert owner_in("Place p1 is already acquired by vm/root. To work simultaneously, root can ...") == "vm/root"
    assert owner_in("place pattern nope matches nothing") is None


def test_a_url_that_names_nothing_is_one_line():
    assert parse_url("labgrid://p1?wait=5&coordinator=h:1").wait_s == 5
    assert (parse_url("labgrid://p1").connect_s, parse_url("labgrid://p1?connect=2.5").connect_s) == (10.0, 2.5)
    assert parse_url("labgrid://?board=rock-5b&lab=b2").tags == {"board": "rock-5b", "lab": "b2"}
    assert LabgridTarget.short_name("labgrid://?board=rock-5b&lab=b2&wait=3") == "labgrid:board=rock-5b,lab=b2"
    assert (LabgridTarget.short_name("labgrid://p1?wait=3"), LabgridTarget.short_name("labgrid://")) == (
        "labgrid:p1", "labgrid")  # fmt: skip
    bad = (("labgrid://p1?board=x", "a place or tags, not both"), ("labgrid://p1/x", "expected labgrid://"),
           ("labgrid://p1?wait=soon", "wait='soon'"), ("labgrid://p1?boot=0", "boot='0'"),
           ("labgrid://p1?connect=0", "connect='0'"), ("labgrid://p1?connect=-1", "connect='-1'"),
           ("labgrid://?board=", "a tag is NAME=VALUE"), ("labgrid://p1?coordinator=h", "HOST:PORT"),
           ("labgrid://?b=x&places=0", "places='0'"), ("labgrid://?b=x&places=some", "'all' or a number"),
           ("labgrid://?b=x&places=\u00b2", "places="), ("labgrid://p1?places=all", "places= goes with tags"),
           ("labgrid://?b=x&group=%1b", "group="), ("labgrid://?b=x&coordinator=h:\u00b2", "HOST:PORT"))  # fmt: skip
    assert (parse_url("labgrid://?b=x&places=1").fan, parse_url("labgrid://?b=x").fan) == (True, False)
    assert parse_url("labgrid://?b=x&places=all").places is None and parse_url("labgrid://sp%20ace").place == "sp ace"
    for url_, said in bad:
        with pytest.raises(UserError, match=re.escape(said)):
            parse_url(url_)


def test_no_labgrid_client_or_no_coordinator_is_one_line(tmp_path, monkeypatch):
    env = {**os.environ, "EDGE_BENCH_LABGRID_CLIENT": str(tmp_path / "nothing")}
    proc = subprocess.run([sys.executable, "-m", "bench.cli", "targets", "labgrid://p1"], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=60)  # fmt: skip
    assert_one_line_error(proc, "EDGE_BENCH_LABGRID_CLIENT=", "not an executable labgrid-client", program="edge-bench")
    env["EDGE_BENCH_LABGRID_CLIENT"] = str(labgrid_bin() / "labgrid-client")
    dead = "127.0.0.1:1"
    proc = subprocess.run([sys.executable, "-m", "bench.cli", "run", "--target", f"labgrid://p1?coordinator={dead}",
                           "--model", str(DIGITS), "--store", str(tmp_path / "s.sqlite")], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=60)  # fmt: skip
    assert_one_line_error(proc, "no labgrid coordinator answers at 127.0.0.1:1", code=1, program="edge-bench")


def test_a_bench_through_a_place_end_to_end_and_the_place_is_free_after(farm, tmp_path):
    need("onnxruntime")
    proc = edge_bench(farm, "run", "--target", url(farm, "p1"), "--model", str(DIGITS), "--iterations", "200",
                      "--store", str(tmp_path / "s.sqlite"), "--json", "-")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["latency_us"]["count"] == 200 and doc["link"]["crc_errors"] == 0, doc["link"]
    assert farm.owner("p1") is None
    # by tag, and what `targets` says of the board and how long reaching it took
    proc = edge_bench(farm, "targets", url(farm, "?board=rock-5b"), "--json", "-")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["targets"]
    lg = row["labgrid"]
    assert lg["place"] == "p1" and lg["board"] == "exp1/board1" and lg["serial_url"].startswith("rfc2217://127.0.0.1:")
    assert lg["power"] == "exp1/board1-power/NetworkPowerPort/NetworkPowerPort" and not lg["power_cycled"]
    print(f"\nacquire {lg['acquire_s']:.2f} s, find port {lg['find_port_s']:.2f} s, agent {lg['agent_s']:.2f} s")
    assert farm.owner("p1") is None


def test_nothing_the_farm_runs_listens_off_loopback(farm):
    assert farm.client("-p", "p1", "acquire", user="lister").returncode == 0  # ser2net runs while a place is held
    try:
        out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=30).stdout
        ours = farm.pids()  # the coordinator, the exporter and its ser2net (running while the place is held)
    finally:
        assert farm.client("-p", "p1", "release", user="lister").returncode == 0
    rows = [line for line in out.splitlines() if any(f"pid={p}," in line for p in ours)]
    local = [line.split()[3] for line in rows]
    assert any("ser2net" in line for line in rows) and len(local) >= 2, out
    assert all(re.match(r"(127\.0\.0\.1|\[::ffff:127\.0\.0\.1\]|\[::1\]):\d+$", a) for a in local), local


def test_a_place_held_by_another_user_is_one_line_naming_the_owner_and_is_listed_so(farm, tmp_path):
    assert farm.client("-p", "p1", "acquire", user=OTHER).returncode == 0
    try:
        start = time.monotonic()
        proc = edge_bench(farm, "run", "--target", url(farm, "p1", wait=2), "--model", str(DIGITS),
                          "--iterations", "20", "--store", str(tmp_path / "s.sqlite"))  # fmt: skip
        waited = time.monotonic() - start
        owner = f"{socket.gethostname()}/{OTHER}"
        assert_one_line_error(error_line(proc), "labgrid://p1", f"place 'p1' is held by {owner}", "waited 2 s",
                              code=1, program="edge-bench")  # fmt: skip
        assert proc.stderr.count("\n") == 2 and "waiting up to 2 s" in proc.stderr, proc.stderr  # and said so
        assert waited >= 2, waited
        listed = edge_bench(farm, "targets", url(farm, ""))
        assert listed.returncode == 0, listed.stderr
        assert re.search(rf"^  p1\s+held by {re.escape(owner)}\s+boards exp1/board1, exp1/board1-power; tags "
                         r"board=rock-5b$", listed.stdout, re.M), listed.stdout  # fmt: skip
        assert re.search(r"^  p2\s+free\s+boards exp1/board2, exp1/board2-power; tags board=dead$", listed.stdout,
                         re.M), listed.stdout  # fmt: skip
    finally:
        assert farm.client("-p", "p1", "release", user=OTHER).returncode == 0


def test_the_place_is_released_after_an_error(farm, tmp_path):
    need("onnxruntime")
    proc = edge_bench(farm, "run", "--target", url(farm, "p1"), "--model", str(DIGITS), "--iterations", "20",
                      "--cpus", "99", "--store", str(tmp_path / "s.sqlite"))  # fmt: skip
    assert proc.returncode == 2 and "labgrid://p1" in proc.stderr, proc.stderr
    assert farm.owner("p1") is None


def signalled(farm: Farm, target: str, when: str, signum: int, tmp_path) -> tuple[int, str]:
    """`edge-bench run` on `target`, sent `signum` once it says `when`: (its exit status, its stderr)."""
    env = {**os.environ, "EDGE_BENCH_LABGRID_CLIENT": str(farm.bin / "labgrid-client")}
    cmd = [sys.executable, "-m", "bench.cli", "run", "--target", target, "--model", str(DIGITS), "--duration", "60",
           "--store", str(tmp_path / "s.sqlite")]  # fmt: skip
    with reaped(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)) as run:  # fmt: skip
        said = read_until(run, when)
        run.send_signal(signum)
        _out, err = run.communicate(timeout=60)
    return run.returncode, "".join(said) + err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_place_is_released_after_ctrl_c_and_sigterm_mid_run(farm, tmp_path, signum):
    need("onnxruntime")
    code, err = signalled(farm, url(farm, "p1"), "measuring", signum, tmp_path)
    assert code == 128 + signum, err
    assert farm.owner("p1") is None


def test_ctrl_c_while_waiting_for_a_held_place_leaves_its_owner_alone(farm, tmp_path):
    assert farm.client("-p", "p1", "acquire", user=OTHER).returncode == 0
    try:
        code, err = signalled(farm, url(farm, "p1", wait=600), "waiting up to 600 s", signal.SIGINT, tmp_path)
        assert code == 130 and "could not release" not in err and "Traceback" not in err, err
        assert farm.owner("p1") == f"{socket.gethostname()}/{OTHER}"
    finally:
        assert farm.client("-p", "p1", "release", user=OTHER).returncode == 0


SLOW_ACQUIRE = """#!/bin/sh
# labgrid-client whose acquire takes 3 s: an interrupt lands inside it
for a in "$@"; do [ "$a" = acquire ] && sleep 3; done
exec {client} "$@"
"""


def test_an_interrupt_inside_acquire_never_releases_a_place_this_user_holds_from_another_session(farm, tmp_path):
    """Hostile review, round 3: SIGTERM inside labgrid-client's acquire of a place this host and user already held
    (another CI job on the runner) released it from under that session. Now it is left alone, and said."""
    slow = tmp_path / "labgrid-client"
    slow.write_text(SLOW_ACQUIRE.format(client=farm.bin / "labgrid-client"))
    slow.chmod(0o755)
    assert farm.client("-p", "p1", "acquire").returncode == 0  # session A: this host and user
    try:
        env = {**os.environ, "EDGE_BENCH_LABGRID_CLIENT": str(slow)}
        cmd = [sys.executable, "-m", "bench.cli", "run", "--target", url(farm, "p1", wait=60), "--model",
               str(DIGITS), "--iterations", "20", "--store", str(tmp_path / "s.sqlite")]  # fmt: skip
        with reaped(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)) as run:  # fmt: skip
            read_until(run, "waiting up to 60 s")
            time.sleep(2.5)  # the retry's acquire is under way (1 s of sleep, then 3 s inside the client)
            run.send_signal(signal.SIGTERM)
            _out, err = run.communicate(timeout=60)
        assert run.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
        assert farm.owner("p1") == f"{socket.gethostname()}/{os.environ.get('LG_USERNAME') or getpass.getuser()}"
        assert "not released (if it is this run's: labgrid-client -x" in err, err
        # and a run of its own is told, with a release command that names the coordinator, and no wait advice
        proc = edge_bench(farm, "run", "--target", url(farm, "p1"), "--model", str(DIGITS), "--iterations", "20",
                          "--store", str(tmp_path / "s.sqlite"))  # fmt: skip
        assert_one_line_error(error_line(proc), f"labgrid-client -x {farm.coordinator} -p p1 release)",
                              code=1, program="edge-bench")  # fmt: skip
        assert "wait=S" not in proc.stderr
    finally:
        assert farm.client("-p", "p1", "release").returncode == 0


def test_what_a_coordinator_says_reaches_the_terminal_printable_and_a_run_needs_a_place_or_tags(farm, tmp_path):
    """Whoever talks to the coordinator names places, tags and owners: escapes never reach the terminal. A run on
    `labgrid://` with no place and no tags (the listing's URL) is refused rather than run on whatever is free."""
    evil = "x\x1b[31mRED"
    assert farm.client("-p", evil, "create").returncode == 0
    try:
        assert farm.client("-p", evil, "set-tags", "kk=v\x1b[2J").returncode == 0
        proc = edge_bench(farm, "targets", url(farm, ""), "--json", "-")
        text = edge_bench(farm, "targets", url(farm, ""))
        assert proc.returncode == 0 and text.returncode == 0, text.stderr
        assert "\x1b" not in text.stdout + text.stderr and "x?[31mRED" in text.stdout, text.stdout
        assert any(p["name"] == evil for p in json.loads(proc.stdout)["targets"][0]["places"])  # JSON: as it is
    finally:
        farm.client("-p", evil, "delete")
    proc = edge_bench(farm, "run", "--target", url(farm, ""), "--model", str(DIGITS), "--iterations", "20",
                      "--store", str(tmp_path / "s.sqlite"))  # fmt: skip
    assert_one_line_error(proc, "names no place and no tags", code=2, program="edge-bench")
    proc = edge_bench(farm, "run", "--target", url(farm, "?board=rock-5b", places="all"), "--model", str(DIGITS),
                      "--store", str(tmp_path / "s.sqlite"))  # fmt: skip
    assert_one_line_error(proc, "places= fans a target out over many places in a campaign", code=2,
                          program="edge-bench")  # fmt: skip
    assert farm.owner("p1") is None and farm.owner("p2") is None


def test_a_board_that_does_not_answer_is_power_cycled_once_then_one_line(farm, tmp_path):
    need("onnxruntime")
    before = len(farm.power.seen)
    target = url(farm, "?board=dead", boot=3, power_off=0.2, connect=3)  # connect: 3 s a hello, not 10
    proc = edge_bench(farm, "run", "--target", target, "--model", str(DIGITS), "--iterations", "20",
                      "--store", str(tmp_path / "s.sqlite"))  # fmt: skip
    # the progress line that says the board is being power-cycled, then the error in one line
    said = proc.stderr.strip().splitlines()[:-1]
    assert_one_line_error(error_line(proc), "place 'p2'", "does not answer after a power cycle through "
                          "exp1/board2-power", "waited 3 s", code=1, program="edge-bench")  # fmt: skip
    assert len(said) == 1 and "power-cycling it through exp1/board2-power" in said[0], proc.stderr
    assert farm.power.seen[before:] == [(1, 0), (1, 1)]
    assert farm.owner("p2") is None
    # `targets` asks what is there and switches nothing: it says a run would cycle it.
    proc = edge_bench(farm, "targets", url(farm, "p2", boot=60, power_off=0.2, connect=3))
    assert proc.returncode == 1 and farm.power.seen[before + 2 :] == [], proc.stdout + proc.stderr
    assert "a run would power-cycle it through exp1/board2-power" in proc.stdout + proc.stderr
    # The board comes back when switched on: the run goes on, and its record says the board was cycled.
    farm.power.on_power_on[1] = lambda: threading.Thread(target=farm.start_agent, args=("board2",)).start()
    try:
        back = url(farm, "p2", boot=60, power_off=0.2, connect=3)
        proc = edge_bench(farm, "run", "--target", back, "--model", str(DIGITS), "--iterations", "20",
                          "--store", str(tmp_path / "s.sqlite"), "--json", "-")  # fmt: skip
    finally:
        farm.power.on_power_on.pop(1)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["place"]["power_cycled"] and farm.power.seen[before + 2 :] == [(1, 0), (1, 1)]
    assert farm.owner("p2") is None


def test_an_exporter_that_disappears_mid_run_is_one_line_and_the_place_is_released(tmp_path):
    need("onnxruntime")
    farm = Farm(tmp_path / "farm")  # its own: this one loses its exporter
    try:
        farm.board("board1", power_index=0)
        farm.start_exporter()
        farm.place("p1", "board1", {"board": "rock-5b"})
        env = {**os.environ, "EDGE_BENCH_LABGRID_CLIENT": str(farm.bin / "labgrid-client")}
        cmd = [sys.executable, "-m", "bench.cli", "run", "--target", url(farm, "p1"), "--model", str(DIGITS),
               "--duration", "60", "--reconnect-for", "3", "--store", str(tmp_path / "s.sqlite")]  # fmt: skip
        with reaped(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)) as run:  # fmt: skip
            read_until(run, "measuring")
            farm.stop_exporter()
            out, err = run.communicate(timeout=120)
        proc = subprocess.CompletedProcess(cmd, run.returncode, out, err)
        assert_one_line_error(error_line(proc), "labgrid://p1", "place 'p1': exporter 'exp1' is gone",
                              code=1, program="edge-bench")  # fmt: skip
        assert farm.owner("p1") is None
    finally:
        farm.close()


def test_a_campaign_holds_the_place_for_its_runs_and_releases_it_at_the_end(farm, tmp_path):
    need("onnxruntime")
    camp = tmp_path / "farm.toml"
    camp.write_text(f'[campaign]\nname = "farm"\nrepetitions = 2\n[[target]]\nname = "rock"\n'
                    f'url = "{url(farm, "?board=rock-5b")}"\n[[model]]\npath = "{DIGITS}"\n'
                    '[[scenario]]\nkind = "single-stream"\niterations = 50\n')  # fmt: skip
    proc = edge_bench(farm, "run", str(camp), "--store", str(tmp_path / "s.sqlite"), "--json", "-")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["answer"][0]["targets"]
    assert (row["target"], row["runs"], row["failed_runs"]) == ("rock", 2, 0), row
    assert farm.owner("p1") is None
