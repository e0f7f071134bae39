"""The eembc target against devices that lie (issue 27's hostile review): a small fake firmware on a real pty, in a
thread, that answers `name`, `profile`, `db` and `infer` as told, and each case's lie: NaN results, a timer that
stands still or runs backwards, a boot loop that never goes quiet, a name with control characters and markup, a
model MLPerf Tiny does not name; a cable pulled after a loop; a second user of the port; URL mistakes."""

from __future__ import annotations

import os
import threading
import time
import tty

import numpy as np
import pytest
from conftest import MODELS
from test_eembc_protocol import start_sim

from bench.targets.base import TargetError, TargetOptions
from bench.targets.eembc import EembcTarget
from edge_runtime.errors import UserError
from edge_runtime.measure.request import BenchRequest

pytest.importorskip("serial")
REQUEST = BenchRequest(model=str(MODELS / "resnet8" / "resnet8_int8.onnx"))


class Liar:
    """A fake firmware on a pty: `lie` picks what it says wrong."""

    def __init__(self, tmp_path, lie: str, name: str = "liar", model: str = "ic01"):
        self.master, slave = os.openpty()
        tty.setraw(slave)
        self.link = str(tmp_path / f"tty-{lie}")
        os.symlink(os.ttyname(slave), self.link)
        self.lie, self.name, self.model, self.stop = lie, name, model, threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def out(self, *lines: str) -> None:
        os.write(self.master, "".join(line + "\r\n" for line in lines).encode("latin-1"))

    def serve(self) -> None:
        pending, size = b"", 0
        while not self.stop.is_set():
            if self.lie == "bootloop":
                self.out("m-timestamp-mode-performance", "m-lap-us-1", "m-init-done", "m-ready")
                time.sleep(0.05)
            try:
                import select

                if not select.select([self.master], [], [], 0.05)[0]:
                    continue
                pending += os.read(self.master, 4096)
            except OSError:
                return
            while b"%" in pending:
                cmd, _, pending = pending.partition(b"%")
                size = self.answer(cmd.decode().split(), size)

    def answer(self, words: list[str], size: int) -> int:
        head = words[0] if words else ""
        if head == "name":
            self.out(f"m-name-dut-[{self.name}]")
        elif head == "profile":
            self.out("m-profile-[liar 1.0]", f"m-model-[{self.model}]")
        elif head == "db" and words[1] == "load":
            size = int(words[2])
            self.out(f"m-[Expecting {size} bytes]")
        elif head == "db" and self.lie == "resetload" and not getattr(self, "did_reset", False) and size < 3000:
            self.did_reset = True  # a boot in the middle of a load: what it held is gone, its banner's m-ready ends
            self.out("m-timestamp-mode-performance", "m-lap-us-1", "m-init-done", "m-ready")
            return 0
        elif head == "db":
            size -= len(words[1]) // 2
            if size <= 0:
                self.out("m-load-done")
        elif head == "infer":
            n = int(words[1])
            t0 = int(time.monotonic() * 1e6) % (1 << 32)
            time.sleep(min(n * 200e-6, 0.2))
            t1 = {"zerolap": t0, "backlap": t0 - 100}.get(self.lie, int(time.monotonic() * 1e6) % (1 << 32))
            results = "nan,nan,nan" if self.lie == "nan" else "0.1,0.7,0.2"
            self.out(f"m-warmup-start-{words[2]}", "m-warmup-done", f"m-infer-start-{n}", f"m-lap-us-{t0}",
                     f"m-lap-us-{t1}", "m-infer-done", f"m-results-[{results}]")  # fmt: skip
        self.out("m-ready")
        return size

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        os.close(self.master)


@pytest.fixture
def liar(tmp_path):
    made = []

    def make(lie: str, **kw) -> Liar:
        made.append(Liar(tmp_path, lie, **kw))
        return made[-1]

    yield make
    for one in made:
        one.close()


def bench(url: str, timeout: float = 3.0):
    t = EembcTarget(url, TargetOptions(connect_timeout=timeout))
    try:
        return t.bench(REQUEST)
    finally:
        t.close()


@pytest.mark.parametrize("lie, words", [
    ("zerolap", "its timer is wrong"),
    ("backlap", "its timer is wrong"),
])  # fmt: skip
def test_a_timer_that_stands_still_or_runs_back_is_refused(liar, lie, words):
    dev = liar(lie)
    with pytest.raises(TargetError) as err:
        bench(f"eembc://{dev.link}?loops=2&loop_s=0.05")
    assert words in str(err.value) and err.value.exit_code == 1 and "\n" not in str(err.value)


def test_nan_results_never_score(liar, tmp_path):
    dev = liar("nan")
    np.savez(tmp_path / "d.npz", x=np.zeros((3, 32, 32, 3), np.uint8), y=np.zeros(3, int))
    with pytest.raises(TargetError, match="not finite") as err:
        bench(f"eembc://{dev.link}?mode=accuracy&data={tmp_path / 'd.npz'}")
    assert err.value.exit_code == 1


def test_a_device_that_never_goes_quiet_is_one_line_in_bounded_time(liar):
    dev = liar("bootloop")
    t0 = time.monotonic()
    with pytest.raises(TargetError, match=r"never went quiet .* last line 'm-ready'"):
        EembcTarget(f"eembc://{dev.link}?timeout=1", TargetOptions()).connect()
    assert time.monotonic() - t0 < 10


def test_what_a_device_calls_itself_is_made_printable_and_any_model_runs_with_its_input_size(liar):
    dev = liar("none", name="<script>\x1b[31mRED\x07", model="mynet")
    t = EembcTarget(f"eembc://{dev.link}?loops=2&loop_s=0.05&input_bytes=100", TargetOptions(connect_timeout=3))
    try:
        row = t.describe()
        doc = t.bench(REQUEST).result
    finally:
        t.close()
    assert row["board"] == "?script??[31mRED? (dut)" and row["model"] == "mynet"
    assert doc["firmware"]["device"]["model"] == "mynet" and doc["throughput_ips"] > 0
    with pytest.raises(TargetError, match="give input_bytes=N"):
        bench(f"eembc://{dev.link}?loops=2&loop_s=0.05")


def test_a_cable_pulled_after_a_loop_keeps_the_loop(tmp_path):
    proc, link = start_sim(tmp_path, "--us-per-inference", "500")
    t = EembcTarget(f"eembc://{link}?loops=4&loop_s=0.3&timeout=1", TargetOptions())
    said = []

    def pull(text: str) -> None:
        said.append(text)
        if text.startswith("loop 1/"):
            proc.kill()  # kill -9: the device is gone mid-run

    try:
        doc = t.bench(REQUEST, progress=pull).result
    finally:
        t.close()
        proc.wait(10)
    assert len(doc["firmware"]["loops"]) == 1 and doc["aborted"]["partial"] is True
    assert doc["throughput_ips"] == pytest.approx(2000, rel=0.02)
    assert any(w.startswith("cut short after 1 loop(s)") for w in doc["quality"]["warnings"])


def test_a_second_user_of_the_port_is_told_it_is_in_use(tmp_path):
    proc, link = start_sim(tmp_path)
    first = EembcTarget(f"eembc://{link}", TargetOptions())
    try:
        first.connect()
        with pytest.raises(TargetError, match="in use by another process"):
            EembcTarget(f"eembc://{link}", TargetOptions()).connect()
    finally:
        first.close()
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("url, words", [
    ("eembc:///dev/ttyACM0?loop=1", "unknown option 'loop'"),
    ("eembc:///dev/ttyACM0?Mode=accuracy", "unknown option 'Mode'"),
    ("eembc:///dev/ttyACM0?loops=2&loops=3", "loops given twice"),
    ("eembc+socket://127.0.0.1", "expected eembc:///dev/DEVICE?baud=N or eembc+socket://HOST:PORT"),
    ("eembc:///dev/ttyACM0?baud=fast", "target 'eembc:///dev/ttyACM0?baud=fast': baud 'fast'"),
])  # fmt: skip
def test_url_mistakes_are_one_line(url, words):
    with pytest.raises(UserError) as err:
        EembcTarget.check_url(url)
    assert words in str(err.value) and "\n" not in str(err.value)
    EembcTarget.check_url("eembc+rfc2217://lab:2217?ign_set_control=1&loops=2")  # pyserial's own options pass


def test_dataset_labels_and_types_are_checked_against_the_model(liar, tmp_path):
    dev = liar("none")
    np.savez(tmp_path / "big.npz", x=np.zeros((2, 32, 32, 3), np.uint8), y=np.array([0, 10**15]))
    np.savez(tmp_path / "f32.npz", x=np.zeros((2, 768), np.float32), y=np.zeros(2, int))
    np.savez(tmp_path / "flat.npz", x=np.zeros(6, np.uint8), y=np.zeros(6, int))
    for name, words in (("big", "label 1000000000000000: the device's ic01 has 10 classes (0 to 9)"),
                        ("f32", "an input is 3072 bytes (768 float32); the device's ic01 reads 3072 (32x32x3 uint8)"),
                        ("flat", "x must hold one input a row")):  # fmt: skip
        with pytest.raises((UserError, TargetError)) as err:  # TargetError once the device said its model
            bench(f"eembc://{dev.link}?mode=accuracy&data={tmp_path / name}.npz")
        assert words in str(err.value) and err.value.exit_code == 2, str(err.value)


def test_after_a_run_left_behind_the_next_connect_finds_the_device(tmp_path):
    """A Ctrl-C leaves the device inside `infer`: its laps, results and m-ready come later, and the next user's
    `name` must not take them for its answer (it was an internal error)."""
    assert written_then_found(tmp_path, b"infer 1000 0%") == (True, "ic01")  # its answer read by nobody


def test_a_reset_in_the_middle_of_a_load_is_said_in_the_record(liar):
    dev = liar("resetload")
    got = bench(f"eembc://{dev.link}?loops=2&loop_s=0.05")
    fw = got.result["firmware"]
    assert fw["resets"] == 1 and fw["loads_fallen_back"] == 1, fw
    assert any("reset 1 time(s)" in w for w in got.warnings)


def written_then_found(tmp_path, data: bytes) -> tuple[bool, str]:
    """`data` written on the device's line by someone else, then the target connects: (the simulator still alive,
    the model the target found)."""
    proc, link = start_sim(tmp_path)
    try:
        fd = os.open(link, os.O_WRONLY | os.O_NOCTTY)
        os.write(fd, data)
        os.close(fd)
        time.sleep(0.3)
        alive = proc.poll() is None
        t = EembcTarget(f"eembc://{link}", TargetOptions())
        try:
            return alive, t.connect()["model"]
        finally:
            t.close()
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_stray_byte_in_the_firmware_buffer_is_not_an_unreachable_device(tmp_path):
    """`x` left on the line (a Ctrl-C mid-command, noise) makes the first `name` read `xname`: asked again."""
    assert written_then_found(tmp_path, b"x") == (True, "ic01")


def test_the_simulator_survives_bytes_that_are_not_ascii(tmp_path):
    assert written_then_found(tmp_path, b"\xff\xfe%") == (True, "ic01")
