"""Loading an input into MLPerf Tiny firmware (bench/targets/eembc.py, issue 27): the pipelined loader (two `db`
pieces in flight) against tests/servers/eembc_sim.py paced as a UART (`--baud`), whose receive side is reference
firmware's one command buffer; a command lost there is counted by the simulator (`lost N` on its stderr at the end).
The bytes the device holds are checked with `db print`; timings are bounded by ratios to the line's own time."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from test_eembc_protocol import SIM, expected_results

from bench.targets import eembc_protocol as proto
from bench.targets.base import TargetError
from bench.targets.eembc import EembcDevice

pytest.importorskip("serial")

FAST = "1000000"  # 10 µs a character: the protocol as reference firmware sees it, in a test's time


class Sim:
    """The simulator with its stderr kept: `lost()` ends it and says how many commands its one buffer lost."""

    def __init__(self, tmp_path, *args: str):
        self.link = str(tmp_path / "ttyEEMBC")
        self.proc = subprocess.Popen([sys.executable, str(SIM), "--pty-link", self.link, *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        assert self.proc.stdout.readline().strip() == f"ready {self.link}", "the simulator did not start"

    def lost(self) -> int:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=10)
        return int(err.split("lost ")[-1])


@pytest.fixture
def sim(tmp_path):
    made = []

    def start(*args: str, timeout_s: float = 2.0) -> tuple[Sim, EembcDevice]:
        s = Sim(tmp_path, *args)
        dev = EembcDevice.open(f"eembc://{s.link}", timeout_s=timeout_s)
        made.append((s, dev))
        dev.sync()
        return s, dev

    yield start
    for s, dev in made:
        dev.close()
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait(10)


def held(dev: EembcDevice) -> bytes:
    """The bytes the device holds, as `db print` shows them."""
    reply = dev.check(dev.ask(b"db print%", 10.0))
    return bytes.fromhex("".join(m.value[len("buffer-") :].replace("-", "") for m in reply.messages
                                 if m.kind == "message" and str(m.value).startswith("buffer-")))  # fmt: skip


def test_pipelined_loads_exactly_against_the_one_buffer_firmware(sim):
    s, dev = sim("--baud", FAST)
    data = os.urandom(4000)  # 130 pieces, the last one byte: `db XX%` is shorter than the m-ready before it
    dev.load(data)
    assert (dev.loads_fallen_back, dev.pieces_resent) == (0, 0), (dev.refused, s.lost())
    assert held(dev) == data
    perf = dev.infer(1, 0, 5.0)
    assert list(perf.results) == pytest.approx(expected_results(data, 10), abs=5e-4)
    assert s.lost() == 0


def test_digits_lost_on_the_line_fall_back_and_still_load_exactly(sim):
    s, dev = sim("--baud", FAST, "--drop-hex-every", "10", "--garbage-every", "7")
    data = os.urandom(3000)  # 97 pieces
    dev.load(data)
    assert dev.loads_fallen_back == 1 and dev.pieces_resent >= 8 and "hex digits" in dev.refused
    assert held(dev) == data
    dev.load(data[::-1])  # the next load pipelines again (and falls back again: the line is as noisy)
    assert dev.loads_fallen_back == 2 and held(dev) == data[::-1]
    assert s.lost() == 0  # the careful load sends nothing ahead; the pipelined try stopped at the first refusal


def test_a_device_that_goes_quiet_mid_load_is_one_line_naming_its_last_line(sim):
    _, dev = sim("--baud", FAST, "--hang-after-commands", "30", timeout_s=0.3)
    t0 = time.monotonic()
    with pytest.raises(TargetError, match=r": db: the device went quiet mid-load \(no m-ready in 0.3 s; "
                                          r"last line 'm-ready'\)$") as err:  # fmt: skip
        dev.load(os.urandom(3000))
    assert err.value.kind == "timeout" and "\n" not in str(err.value)
    assert time.monotonic() - t0 < 5  # the ack's timeout, a quiet drain, the name's timeout: every wait bounded


def test_the_one_buffer_model_bites_a_command_sent_behind_a_longer_reply(sim):
    """A `%` that arrives while the parser still prints a reply is ignored: `name` sent behind `db print` (272
    characters of reply) is never answered, and its letters start the next command."""
    s, dev = sim("--baud", FAST)
    dev.load(bytes(range(64)))
    dev.stream.write(b"db print%name%")
    lines, deadline = [], time.monotonic() + 1.0  # more than enough for both replies, were there two
    while time.monotonic() < deadline:
        lines += dev.splitter.feed(dev.stream.read(0.05))
    assert lines[0] == "m-buffer-00-01-02-03-04-05-06-07" and lines.count("m-ready") == 1, lines
    assert dev.ask(proto.cmd_profile()).errors == ["Unknown command: nameprofile"]
    assert s.lost() == 1


def test_an_echoing_firmware_loses_a_piece_and_the_loader_still_loads_exactly(sim):
    """A firmware that echoes falls behind on its replies (75 characters out per 66 in), so a piece's `%` lands
    while it still prints: the pipelined try waits its timeout, the load falls back and ends right."""
    s, dev = sim("--baud", "100000", "--echo", timeout_s=0.5)
    data = os.urandom(2000)
    dev.load(data)
    assert dev.loads_fallen_back == 1 and "no m-ready" in dev.refused
    assert held(dev) == data
    assert s.lost() >= 1


def test_a_window_of_three_loses_nothing_either(sim):
    """The rule is a reply shorter than the piece behind it, not the window: 3 in flight loses no command."""
    s, dev = sim("--baud", FAST)
    dev.load_window = 3
    data = os.urandom(3000)
    dev.load(data)
    assert held(dev) == data and dev.loads_fallen_back == 0
    assert s.lost() == 0


def test_the_paced_line_takes_the_line_time(sim):
    """At 100,000 baud 2,000 bytes are 0.4 s of hex digits on the line: no load is quicker than that."""
    _, dev = sim("--baud", "100000")
    data = os.urandom(2000)
    line_s = len(data) * 2 * 10 / 100_000
    t0 = time.monotonic()
    dev.load(data)
    ratio = (time.monotonic() - t0) / line_s
    assert 1.0 <= ratio < 5.0, ratio
    assert dev.loads_fallen_back == 0
