"""A host driving a board's agent, with real parts: `edge-runtime agent` in a child process, TCP on 127.0.0.1,
pseudo-terminals opened with pyserial at both ends (and a cable between them that flips, drops and is pulled),
pyserial's socket:// URL, real models on real backends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from agentkit import AgentProcess, Cable, comparable, free_port, lost_nothing
from conftest import MODELS, ROOT, need
from helpers import request, run_cli

from bench.targets import TargetOptions
from bench.targets.agent import AgentResult, AgentTarget, TargetError

pytest.importorskip("serial")
DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"
RESNET_IR = MODELS / "resnet8" / "resnet8_int8.xml"


def files_under(d: Path) -> set[str]:
    return {str(p) for p in d.rglob("*")}


def local_bench(model: Path, *flags: str) -> dict:
    """`edge-runtime bench MODEL FLAGS --json` here, in a child process (as a user runs it; a pinned OpenVINO run in
    the test process would also change how OpenVINO treats later sessions there: see test_session.py)."""
    proc = run_cli("bench", str(model), *flags, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def target(url: str, dead_after: float = 3.0, **kw) -> AgentTarget:
    kw.setdefault("reconnect_for", 30.0)
    kw.setdefault("connect_timeout", 5.0)
    return AgentTarget(url, TargetOptions(**kw), dead_after=dead_after)


# ---------------------------------------------------------------------------------------------- the whole flow
def test_tcp_upload_bench_and_the_result_is_a_local_bench_of_the_same_request(tmp_path):
    need("onnxruntime")
    req = request(DIGITS, cpus=[1], iterations=300, sandbox=True)
    local = local_bench(DIGITS, "--cpus", "1", "--iterations", "300")
    with AgentProcess("tcp://127.0.0.1:0", tmp_path / "state") as agent, target(agent.url) as t:
        ident = t.connect()
        assert ident["protocol"] == 1 and ident["backends"]["onnxruntime"]
        assert ident["cpus"]["online"] == sorted(psutil.Process().cpu_affinity()) or ident["cpus"]["online"]
        checked = t.load_check(req)
        assert checked["backend"]["name"] == "onnxruntime" and checked["inputs"][0]["dtype"]
        got = t.bench(req)
        stats = t.link_stats()
        again = t.bench(req)  # the model is on the board now: nothing is uploaded the second time
        stats2 = t.link_stats()
        assert t.pending() == []  # both acknowledged
    remote = got.result
    assert comparable(remote) == comparable(local)
    assert remote["model"]["path"].startswith(str(tmp_path / "state" / "models"))
    assert remote["pinning"]["all_threads_pinned"] is True
    link = got.record()["link"]
    assert link["frames_out"] > 0 and lost_nothing(link), link  # TCP loses nothing; a stall is not a loss
    sent_first = stats["bytes_out"]
    assert sent_first > DIGITS.stat().st_size  # the model went over
    assert stats2["bytes_out"] - sent_first < DIGITS.stat().st_size / 4  # ... once
    assert again.result["model"]["sha256"] == remote["model"]["sha256"]


def test_over_a_pty_pair_with_pyserial_at_both_ends(tmp_path):
    need("openvino")
    cable = Cable()
    try:
        with AgentProcess(cable.agent_url, tmp_path / "state"), target(cable.host_url) as t:
            # An OpenVINO IR is two files: both go over, and the board's model hash is the one a local run gives.
            got = t.bench(request(RESNET_IR, iterations=100, cpus=[1], sandbox=True))
            info = t.board_info()
    finally:
        cable.close()
    local = local_bench(RESNET_IR, "--cpus", "1", "--iterations", "100")
    assert comparable(got.result) == comparable(local)
    assert sorted(p.name for p in (tmp_path / "state" / "models").glob("*/*")) == [
        "model.json", "resnet8_int8.bin", "resnet8_int8.xml"
    ]  # fmt: skip
    assert info["schema"] == "edge-runtime/info/1"
    assert got.link["crc_errors"] == 0 and got.link["bytes_in"] > 0


def test_pyserial_socket_url_reaches_the_tcp_agent(tmp_path):
    need("onnxruntime")
    with AgentProcess("tcp://127.0.0.1:0", tmp_path / "state") as agent:
        url = agent.url.replace("tcp://", "socket://")
        with target(url) as t:
            got = t.bench(request(DIGITS, iterations=50))
    assert got.result["latency_us"]["count"] == 50


# --------------------------------------------------------------------------------------------- a bad cable
def test_a_faulty_cable_delivers_every_result_exactly_once(tmp_path):
    need("onnxruntime")
    need("openvino")
    cable = Cable(p=0.03, seed=11)
    delivered: dict[str, list] = {}

    def sink(r: AgentResult) -> None:
        delivered.setdefault(r.request_id, []).append(r.result)

    try:
        with AgentProcess(cable.agent_url, tmp_path / "state") as agent, target(cable.host_url) as t:
            reqs = [
                request(RESNET_IR, iterations=200, cpus=[1], sandbox=True),
                request(DIGITS, duration_s=4.0, cpus=[1]),
                request(DIGITS, iterations=100, cpus=[1], seed=3),
            ]
            results = []
            for i, req in enumerate(reqs):
                if i == 1:
                    threading.Timer(1.5, cable.pull, args=(3.0,)).start()  # unplugged for 3 s during the 4 s run
                results.append(t.bench(req, sink=sink, rid=f"faulty-{i}"))
            stats = t.link_stats()
            assert t.pending() == []
            assert agent.proc.poll() is None
    finally:
        cable.close()
    assert sorted(delivered) == ["faulty-0", "faulty-1", "faulty-2"]
    assert all(len(v) == 1 for v in delivered.values())
    assert [r.result["latency_us"]["count"] for r in results][::2] == [200, 100]
    assert results[1].result["wall_s"] >= 3.9  # the run went on while the cable was out
    assert cable.faults > 10
    assert stats["retransmissions"] > 0 and stats["crc_errors"] + stats["resyncs"] > 0
    for r in results:
        json.dumps(r.result, allow_nan=False)  # content intact: a complete, valid record


def test_a_cable_that_flips_and_drops_bytes_carries_the_handshake_and_every_result_once(tmp_path):
    # Issue 22: per byte, a bit flipped with p = 1% and the byte lost with p = 0.5% (a 100-byte frame gets through
    # about one time in five). The handshake (CONNECT/ACCEPT and the hello) used to be the weakest frame: the bench
    # never connected. Now it goes through as the data does, in small frames resent until they arrive.
    need("onnxruntime")
    cable = Cable(flip=0.01, drop=0.005, seed=22)
    delivered: dict[str, list] = {}

    def sink(r: AgentResult) -> None:
        delivered.setdefault(r.request_id, []).append(r.result)

    logs: list[str] = []
    t0 = time.monotonic()
    try:
        with AgentProcess(cable.agent_url, tmp_path / "state") as agent, AgentTarget(
            cable.host_url, TargetOptions(reconnect_for=60.0, log=logs.append)
        ) as t:
            results = [t.bench(request(DIGITS, iterations=30 + i, cpus=[1]), sink=sink, rid=f"noisy-{i}")
                       for i in range(2)]  # fmt: skip
            assert t.pending() == []  # both acknowledged: nothing waits in the outbox
            stats = t.link_stats()
            assert agent.proc.poll() is None
    finally:
        cable.close()
    took = time.monotonic() - t0
    assert sorted(delivered) == ["noisy-0", "noisy-1"] and all(len(v) == 1 for v in delivered.values()), delivered
    assert [r.result["latency_us"]["count"] for r in results] == [30, 31]
    for r in results:
        json.dumps(r.result, allow_nan=False)  # content intact: a complete, valid record
    assert cable.faults > 1000 and cable.faults > 0.01 * cable.forwarded  # the line was as bad as asked
    assert stats["retransmissions"] > 100 and stats["crc_errors"] + stats["resyncs"] > 100, stats
    print(f"\n1%/0.5% per byte: two benches in {took:.1f} s, {stats['reconnects']} reconnects, {cable.faults} faults, "
          f"{stats['retransmissions']} frames resent; {logs}")  # fmt: skip


def test_the_link_rtt_during_a_bench_is_the_links_own_and_the_boards_time_is_said_apart(tmp_path):
    # Issue 22: over a loopback agent the run said "rtt 39.6 ms" where `edge-bench targets` measured 0.5 ms: the
    # board acknowledged a request only after it had handled it, so its busy time was sampled as the link's.
    need("onnxruntime")
    with AgentProcess("tcp://127.0.0.1:0", tmp_path / "state") as agent, target(agent.url) as t:
        t.connect()
        for _ in range(5):  # what `edge-bench targets` does
            t.call("ping")
        alone = t.link_stats()["rtt_ms"]
        got = t.bench(request(DIGITS, iterations=200, cpus=[1], sandbox=True))
    link = got.record()["link"]
    assert link["rtt_ms"] <= 3 * alone + 2.0, (alone, link)  # before: 10 to 100 times the link's own
    # The rest is said as what it is: the board's time to start answering (a bench is checked, queued and its child
    # started before its first progress), well above the link's round trip.
    assert link["board_busy_ms"] > link["rtt_ms"], link


def test_the_agent_acknowledges_a_request_before_it_handles_it(tmp_path):
    # In-process (the agent's sans-I/O side), so the order of what it writes is seen exactly.
    from edge_runtime.agent.server import Agent
    from edge_runtime.agent.state import StateDir
    from edge_runtime.wire import messages as wm
    from edge_runtime.wire.frame import FrameDecoder, Kind
    from edge_runtime.wire.link import Link

    agent = Agent(StateDir(str(tmp_path / "state"), max_store=1 << 20))
    try:
        host = Link(role="host")
        host.connect(0.0)
        agent.feed(host.outgoing(), 0.0)
        host.receive(agent.outgoing(), 0.0)
        assert host.is_open
        writes: list[list] = []
        for rid, op, now in (("r1", "results", 0.1), ("r2", "ping", 0.2)):
            writes.clear()
            host.send(wm.encode(wm.request(rid, op)), now)
            agent.feed(host.outgoing(), now, lambda b: writes.append([f.kind for f in FrameDecoder().feed(b)]))
            after = [f.kind for f in FrameDecoder().feed(agent.outgoing())]
            if op == "ping":  # answered as fast as its ACK would leave: one write
                assert writes == [] and Kind.ACK in after and Kind.DATA in after, (writes, after)
            else:  # the ACK first, alone; the answer after the request was handled
                assert len(writes) == 1 and set(writes[0]) == {Kind.ACK} and Kind.DATA in after, (writes, after)
    finally:
        agent.close()


def test_an_unreachable_agent_is_named_once_in_each_line(tmp_path):
    # Issue 22 (item 9): "tcp://...: tcp://...: tcp://...: nothing heard for 10.0 s; trying again".
    import socket

    with socket.socket() as silent:  # accepts, and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        logs: list[str] = []
        t = AgentTarget(url, TargetOptions(connect_timeout=3.0, reconnect_for=1.0, log=logs.append), dead_after=0.5)
        with pytest.raises(TargetError) as e:
            t.call("ping")
    assert "nothing heard" in str(e.value) and str(e.value).count(url) == 1, str(e.value)
    assert logs and all(line.count(url) == 1 for line in logs), logs
    dead = f"tcp://127.0.0.1:{free_port()}"
    proc = subprocess.run([sys.executable, "-m", "bench.cli", "targets", dead, "--reconnect-for", "0"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)  # fmt: skip
    assert proc.returncode == 1 and proc.stdout.count(dead) == 1 and "refused" in proc.stdout, proc.stdout


def test_the_agent_killed_mid_bench_answers_the_request_after_it_restarts(tmp_path):
    need("onnxruntime")
    cable = Cable()
    state = tmp_path / "state"
    try:
        agent = AgentProcess(cable.agent_url, state)
        with target(cable.host_url, reconnect_for=60.0) as t:
            t.connect()
            box: dict = {}
            progress: list[str] = []
            th = threading.Thread(
                target=lambda: box.update(
                    r=t.bench(request(DIGITS, duration_s=3.0, cpus=[1]), rid="killed-1", progress=progress.append)
                ),
                daemon=True,
            )
            th.start()
            deadline = time.monotonic() + 60
            while not any("measuring" in p or ("%" in p and "upload" not in p) for p in progress):
                assert time.monotonic() < deadline, progress
                time.sleep(0.05)
            children = psutil.Process(agent.proc.pid).children(recursive=True)
            agent.kill()  # SIGKILL in the middle of the measured run
            psutil.wait_procs(children, timeout=10)
            assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
            assert (state / "running" / "killed-1.json").exists()
            agent.start()
            th.join(timeout=120)
            assert "r" in box, progress
            got = box["r"]
            assert got.rerun_after_restart is True
            assert got.result["latency_us"]["count"] > 0
            assert t.pending() == [] and not (state / "running" / "killed-1.json").exists()
            assert t.link_stats()["reconnects"] >= 1
        agent.stop()
    finally:
        cable.close()


def test_a_host_that_vanished_collects_its_result_from_the_outbox_once(tmp_path):
    need("onnxruntime")
    from bench.transports.connection import Connection

    with AgentProcess("tcp://127.0.0.1:0", tmp_path / "state") as agent:
        with target(agent.url) as t:
            sha, name = t.upload(str(DIGITS))
        conn = Connection(agent.url)
        conn.open()
        wire = request(DIGITS, iterations=200).to_dict() | {"model": name, "model_sha256": sha}
        conn.send_request("bench", {"request": wire}, rid="gone-1")
        conn.close()  # the host dies before the answer
        kept: list[AgentResult] = []
        with target(agent.url) as t2:
            deadline = time.monotonic() + 60
            while not t2.pending():
                assert time.monotonic() < deadline
                time.sleep(0.2)
            assert t2.collect(kept.append) == ["gone-1"]
            assert t2.collect(kept.append) == []  # acknowledged: never delivered again
            # The same request id asked again is answered from the store, not run again.
            again = t2.call("bench", {"request": wire}, rid="gone-1", full=True)
        assert [k.request_id for k in kept] == ["gone-1"]
        assert again["result"]["started_at"] == kept[0].result["started_at"]


# ---------------------------------------------------------------------------------------------- bad input
def test_fuzzed_frames_get_error_frames_and_the_agent_goes_on(tmp_path):
    import random
    import socket

    from edge_runtime.wire import messages as wm
    from edge_runtime.wire.frame import Frame, FrameDecoder, Kind, encode_frame
    from edge_runtime.wire.link import Link

    rng = random.Random(2)
    with AgentProcess("tcp://127.0.0.1:0", tmp_path / "state", "--max-frame", "4096") as agent:
        host, port = agent.url.removeprefix("tcp://").split(":")
        s = socket.create_connection((host, int(port)), timeout=10)
        link = Link(role="host")
        link.connect(0.0)
        s.sendall(rng.randbytes(5000) + link.outgoing())  # garbage first, then a CONNECT
        deadline = time.monotonic() + 10
        s.settimeout(0.2)
        while not link.is_open:
            try:
                link.receive(s.recv(65536), time.monotonic())
            except TimeoutError:
                pass
            link.poll(time.monotonic())
            s.sendall(link.outgoing())
            assert time.monotonic() < deadline
        lid = link.link
        raw = encode_frame(Frame(Kind.DATA, lid, 0, b"x" * 100))
        attacks = [
            rng.randbytes(3000),  # random
            raw[:20] + b"\x00",  # truncated
            encode_frame(Frame(Kind.DATA, lid, 0, b"x" * 20000)),  # over the agreed 4096
            raw[:-3] + bytes([raw[-3] ^ 0xFF]) + raw[-2:],  # wrong CRC
            encode_frame(Frame(Kind.DATA, lid, 0, b"")).replace(b"\x01\x01", b"\x01\x63", 1),  # unknown kind
        ]
        for a in attacks:
            s.sendall(a)
        # Valid frames with garbage messages: not a message, unknown type, unknown op, a hostile id.
        garbage = [
            rng.randbytes(300),
            wm.encode(wm.Msg("progress", {"id": "x"})),
            wm.encode(wm.request("ok-id", "format_disk")),
            wm.encode(wm.request("../../etc", "hello")),
        ]
        for payload in garbage:
            link.send(payload, time.monotonic())
        s.sendall(link.outgoing())
        errors, answers = [], {}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (len(errors) < 3 or "ok-id" not in answers):
            try:
                link.receive(s.recv(65536), time.monotonic())
            except TimeoutError:
                pass
            link.poll(time.monotonic())
            s.sendall(link.outgoing())
            for ev in link.events():
                if hasattr(ev, "data"):
                    m = wm.decode(ev.data)
                    if m.type == "error":
                        errors.append(m.get("error")["kind"])
                    elif m.type == "response":
                        answers[m.get("id")] = m.fields
        s.close()
        assert "bad-message" in errors and "bad-request" in errors
        assert {"oversize", "unknown-frame"} & set(errors)
        assert answers["ok-id"]["error"]["kind"] == "unknown-op"
        assert FrameDecoder  # the agent is still there and answers a proper host
        with target(agent.url) as t:
            assert t.connect()["protocol"] == 1
        assert agent.proc.poll() is None


def test_lies_and_paths_that_leave_the_state_dir_are_refused(tmp_path):
    need("onnxruntime")
    from bench.transports.connection import Connection, RemoteError

    state = tmp_path / "state"
    before = files_under(tmp_path)
    with AgentProcess("tcp://127.0.0.1:0", state) as agent:
        with target(agent.url) as t:  # a model the board has (one host at a time: then the raw connection)
            sha, name = t.upload(str(DIGITS))
        conn = Connection(agent.url)
        conn.open()
        data = DIGITS.read_bytes()
        import hashlib
        import zlib

        real = hashlib.sha256(data).hexdigest()
        for bad in ("../evil.onnx", "/etc/passwd", "a/b.onnx", "..", ".hidden", "x\x00.onnx", "model.json", "m.part"):
            files = [{"name": bad, "sha256": real, "size": len(data)}]
            with pytest.raises(RemoteError) as e:
                conn.request("model_status", {"sha256": real, "files": files})
            assert e.value.kind in ("bad-path", "bad-request"), (bad, e.value.message)
        # An upload that lies: the bytes are another file's.
        liar = "0" * 64
        files = [{"name": "m.onnx", "sha256": liar, "size": len(data)}]
        conn.request("model_status", {"sha256": liar, "files": files})
        conn.request("upload_chunk", {"sha256": liar, "name": "m.onnx", "offset": 0, "size": len(data),
                                      "crc32": zlib.crc32(data)}, data)  # fmt: skip
        with pytest.raises(RemoteError) as e:
            conn.request("upload_end", {"sha256": liar, "name": "m.onnx", "file_sha256": liar, "size": len(data),
                                        "files": files})  # fmt: skip
        assert e.value.kind == "hash-mismatch"
        with pytest.raises(RemoteError) as e:  # a chunk whose checksum does not hold
            conn.request("upload_chunk", {"sha256": liar, "name": "m.onnx", "offset": 0, "size": len(data),
                                          "crc32": 1}, data)  # fmt: skip
        assert e.value.kind == "bad-chunk"
        with pytest.raises(RemoteError) as e:  # a bench of a model the board does not have
            conn.request("bench", {"request": {"model": "m.onnx", "model_sha256": liar}})
        assert e.value.kind == "no-model"
        # A model the board has, but a delegate or an option that points out of the state dir.
        for extra in ({"delegate": str(tmp_path / "evil.so")}, {"options": {"CACHE_DIR": "/tmp/x"}},
                      {"model": "../../etc/passwd"}):  # fmt: skip
            with pytest.raises(RemoteError) as e:
                conn.request("bench", {"request": {"model": name, "model_sha256": sha, **extra}})
            assert e.value.kind in ("bad-path", "bad-request"), e.value.message
        with pytest.raises(RemoteError) as e:
            conn.request("bench", {"request": {"model": name, "model_sha256": sha, "iterations": -1}})
        assert "iterations" in e.value.message
        conn.close()
        assert not (state / "models" / liar).exists()
        assert agent.proc.poll() is None
    new = {p for p in files_under(tmp_path) - before if not p.startswith(str(state))}
    assert new == set()


def test_a_model_that_fails_or_a_job_that_crashes_is_an_answer_not_the_end(tmp_path):
    need("onnxruntime")
    bad = tmp_path / "broken_int8.onnx"
    bad.write_bytes(DIGITS.read_bytes()[:3000])
    with AgentProcess("tcp://127.0.0.1:0", tmp_path / "state") as agent, target(agent.url) as t:
        with pytest.raises(TargetError) as e:
            t.bench(request(bad, iterations=10))
        assert e.value.kind == "user-error" and "broken_int8.onnx" in str(e.value)
        # A job killed by a signal (as a crashing delegate kills it) is answered as crashed.
        box: dict = {}
        seen: list[str] = []
        th = threading.Thread(
            target=lambda: box.update(r=_catch(lambda: t.bench(request(DIGITS, duration_s=20.0), progress=seen.append)))
        )
        th.start()
        deadline = time.monotonic() + 60
        while True:
            kids = [c for c in psutil.Process(agent.proc.pid).children(recursive=True) if "measure.child_main" in
                    " ".join(c.cmdline())]  # fmt: skip
            if kids:
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        while not any("measuring" in p for p in seen):  # the job has its session and is in its measured part
            assert time.monotonic() < deadline and th.is_alive(), seen
            time.sleep(0.05)
        kids[0].send_signal(signal.SIGSEGV)
        th.join(timeout=60)
        assert isinstance(box["r"], TargetError) and box["r"].kind == "crashed", box
        assert "SIGSEGV" in str(box["r"]) or "signal 11" in str(box["r"])
        assert t.bench(request(DIGITS, iterations=20)).result["latency_us"]["count"] == 20
        assert agent.proc.poll() is None


def _catch(fn, *a):
    try:
        return fn(*a)
    except Exception as err:  # noqa: BLE001 - the test looks at it
        return err


def test_the_token_is_checked_and_required_off_loopback(tmp_path):
    need("onnxruntime")
    tok = tmp_path / "token"
    tok.write_text("correct horse battery staple\n")
    tok.chmod(0o600)
    with AgentProcess("tcp://127.0.0.1:0", tmp_path / "state", "--token-file", str(tok)) as agent:
        for secret in (None, b"wrong horse battery staple"):
            with pytest.raises(TargetError) as e:
                target(agent.url, token=secret, reconnect_for=0).connect()
            assert e.value.kind == "auth"
        with target(agent.url, token=b"correct horse battery staple") as t:
            assert t.connect()["protocol"] == 1
        assert agent.proc.poll() is None
    for endpoint, extra, needle in (
        ("tcp://0.0.0.0:0", (), "needs --token-file"),
        ("tcp://127.0.0.1:0", ("--token-file", str(tmp_path / "missing")), "missing"),
    ):
        a = AgentProcess(endpoint, tmp_path / "state2", *extra, wait=False)
        assert a.wait() == 2  # exited, and everything it said has been read
        assert len(a.lines) == 1 and needle in a.lines[0], a.lines
    tok.chmod(0o644)
    a = AgentProcess("tcp://127.0.0.1:0", tmp_path / "state2", "--token-file", str(tok), wait=False)
    assert a.proc.wait(timeout=60) == 2


def test_a_second_host_is_refused_while_one_is_in_session(tmp_path):
    with AgentProcess("tcp://127.0.0.1:0", tmp_path / "state") as agent:
        with target(agent.url) as first:
            first.connect()
            with pytest.raises(TargetError) as e:
                target(agent.url, reconnect_for=0).connect()
            assert e.value.kind == "refused" and "busy" in str(e.value)
            assert first.call("results")["pending"] == []  # the first host is undisturbed
        # Gone: the next host gets in.
        with target(agent.url) as t:
            assert t.connect()["protocol"] == 1


def test_two_agents_never_share_a_state_dir(tmp_path):
    port = free_port()
    with AgentProcess(f"tcp://127.0.0.1:{port}", tmp_path / "state"):
        b = AgentProcess("tcp://127.0.0.1:0", tmp_path / "state", wait=False)
        assert b.wait() == 2  # exited, and everything it said has been read
        assert len(b.lines) == 1 and "another agent" in b.lines[0] and str(os.getpid()) not in b.lines[0]
