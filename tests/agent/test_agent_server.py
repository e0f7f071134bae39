"""What a hostile or broken peer, job or state directory does to the agent, driven in-process through its sans-I/O
side (Agent.feed/poll/outgoing) and the link: the agent answers or ends the session, and never stops."""

from __future__ import annotations

import hashlib
import sys
import threading
import time
import zlib

import pytest
from agentkit import Host

from edge_runtime.agent.jobs import Job, run_child
from edge_runtime.agent.server import AUTH_GRACE_S, Agent
from edge_runtime.agent.state import RequestError, StateDir
from edge_runtime.wire import messages as wm
from edge_runtime.wire.frame import Frame, Kind, encode_frame
from edge_runtime.wire.link import Refused


@pytest.fixture
def agent(tmp_path):
    a = Agent(StateDir(str(tmp_path / "state"), max_store=1 << 20))
    yield a
    a.close()


def test_a_deeply_nested_connect_or_message_does_not_stop_the_agent(agent):
    agent.feed(encode_frame(Frame(Kind.CONNECT, 77, 0, b"[" * 60_000)), 1.0)  # refused: no version in it
    agent.feed(encode_frame(Frame(Kind.CONNECT, 78, 0, b'{"version": 1, "max_payload": ' + b"[" * 3000 + b"}")), 1.0)
    h = Host(agent, 2.0)
    assert h.link.is_open
    h.link.send(b"\x00\x00\x00\x10" + b"[" * 16, h.now)  # a header of nothing but brackets
    h.link.send(wm.encode(wm.Msg("request", {"id": "x", "op": "ping", "args": {"a": [[[[]]]]}})), h.now)
    h.pump()
    assert h.ask("ping", rid="after")["ok"] is True


def test_without_the_token_a_peer_cannot_hold_the_agent_or_fill_its_memory(tmp_path):
    agent = Agent(StateDir(str(tmp_path / "s")), token=b"0123456789abcdef-secret")
    try:
        h = Host(agent, 10.0)
        assert agent.session_alive()
        assert h.ask("ping", rid="p1")["error"]["kind"] == "auth"
        h.link.send(wm.encode(wm.request("big", "hello", {"pad": "x" * 10_000})), h.now)
        h.pump()
        assert not agent.link.is_open  # a large message before the token: the session is over
        h2 = Host(agent, h.now + 1)
        events = []
        for i in range(int(AUTH_GRACE_S / 0.5) + 4):  # keeps pinging, never proves the token
            h2.now += 0.5
            events += h2.pump(1)
            if i == 2:
                assert agent.session_alive()
        assert not agent.session_alive() and not agent.link.is_open  # the next host can get in
        refused = [e for e in events + h2.pump(120) if isinstance(e, Refused)]
        assert refused and "session ended" in refused[0].reason  # and this one is told, not left waiting
    finally:
        agent.close()


def test_a_session_the_agent_ended_is_refused_so_the_host_reconnects(agent):
    h = Host(agent)
    assert h.ask("ping")["ok"]
    agent.drop_session("serial port lost")  # the agent gave up; the host's side of the cable still looks fine
    events = h.pump(120)
    assert any(isinstance(e, Refused) for e in events) and h.link.state == "refused"
    h2 = Host(agent, h.now)
    assert h2.ask("ping", rid="again")["ok"]


def test_uploads_write_only_what_was_declared(agent, tmp_path):
    h = Host(agent)
    data = b"model bytes " * 100
    sha = hashlib.sha256(data).hexdigest()
    files = [{"name": "m.tflite", "sha256": sha, "size": len(data)}]
    for bad in ("model.json", "MODEL.JSON", "upload.json", "lock"):
        answer = h.ask("model_status", {"sha256": sha, "files": [{**files[0], "name": bad}]}, rid=f"s-{bad}")
        assert answer["error"]["kind"] == "bad-path"
    assert h.ask("model_status", {"sha256": sha, "files": files}, rid="s1")["ok"]

    def chunk(name: str, offset: int, blob: bytes, rid: str) -> dict:
        args = {"sha256": sha, "name": name, "offset": offset, "size": 10**12, "crc32": zlib.crc32(blob)}
        return h.ask("upload_chunk", args, rid=rid, blob=blob)

    assert chunk("other.bin", 0, b"x" * 100, "c1")["ok"] is False  # a file the upload did not declare
    assert chunk("m.tflite", 0, data + b"more", "c2")["error"]["kind"] == "too-large"  # past its declared size
    assert chunk("m.tflite", 0, data, "c3")["result"] == {"have": len(data)}
    answer = h.ask("upload_end", {"sha256": sha, "name": "m.tflite", "file_sha256": sha}, rid="e1")
    assert answer["result"] == {"complete": True}
    models = tmp_path / "state" / "models"
    assert sorted(p.name for p in (models / sha).iterdir()) == ["m.tflite", "model.json"]


def test_a_store_full_of_strays_does_not_wedge_the_agent(tmp_path):
    st = StateDir(str(tmp_path / "s"), max_store=1000)
    (tmp_path / "s" / "models" / "stray-file").write_bytes(b"x" * 900)
    sha = "a" * 64
    t0 = time.monotonic()
    status = st.model_status(sha, [{"name": "m.onnx", "sha256": sha, "size": 500}])
    assert status["complete"] is False and time.monotonic() - t0 < 5
    assert not (tmp_path / "s" / "models" / "stray-file").exists()  # removed to make room, not looped over
    (tmp_path / "s" / "models" / ("b" * 64)).mkdir()
    (tmp_path / "s" / "models" / ("b" * 64) / "upload.part").write_bytes(b"z" * 600)  # another upload, meanwhile
    with pytest.raises(RequestError, match="store"):
        st.write_chunk(sha, "m.onnx", 0, b"y" * 500)  # would pass the bound: refused, not written


def test_a_job_that_prints_garbage_or_floods_stderr_is_still_answered():
    lock = threading.Lock()
    sent = []
    junk = (
        "import sys, json\n"
        "print(42); sys.stdout.buffer.write(b'\\xff\\xfe not json\\n'); print('[1, 2]')\n"
        "sys.stderr.buffer.write(b'\\xff' * 200000)\n"
        "print(json.dumps({'progress': 'half'})); print(json.dumps({'result': {'x': 1}}))\n"
    )
    answer = run_child(Job("j1", "bench", {"request": {}}), lock, sent.append, cmd=[sys.executable, "-c", junk])
    assert answer == {"ok": True, "result": {"x": 1}, "warnings": []}
    assert [m.get("text") for m in sent] == ["half"]
    crash = "import sys; sys.stderr.buffer.write(b'\\xfe' * 100000 + b'\\nlast words'); sys.exit(3)"
    answer = run_child(Job("j2", "bench", {"request": {}}), lock, sent.append, cmd=[sys.executable, "-c", crash])
    assert (
        answer["ok"] is False and answer["error"]["kind"] == "internal" and "last words" in answer["error"]["message"]
    )
    hang = (  # a child stuck where SIGINT does nothing (a native call)
        "import signal, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        'print(\'{"progress": "up"}\', flush=True)\n'
        "time.sleep(600)\n"
    )
    job = Job("j3", "bench", {"request": {}})
    import edge_runtime.agent.jobs as jobs

    jobs.CANCEL_GRACE_S, saved = 1.0, jobs.CANCEL_GRACE_S
    try:

        def cancel_soon():
            deadline = time.monotonic() + 60
            while not any(m.get("text") == "up" for m in sent) and time.monotonic() < deadline:  # the child runs
                time.sleep(0.01)
            job.cancelled = True
            jobs.cancel(job)

        threading.Thread(target=cancel_soon, daemon=True).start()
        t0 = time.monotonic()
        answer = run_child(job, lock, sent.append, cmd=[sys.executable, "-c", hang])
    finally:
        jobs.CANCEL_GRACE_S = saved
    assert answer["error"]["kind"] == "cancelled" and time.monotonic() - t0 < 10  # ignored SIGINT: killed


def test_only_a_real_serial_line_has_a_rate():
    import os

    from edge_runtime.wire.endpoint import line_rate, parse_endpoint

    master, slave = os.openpty()
    try:
        pty = os.ttyname(slave)
        assert line_rate(parse_endpoint(f"serial://{pty}?baud=115200")) is None  # a pty moves bytes at memory speed
    finally:
        os.close(master)
        os.close(slave)
    assert line_rate(parse_endpoint("serial:///dev/ttyUSB7?baud=115200")) == 11520.0
    assert line_rate(parse_endpoint("/dev/ttyAMA0")) == 11520.0  # the default 115200 baud
    assert line_rate(parse_endpoint("socket://127.0.0.1:7000")) is None
    assert line_rate(parse_endpoint("tcp://127.0.0.1:7000")) is None
