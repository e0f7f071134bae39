"""The EEMBC runner's UART protocol (bench/targets/eembc_protocol.py, issue 27): the parsers on transcripts shaped as
reference firmware prints them (mlcommons/tiny, benchmark/api/internally_implemented.cpp), clean and noisy; then the
protocol over a real pty, against tests/servers/eembc_sim.py, through pyserial's serial_for_url."""

from __future__ import annotations

import itertools
import math
import os
import random
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.targets import eembc_protocol as proto

SIM = Path(__file__).resolve().parents[1] / "servers" / "eembc_sim.py"

BOOT = b"m-timestamp-mode-performance\r\nm-lap-us-1000\r\nm-init-done\r\nm-ready\r\n"
INFER = (b"m-warmup-start-10\r\nm-warmup-done\r\nm-infer-start-200\r\nm-lap-us-5000000\r\nm-lap-us-5040000\r\n"
         b"m-infer-done\r\nm-results-[0.097,0.110,0.793]\r\nm-ready\r\n")  # fmt: skip


def pieces(data: bytes, seed: int) -> list[bytes]:
    """`data` cut at random places, as a UART hands it over."""
    rng, out, i = random.Random(seed), [], 0
    while i < len(data):
        n = rng.randint(1, 7)
        out.append(data[i : i + n])
        i += n
    return out


def reply_of(command: str, transcript: bytes, seed: int = 1) -> proto.Reply:
    splitter, reply = proto.LineSplitter(), proto.Reply(command)
    for piece in pieces(transcript, seed):
        for line in splitter.feed(piece):
            if reply.feed(line):
                return reply
    return reply


@pytest.mark.parametrize("line, kind, value", [
    ("m-timestamp-mode-performance", "timestamp-mode", "performance"),
    ("m-lap-us-4294967295", "lap", 4294967295),
    ("m-init-done", "init-done", None),
    ("m-ready", "ready", None),
    ("m-name-dut-[ML Commons]", "name", ("dut", "ML Commons")),
    ("m-profile-[ULPMark for tinyML Firmware V0.0.1]", "profile", "ULPMark for tinyML Firmware V0.0.1"),
    ("m-model-[kws01]", "model", "kws01"),
    ("m-[Expecting 1024 bytes]", "expecting", 1024),
    ("m-load-done", "load-done", None),
    ("m-warmup-start-10", "warmup-start", 10),
    ("m-warmup-done", "warmup-done", None),
    ("m-infer-start-200", "infer-start", 200),
    ("m-infer-done", "infer-done", None),
    ("m-results-[0.000,0.996,0.004]", "results", (0.0, 0.996, 0.004)),
    ("m-results-[]", "results", ()),
    ("e-[Insufficent number of hex digits]", "error", "Insufficent number of hex digits"),
    ("e-[Unknown command: dance]", "unknown-command", "dance"),
    ("e-[Unknown command 'dance']", "unknown-command", "dance"),  # a submitter's own EE_ERR_CMD
    # noise around a message: our echo, garbage glued in front, a half line left by garbage
    ("infer 200 10%m-warmup-start-10", "warmup-start", 10),
    ("db 0a0b0c%m-load-done", "load-done", None),
    ("\ufffd~~partialm-name-dut-[x]", "name", ("dut", "x")),
    ("#!m-ready  ", "ready", None),
    ("m-lap-us-12x4", "garbled", "m-lap-us-12x4"),
    ("m-results-[0.1,zz]", "garbled", "m-results-[0.1,zz]"),
    ("m-buffer-00-01-02", "message", "buffer-00-01-02"),
])  # fmt: skip
def test_each_device_line_is_read(line, kind, value):
    msg = proto.parse_line(line)
    assert (msg.kind, msg.value) == (kind, value)


@pytest.mark.parametrize("line", ["", "   ", "name%", "db 00ff10%", "random words - here", "\ufffd\ufffd#~"])
def test_lines_without_a_message_are_noise(line):
    assert proto.parse_line(line) is None


def test_the_splitter_takes_crlf_lf_nul_and_any_cut():
    data = b"m-ready\r\nm-init-done\nm-lap-us-5\0\r\n\r\npartial"
    for seed in range(20):
        splitter, lines = proto.LineSplitter(), []
        for piece in pieces(data, seed):
            lines += splitter.feed(piece)
        assert lines == ["m-ready", "m-init-done", "m-lap-us-5", ""]
        assert splitter.pending() == "partial"
    cut = proto.LineSplitter(max_line=16)
    assert cut.feed(b"x" * 40) == [] and cut.cut == 1 and cut.feed(b"m-ready\n") == ["m-ready"]


def test_an_infer_reply_gives_the_device_timed_rate():
    perf = proto.performance(reply_of("infer 200 10", INFER))
    assert (perf.inferences, perf.warmups, perf.elapsed_us) == (200, 10, 40_000)
    assert perf.inferences_per_s == pytest.approx(5000.0) and perf.latency_us == pytest.approx(200.0)
    assert perf.results == (0.097, 0.110, 0.793)
    wrapped = INFER.replace(b"us-5000000", b"us-4294957296").replace(b"us-5040000", b"us-30000")
    assert proto.performance(reply_of("infer 200 10", wrapped)).elapsed_us == 40_000  # a 32-bit counter wrapped


def test_a_noisy_infer_reply_reads_the_same():
    """Our echo, garbage lines, bare \\n endings and a half line glued to the next message."""
    noisy = (b"infer 200 10%" + INFER.replace(b"m-infer-start", b"\xff\xfe#junk\r\n~~half m-infer-start")
             .replace(b"m-lap-us-5040000\r\n", b"m-lap-us-5040000\n\x01\x7f garbage - line\r\n"))  # fmt: skip
    for seed in range(10):
        reply = reply_of("infer 200 10", noisy, seed)
        assert reply.done and not reply.errors and len(reply.noise) == 2
        assert proto.performance(reply) == proto.performance(reply_of("infer 200 10", INFER))


def test_a_reset_mid_reply_is_seen_and_named():
    half = INFER.split(b"m-lap-us-5040000")[0]
    reply = reply_of("infer 200 10", half + BOOT)
    assert reply.done and reply.reset and reply.first("infer-start") is None  # the boot's m-ready ended it
    with pytest.raises(proto.ProtocolError, match=r"infer 200 10: the device reset \(m-init-done\)"):
        proto.performance(reply)


def test_the_device_words_come_back():
    reply = reply_of("dance", b"dance%e-[Unknown command: dance]\r\nm-ready\r\n")
    assert reply.errors == ["Unknown command: dance"] and "'Unknown command: dance'" in reply.said()
    stuck = reply_of("infer 5 1", b"m-warmup-start-1\r\nm-warmup-done\r\n")
    assert not stuck.done and stuck.said() == "last line 'm-warmup-done'"
    with pytest.raises(proto.ProtocolError, match="no m-expecting"):
        reply_of("db load 9", b"m-ready\r\n").value("expecting")


def test_commands_are_built_as_the_runner_sends_them():
    assert proto.cmd_name() == b"name%" and proto.cmd_profile() == b"profile%" and proto.cmd_results() == b"results%"
    assert proto.cmd_db_load(1024) == b"db load 1024%" and proto.cmd_infer(200, 10) == b"infer 200 10%"
    assert proto.cmd_infer(1, 0) == b"infer 1 0%"
    data = bytes(random.Random(3).randrange(256) for _ in range(1000))
    cmds = proto.db_pieces(data)
    assert len(cmds) == math.ceil(1000 / 31) and all(len(c) <= 66 for c in cmds)  # 80 is the firmware's buffer
    assert b"".join(bytes.fromhex(c[3:-1].decode()) for c in cmds) == data
    for bad in (lambda: proto.cmd_db_load(0), lambda: proto.cmd_infer(0, 1), lambda: proto.cmd_infer(1, -1),
                lambda: proto.command("a%b")):  # fmt: skip
        with pytest.raises(ValueError):
            bad()


# ----------------------------------------------------------------------------------------------- over a pty
def expected_results(data: bytes, classes: int) -> list[float]:
    """The simulator's documented rule, written again: one slice per class, mean byte / 255 * 8, softmax."""
    edges = [len(data) * i // classes for i in range(classes + 1)]
    logits = [8 * sum(data[a:b]) / 255 / (b - a) for a, b in itertools.pairwise(edges)]
    weights = [math.exp(v - max(logits)) for v in logits]
    return [w / sum(weights) for w in weights]


def start_sim(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, str]:
    link = str(tmp_path / "ttyEEMBC")
    proc = subprocess.Popen([sys.executable, str(SIM), "--pty-link", link, *args], stdout=subprocess.PIPE, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    assert ready and proc.stdout.readline().strip() == f"ready {link}", "the simulator did not start"
    return proc, link


@pytest.fixture
def sim(tmp_path):
    started = []

    def start(*args: str) -> str:
        folder = tmp_path / f"sim{len(started)}"  # each its own link: a test may start several
        folder.mkdir()
        proc, link = start_sim(folder, *args)
        started.append(proc)
        return link

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(10)


class Talk:
    """Commands over a pyserial port with the protocol module: a reply ends at its m-ready, and lines that came after
    it in the same read wait for the next command (where they are stale: read, never taken as its answer)."""

    def __init__(self, port):
        self.port, self.splitter, self.stale = port, proto.LineSplitter(), []

    def settle(self, quiet_s: float = 0.3) -> None:
        """Read until the device has been quiet `quiet_s`: a boot banner still on its way is not a reply."""
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < quiet_s:
            if self.splitter.feed(self.port.read(max(1, self.port.in_waiting))):
                quiet_since = time.monotonic()
        self.stale.clear()

    def exchange(self, cmd: bytes, timeout_s: float = 10.0) -> proto.Reply:
        reply, self.stale = proto.Reply(cmd.decode()), []
        self.port.write(cmd)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            lines = self.splitter.feed(self.port.read(max(1, self.port.in_waiting)))
            for i, line in enumerate(lines):
                if reply.feed(line):
                    self.stale = lines[i + 1 :]
                    return reply
        raise AssertionError(f"{cmd!r}: no m-ready; {reply.said()}")


def test_a_pty_device_loads_infers_and_is_timed_by_its_own_laps(sim):
    serial = pytest.importorskip("serial")
    link = sim("--us-per-inference", "200", "--model", "ic01", "--echo")
    data = os.urandom(1024)
    port = serial.serial_for_url(link, baudrate=115200, timeout=0.05)
    talk = Talk(port)
    try:
        talk.settle()
        assert talk.exchange(proto.cmd_name()).value("name") == ("dut", "edge_runtime eembc_sim")
        assert talk.exchange(proto.cmd_profile()).value("model") == "ic01"
        assert talk.exchange(proto.cmd_db_load(len(data))).value("expecting") == 1024
        acks = [talk.exchange(piece) for piece in proto.db_pieces(data)]
        assert [r.first("load-done") is not None for r in acks] == [False] * (len(acks) - 1) + [True]
        perf = proto.performance(talk.exchange(proto.cmd_infer(200, 10)))
        again = talk.exchange(proto.cmd_results()).value("results")
    finally:
        port.close()
    assert perf.inferences == 200 and perf.warmups == 10
    assert perf.inferences_per_s == pytest.approx(1e6 / 200, rel=0.02)
    assert list(perf.results) == pytest.approx(expected_results(data, 10), abs=5e-4)  # printed with %0.3f
    assert again == perf.results
