"""The eembc target's I/O half (bench/targets/eembc.py, issue 27) against tests/servers/eembc_sim.py on a real pty,
reached by its `eembc://` URL through bench/transports (pyserial's serial_for_url): clean, then noisy (hex digits
lost, garbage and partial lines, an echo, a reset mid-loop), then a device that stops answering."""

from __future__ import annotations

import os

import pytest
from test_eembc_protocol import expected_results, start_sim

from bench.targets.base import TargetError, TargetOptions
from bench.targets.eembc import EembcDevice, EembcTarget, median_ips, serial_url
from edge_runtime.errors import UserError

pytest.importorskip("serial")


@pytest.fixture
def device(tmp_path):
    opened = []

    def start(*args: str, timeout_s: float = 10.0) -> EembcDevice:
        proc, link = start_sim(tmp_path, *args)
        opened.append(proc)
        dev = EembcDevice.open(f"eembc://{link}", timeout_s=timeout_s)
        opened.append(dev)
        return dev

    yield start
    for thing in reversed(opened):
        if isinstance(thing, EembcDevice):
            thing.close()
        else:
            thing.terminate()
            thing.wait(10)


@pytest.mark.parametrize("url, expected", [
    ("eembc:///dev/ttyACM0?baud=115200", "serial:///dev/ttyACM0?baud=115200"),
    ("eembc:///dev/ttyACM0", "serial:///dev/ttyACM0"),
    ("eembc+socket://10.0.0.5:4000", "socket://10.0.0.5:4000"),
    ("eembc+rfc2217://lab:2217?baud=9600", "rfc2217://lab:2217?baud=9600"),
])  # fmt: skip
def test_an_eembc_url_names_a_pyserial_url(url, expected):
    assert serial_url(url) == expected


@pytest.mark.parametrize("url", ["eembc:", "eembc://host/dev/x", "eembc+socket:///dev/x", "serial:///dev/x"])
def test_an_eembc_url_that_names_nothing_is_one_line(url):
    with pytest.raises(UserError, match="expected eembc:///dev/DEVICE"):
        serial_url(url)


def test_a_clean_device_is_named_loaded_and_timed(device):
    dev = device("--us-per-inference", "200", "--model", "kws01")
    assert dev.identify() == {"board": "edge_runtime eembc_sim (dut)", "model": "kws01",
                              "profile": "ULPMark for tinyML Firmware V0.0.1"}  # fmt: skip
    data = os.urandom(1024)
    loop = dev.loop(data, 200, 10, timeout_s=10.0)
    assert loop.resets == 0 and dev.pieces_resent == 0
    assert loop.perf.inferences_per_s == pytest.approx(1e6 / 200, rel=0.02)
    assert list(loop.perf.results) == pytest.approx(expected_results(data, 12), abs=5e-4)


def test_a_noisy_device_that_resets_mid_loop_gives_the_same_answer(device):
    dev = device("--us-per-inference", "200", "--model", "ic01", "--echo", "--drop-hex-every", "5",
                 "--garbage-every", "3", "--reset-after-infers", "1")  # fmt: skip
    assert dev.identify()["model"] == "ic01"
    data = os.urandom(1024)  # 34 pieces: 6 of them lose a digit on the way, on each of the two loads
    loop = dev.loop(data, 200, 10, timeout_s=10.0)
    assert loop.resets == 1 and dev.pieces_resent >= 6
    assert loop.perf.inferences_per_s == pytest.approx(1e6 / 200, rel=0.02)
    assert list(loop.perf.results) == pytest.approx(expected_results(data, 10), abs=5e-4)


def test_the_device_words_and_its_silence_are_one_line(device):
    dev = device("--us-per-inference", "100", "--hang-after-commands", "3", timeout_s=0.3)
    dev.identify()  # name, profile
    with pytest.raises(TargetError, match=r": dance: the device said 'Unknown command: dance'$") as err:
        dev.check(dev.ask(b"dance%"))
    assert err.value.kind == "refused"
    with pytest.raises(TargetError, match=r": db load 64: no m-ready in 0.3 s; last line 'm-ready'$") as err:
        dev.load(bytes(64))  # the fourth command: never answered
    assert err.value.kind == "timeout" and "\n" not in str(err.value)


def test_performance_mode_sizes_each_loop_by_the_device_timer(device):
    """A probe of 10 inferences sizes N for loops of at least min_loop_s by the device's laps (0.1 s here, MLPerf
    Tiny's rule is 10 s); one reset in the third loop costs one reload, and the loops stay whole."""
    dev = device("--us-per-inference", "1000", "--reset-after-infers", "3")
    dev.identify()
    loops = dev.performance(os.urandom(256), loops=3, min_loop_s=0.1, warmups=2)
    assert len(loops) == 3 and [lp.resets for lp in loops] == [0, 1, 0]
    assert all(lp.perf.elapsed_us >= 100_000 for lp in loops)
    assert {lp.perf.inferences for lp in loops} == {loops[0].perf.inferences}
    assert 100 <= loops[0].perf.inferences <= 115  # 0.1 s / 1 ms, 5% over, from the probe's own measure
    assert median_ips(loops) == pytest.approx(1000.0, rel=0.02)


def test_the_target_names_the_device_and_its_model(tmp_path):
    proc, link = start_sim(tmp_path, "--model", "vww01")
    target = EembcTarget(f"eembc://{link}?baud=115200", TargetOptions(connect_timeout=5.0))
    try:
        row = {"url": target.url, **target.describe()}
        text = EembcTarget.describe_text(row)
    finally:
        target.close()
        target.close()  # idempotent
        proc.terminate()
        proc.wait(10)
    assert (row["board"], row["model"], row["kind"]) == ("edge_runtime eembc_sim (dut)", "vww01", "eembc")
    assert text[0].endswith("reachable  (MLPerf Tiny firmware: ULPMark for tinyML Firmware V0.0.1)")
    assert "  model     vww01" in text and "power monitor" in text[-1]
    EembcTarget.check_url("eembc:///dev/ttyACM0?baud=115200")
    with pytest.raises(UserError, match="baud 'fast' is not a baud rate"):
        EembcTarget.check_url("eembc:///dev/ttyACM0?baud=fast")


def test_an_absent_device_is_one_line():
    with pytest.raises(TargetError) as err:
        EembcTarget("eembc:///dev/eembc-nothing-here").connect()
    assert str(err.value).startswith("eembc:///dev/eembc-nothing-here: ") and "\n" not in str(err.value)
    assert err.value.kind == "unreachable"


@pytest.mark.parametrize("scheme, accepter", [
    ("eembc+rfc2217", "telnet(rfc2217,mode=server),tcp"),
    ("eembc+socket", "tcp"),
])  # fmt: skip
def test_a_device_on_a_remote_serial_server(tmp_path, scheme, accepter):
    """The simulator's pty exported by ser2net on 127.0.0.1 (as a lab's serial server exports a board's UART), reached
    by `eembc+rfc2217://` (pyserial's RFC 2217 client: it takes no write timeout, and `ign_set_control` because a
    pty acknowledges no modem control) and `eembc+socket://` (raw TCP)."""
    import shutil
    import socket
    import subprocess
    import time

    from bench.targets.eembc import EembcTarget
    from edge_runtime.measure.request import BenchRequest

    if not shutil.which("ser2net"):
        pytest.skip("ser2net is not installed (make test installs it as root with apt: make sys-tools)")
    proc, link = start_sim(tmp_path, "--us-per-inference", "500")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pty = os.path.realpath(link)
    server = subprocess.Popen(["ser2net", "-d", "-n", "-Y", f"connection: &c#  accepter: {accepter},127.0.0.1,{port}",
                               "-Y", f"  connector: serialdev(nouucplock=true),{pty},115200n81,local"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        extra = "?ign_set_control&" if scheme == "eembc+rfc2217" else "?"
        t = EembcTarget(f"{scheme}://127.0.0.1:{port}{extra}loops=2&loop_s=0.1", TargetOptions(connect_timeout=5.0))
        try:
            doc = t.bench(BenchRequest(model="ic01")).result
        finally:
            t.close()
        assert doc["throughput_ips"] == pytest.approx(2000.0, rel=0.02) and doc["firmware"]["device"]["model"] == "ic01"
    finally:
        server.terminate()
        server.wait(10)
        proc.terminate()
        proc.wait(10)
