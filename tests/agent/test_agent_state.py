"""The agent's state directory on real disks (issue 22): a 64 KB tmpfs that fills up, a read-only mount, the directory
deleted under a running agent, and the same model under two names. Real agents (agentkit), real uploads through the
host's agent target; the tmpfs tests skip, saying why, where mounting is not possible."""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import shutil
import signal
import subprocess
import zlib
from pathlib import Path

import pytest
from agentkit import AgentProcess, Host, tmpfs
from conftest import MODELS, need
from helpers import request

from bench.targets import TargetOptions
from bench.targets.agent import AgentTarget, TargetError
from edge_runtime.agent.server import Agent
from edge_runtime.agent.state import RequestError, StateDir
from edge_runtime.runtime.model import sha256_of_files

pytest.importorskip("serial")
DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"  # 46 KB and 45 KB: one fits on a 64 KB disk, not both
KWS = MODELS / "dscnn_kws" / "dscnn_kws_int8.onnx"
DIGITS_IR = MODELS / "digits_cnn" / "digits_cnn_int8.xml"


def target(url: str) -> AgentTarget:
    return AgentTarget(url, TargetOptions(reconnect_for=30.0, connect_timeout=5.0), dead_after=3.0)


def declared(*paths: Path) -> dict:
    """model_status's arguments for the model made of `paths`, as the host's agent target declares it."""
    files = []
    whole = sha256_of_files(paths, each=lambda p, own: files.append({"name": p.name, "sha256": own,
                                                                     "size": p.stat().st_size}))  # fmt: skip
    return {"sha256": whole, "files": files}


def fill(path: Path) -> None:
    """Write `path` until its disk is full (someone else's file on the board's disk)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for _ in range(4096):  # 16 MB at most: the disks here are 64 KB
            try:
                os.write(fd, b"\0" * 4096)
            except OSError as err:
                assert err.errno == errno.ENOSPC
                return
        raise AssertionError(f"{path}: never full")
    finally:
        os.close(fd)


def files_in(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())


# ---------------------------------------------------------------------------------------- item 2: a small disk
def test_a_small_disk_makes_room_by_its_free_space_and_a_failed_upload_leaves_nothing_behind(tmp_path):
    disk, big = tmp_path / "disk", tmp_path / "big.tflite"
    state = disk / "state"
    big.write_bytes(bytes(range(256)) * 224)  # 56 KB: more than evicting every model would free
    data = KWS.read_bytes()
    with tmpfs(disk):
        with AgentProcess("tcp://127.0.0.1:0", state) as agent, target(agent.url) as t:
            digits_sha, _ = t.upload(str(DIGITS))
            kws_sha, _ = t.upload(str(KWS))  # both do not fit: the one used longest ago makes room
            assert "free" in agent.wait_for(f"evicted model {digits_sha[:12]}")
            answer = t.call("model_status", declared(DIGITS))
            assert answer["complete"] is False and [e["sha256"] for e in answer["evicted"]] == [kws_sha]
            assert t.upload(str(DIGITS))[0] == digits_sha

            # The disk filled by someone else: refused before a byte is sent, and nothing evicted for nothing.
            fill(disk / "ballast")
            with pytest.raises(TargetError) as e:
                t.upload(str(big))
            assert e.value.kind == "no-space" and str(state) in str(e.value) and "free" in str(e.value), e.value
            assert t.call("model_status", declared(DIGITS))["complete"] is True

            # The disk fills in the middle of an upload: the chunk is refused and the upload leaves nothing behind.
            (disk / "ballast").unlink()
            assert t.call("model_status", declared(KWS))["evicted"][0]["sha256"] == digits_sha
            fill(disk / "ballast")
            chunk = {"sha256": kws_sha, "name": KWS.name, "offset": 0, "size": len(data), "crc32": zlib.crc32(data)}
            with pytest.raises(TargetError) as e:
                t.call("upload_chunk", chunk, data)
            assert e.value.kind == "no-space" and "discarded" in str(e.value), e.value
            assert files_in(state / "models") == [] and not list(state.rglob("*.tmp"))
            agent.wait_for(f"upload of model {kws_sha[:12]}")
        (disk / "ballast").unlink()

        # What a writer killed mid-upload leaves (a part no declaration covers, a temporary) is swept at start.
        orphan = state / "models" / ("f" * 64)
        orphan.mkdir()
        (orphan / "x.onnx.part").write_bytes(data[:20000])
        (state / "models" / kws_sha).mkdir()
        (state / "models" / kws_sha / "upload.json.4242.tmp").write_bytes(b"{")
        with AgentProcess("tcp://127.0.0.1:0", state) as agent, target(agent.url) as t:
            line = agent.wait_for("left behind")
            assert "x.onnx.part" in line and "upload.json.4242.tmp" in line, line
            assert files_in(state / "models") == []
            assert t.upload(str(KWS))[0] == kws_sha
            assert t.upload(str(DIGITS))[0] == digits_sha


# ---------------------------------------------------------------------------------------- item 3: names are aliases
def test_the_same_model_under_another_name_is_held_once_and_not_sent_again(tmp_path):
    need("onnxruntime")
    a, b = tmp_path / "a" / "digits_a.onnx", tmp_path / "b" / "digits_b.onnx"
    for p in (a, b):
        p.parent.mkdir()
        shutil.copyfile(DIGITS, p)
    state = tmp_path / "state"
    with AgentProcess("tcp://127.0.0.1:0", state) as agent, target(agent.url) as t:
        sent, results = [], []
        for p in (a, b, a, b):  # a campaign switching between the two names
            results.append(t.bench(request(p, iterations=20)).result)
            sent.append(t.link_stats()["bytes_out"])
        size = DIGITS.stat().st_size
        assert sent[0] > size  # the bytes went over once ...
        assert all(later - earlier < size / 4 for earlier, later in itertools.pairwise(sent)), sent  # ... and only once
        assert "another name" in agent.wait_for("digits_b.onnx")
    sha = declared(DIGITS)["sha256"]
    assert {r["model"]["sha256"] for r in results} == {sha}
    assert [r["latency_us"]["count"] for r in results] == [20] * 4
    assert [p.name for p in (state / "models").iterdir()] == [sha]


def test_an_openvino_pair_under_another_name_runs_from_the_held_files(tmp_path):
    need("openvino")
    for d, stem in (("a", "digits_a"), ("b", "digits_b")):
        (tmp_path / d).mkdir()
        shutil.copyfile(DIGITS_IR, tmp_path / d / f"{stem}.xml")
        shutil.copyfile(DIGITS_IR.with_suffix(".bin"), tmp_path / d / f"{stem}.bin")
    with AgentProcess("tcp://127.0.0.1:0", tmp_path / "state") as agent, target(agent.url) as t:
        first = t.bench(request(tmp_path / "a" / "digits_a.xml", iterations=20)).result
        sent = t.link_stats()["bytes_out"]
        second = t.bench(request(tmp_path / "b" / "digits_b.xml", iterations=20)).result
        assert t.link_stats()["bytes_out"] - sent < DIGITS_IR.stat().st_size / 4
    assert first["model"]["sha256"] == second["model"]["sha256"]
    assert second["backend"]["name"] == "openvino" and second["latency_us"]["count"] == 20


def test_a_held_model_in_use_is_never_removed_for_another_declaration_of_its_hash(tmp_path):
    st = StateDir(str(tmp_path / "s"))
    head, tail = b"A" * 1000, b"B" * 1000
    sha = hashlib.sha256(head + tail).hexdigest()
    one = [{"name": "m.onnx", "sha256": sha, "size": 2000}]
    st.model_status(sha, one)
    st.write_chunk(sha, "m.onnx", 0, head + tail)
    assert st.finish_file(sha, "m.onnx", sha) == {"complete": True}
    st.in_use.add(sha)  # a job queued or running on it
    # The same bytes split into two files (same hash): cannot be held beside it, and it is in use: refused.
    two = [{"name": "m.onnx", "sha256": hashlib.sha256(head).hexdigest(), "size": 1000},
           {"name": "m.onnx.data", "sha256": hashlib.sha256(tail).hexdigest(), "size": 1000}]  # fmt: skip
    with pytest.raises(RequestError) as e:
        st.model_status(sha, two)
    assert e.value.kind == "busy"
    # Another name for the same file: held, answered complete, nothing removed; the new name resolves to it.
    answer = st.model_status(sha, [{**one[0], "name": "other.onnx"}])
    assert answer["complete"] is True and answer["held_as"] == ["m.onnx"]
    path = st.model_path(sha, "other.onnx")
    assert path == st.model_path(sha, "m.onnx") and Path(path).read_bytes() == head + tail
    with pytest.raises(RequestError):
        st.model_path(sha, "never-declared.onnx")


# ---------------------------------------------------------------------------------------- item 4: deleted under it
def test_the_state_dir_deleted_under_a_running_agent_stops_it_and_no_second_agent_runs_beside_it(tmp_path):
    state = tmp_path / "state"
    first = AgentProcess("tcp://127.0.0.1:0", state)
    others: list[AgentProcess] = []
    try:
        os.kill(first.proc.pid, signal.SIGSTOP)  # so it cannot notice before the second one starts
        try:
            shutil.rmtree(state)
            second = AgentProcess("tcp://127.0.0.1:0", state, wait=False)
            others.append(second)
            assert second.wait(timeout=30) == 2, second.lines
            assert len(second.lines) == 1 and f"another agent (pid {first.proc.pid})" in second.lines[0]
        finally:
            os.kill(first.proc.pid, signal.SIGCONT)
        assert first.wait(timeout=60) == 4, first.lines
        assert any("deleted" in line and "stopping" in line for line in first.lines), first.lines
        assert "error:" in first.lines[-1] and str(state) in first.lines[-1] and "deleted" in first.lines[-1]
        third = AgentProcess("tcp://127.0.0.1:0", state)  # the first is gone: a new agent starts on a new directory
        others.append(third)
        with target(third.url) as t:
            assert t.connect()["protocol"] == 1
    finally:
        for a in (first, *others):
            a.stop()


def test_a_request_after_the_state_dir_is_gone_is_refused_and_the_agent_stops(tmp_path):
    st = StateDir(str(tmp_path / "state"))
    st.acquire()
    agent = Agent(st)
    try:
        h = Host(agent)
        assert h.ask("ping", rid="before")["ok"] is True and agent.should_stop() is False
        (tmp_path / "state").rename(tmp_path / "moved")
        answer = h.ask("ping", rid="after")  # checked before each request, not only by the loop's clock
        assert answer["error"]["kind"] == "state-lost" and "moved" in answer["error"]["message"]
        assert agent.should_stop() is True
    finally:
        agent.close()
        st.release()


# ---------------------------------------------------------------------------------------- item 5: read-only
def test_a_read_only_state_dir_is_a_one_line_user_error(tmp_path):
    disk = tmp_path / "disk"
    with tmpfs(disk):
        for sub in ("models", "outbox", "done", "running"):  # what an agent leaves: its folders and its lock file
            (disk / "state" / sub).mkdir(parents=True)
        (disk / "state" / "lock").write_text("4242\n")
        remount = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True)
        if remount.returncode:
            pytest.skip(f"cannot remount the tmpfs read-only: {remount.stderr.strip()}")
        a = AgentProcess("tcp://127.0.0.1:0", disk / "state", wait=False)
        assert a.wait() == 2, a.lines
        assert len(a.lines) == 1 and str(disk / "state") in a.lines[0] and "read-only" in a.lines[0], a.lines
    empty = tmp_path / "empty"
    with tmpfs(empty, "ro"):
        for where in (empty, empty / "state"):  # the mount itself, and a folder to be made on it
            a = AgentProcess("tcp://127.0.0.1:0", where, wait=False)
            assert a.wait() == 2, a.lines
            assert len(a.lines) == 1 and str(where) in a.lines[0] and "read-only" in a.lines[0], a.lines
