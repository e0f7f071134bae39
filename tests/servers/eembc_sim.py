"""A microcontroller that follows the MLPerf Tiny runner's UART protocol on a pty, for the eembc target's tests
(issue 27).

    python tests/servers/eembc_sim.py --pty-link PATH --us-per-inference U --model ic01 [--drop-hex-every K]
                                      [--garbage-every K] [--reset-after-infers K] [--hang-after-commands K]
                                      [--echo] [--seed S] [--baud N]

It opens a pty, makes PATH a symlink to its slave (a test opens PATH with pyserial, as it would /dev/ttyACM0), prints
one line `ready PATH` on stdout, then the boot banner on the pty, and answers on the master as
mlcommons/tiny's benchmark/api/internally_implemented.cpp does: `name`, `profile`, `db load N`, `db HH..`, `db print`,
`infer N W`, `results`, `timestamp`, anything else `e-[Unknown command: X]`; every reply ends with `m-ready`. `infer`
busy-waits U µs per inference against absolute deadlines (a pause of this process is caught up, not added) and prints
its laps from the monotonic clock in µs. Results come from the loaded bytes (`results_for`): the bytes cut into one
slice per class, each slice's mean byte / 255 times 8 as a logit, their softmax (ad01: one score, the mean byte / 255);
printed with `%0.3f` as reference firmware does.

What goes wrong, on request:
- `--drop-hex-every K`: the K-th, 2K-th, ... `db HH..` command loses one hex digit on the way in (the firmware then
  answers `e-[Insufficent number of hex digits]`, in its spelling, and keeps nothing of that piece);
- `--garbage-every K`: after the reply to every K-th command, a line of garbage bytes and a partial one completed later;
- `--reset-after-infers K`: the K-th `infer` stops half way through its loop and the device boots again (banner, its
  buffer lost), once;
- `--hang-after-commands K`: after K commands it reads everything and answers nothing;
- `--echo`: every byte received is sent back at once, as a terminal-minded firmware does.

`--baud N` makes the pty a UART at N baud (10 bits a byte: start, 8 data, stop), in both directions. The host writes
into the pty at memory speed; here each byte read "arrives" 10/N s after the previous byte's arrival (or after it was
read, when the line was idle), and is handled only then; what the device prints goes out at the same rate, each byte
at its own deadline on an absolute schedule (written as soon as it is due: a late wake-up sends what is due at once,
so the pacing does not drift). A command is handled at its `%`'s arrival, in line time, so what the device does no
longer depends on when this process happens to run (`infer`'s busy wait aside: it takes real time).

With `--baud`, the receive side is reference firmware's, not a queue of commands (internally_implemented.cpp:
ee_serial_callback and the main loop): there is one command buffer (EE_CMD_SIZE, 80 characters, the write position
stuck at the last one when more come). A `%` ends the command, enables the parser and puts the write position back at
0; from then until the command's whole reply, its `m-ready` included, has gone out on the line, the parser is busy:
characters that arrive meanwhile are still written into the buffer from position 0 (over the command being handled:
they are the start of the next one), and a `%` that arrives then is ignored: that command is lost, and its characters
stay at the front of the next one. This is what makes sending ahead of the replies dangerous on real firmware.
Each ignored `%` is said on stderr as it happens, and the count (`lost N`) when the simulator ends (SIGTERM).
It asks for SCHED_FIFO (`realtime`), as a device's core is its own. SIGTERM ends it and removes the link."""

from __future__ import annotations

import argparse
import collections
import itertools
import math
import os
import random
import select
import signal
import sys
import time
import tty

CLASSES = {"ic01": 10, "kws01": 12, "vww01": 2, "ad01": 1}
EE_CMD_SIZE = 80  # internally_implemented.h: the one command buffer's size
PERCENT = ord("%")
FW_VERSION = "ULPMark for tinyML Firmware V0.0.1"  # internally_implemented.h: EE_FW_VERSION


def results_for(data: bytes, model: str) -> list[float]:
    """The result vector the device computes from its loaded bytes (see the module's docstring)."""
    if not data:
        return [0.0] * CLASSES[model]
    if model == "ad01":
        return [sum(data) / (255 * len(data))]
    k = CLASSES[model]
    bounds = [i * len(data) // k for i in range(k + 1)]
    logits = [8 * sum(data[a:b]) / (255 * max(1, b - a)) for a, b in itertools.pairwise(bounds)]
    top = max(logits)
    exps = [math.exp(v - top) for v in logits]
    return [e / sum(exps) for e in exps]


class Device:
    def __init__(self, fd: int, args: argparse.Namespace):
        self.fd, self.args = fd, args
        self.rng = random.Random(args.seed)
        self.buf, self.size, self.pos = bytearray(), 0, 0
        self.commands = self.infers = self.hex_pieces = 0
        self.reset_done = False
        self.last_results: list[float] = []
        self.partial = b""  # the garbage line left unfinished, completed before the next one
        self.paced: Line | None = None  # --baud: what is printed waits for the line
        self.cmd, self.cmd_pos, self.busy_until, self.lost = bytearray(EE_CMD_SIZE + 1), 0, 0.0, 0
        self.replied_at = 0.0  # when the last m-ready printed has gone out on a paced line

    def out(self, text: str) -> None:
        self.send(text.encode("latin-1", "replace"))

    def send(self, data: bytes) -> None:
        if self.paced is not None:
            self.paced.send(data)
            return
        while data:
            n = os.write(self.fd, data)
            data = data[n:]

    def receive(self, c: int, at: float) -> None:
        """One character off a paced line, at its arrival time: ee_serial_callback's one buffer (the docstring)."""
        if c != PERCENT:
            self.cmd[self.cmd_pos] = c
            self.cmd_pos = min(self.cmd_pos + 1, EE_CMD_SIZE)
            return
        if at < self.busy_until:
            self.lost += 1  # the parser is still answering: this `%` is never seen
            print(f"ignored a % {(self.busy_until - at) * 1e6:.0f} us before the parser was free "
                  f"(late {(time.monotonic() - at) * 1e6:.0f} us)", file=sys.stderr, flush=True)  # fmt: skip
            return
        text, self.cmd_pos = bytes(self.cmd[: self.cmd_pos]), 0
        if self.args.hang_after_commands and self.commands >= self.args.hang_after_commands:
            return  # a device that stopped answering still reads its UART
        self.paced.now = at  # the reply starts when the `%` came, however late this process runs
        self.command(text.decode("ascii", "replace").strip("\r\n\0"))
        self.busy_until = self.replied_at  # its m-ready's last bit on the line: the parser is free again

    def line(self, text: str) -> None:
        self.out(text + "\r\n")
        if text == "m-ready" and self.paced is not None:
            self.replied_at = self.paced.end

    def spin(self, until_ns: int) -> None:
        busy(until_ns)
        if self.paced is not None:
            self.paced.now = time.monotonic()  # what follows is printed after the wait, in real time

    def boot(self) -> None:
        """The banner: th_timestamp_initialize says the mode, a lap, then ee_benchmark_initialize's two lines."""
        self.buf, self.size, self.pos, self.last_results = bytearray(), 0, 0, []
        self.cmd_pos = 0
        self.line("m-timestamp-mode-performance")
        self.line(f"m-lap-us-{time.monotonic_ns() // 1000 % (1 << 32)}")
        self.line("m-init-done")
        self.line("m-ready")

    def garbage(self) -> None:
        junk = bytes(self.rng.choice(b"#~!?*^_=+xyzQWE\x01\x7f\xfe\xff ") for _ in range(self.rng.randint(3, 30)))
        self.send(self.partial + junk + b"\r\n")
        self.partial = b"\xff~~partial"  # a line cut here, its end sent with the next garbage
        self.send(self.partial)

    def command(self, text: str) -> None:
        self.commands += 1
        tokens = text.split()  # strtok(" "): runs of spaces are one delimiter
        head = tokens[0] if tokens else ""
        handled = True
        if head == "name":
            self.line("m-name-dut-[edge_runtime eembc_sim]")
        elif head == "timestamp":
            self.line(f"m-lap-us-{time.monotonic_ns() // 1000 % (1 << 32)}")
        elif head == "profile":
            self.line(f"m-profile-[{FW_VERSION}]")
            self.line(f"m-model-[{self.args.model}]")
        elif head == "db":
            self.db(tokens[1:])
        elif head == "infer":
            handled = self.infer(tokens[1:])
        elif head == "results":
            self.results()
        else:
            self.line(f"e-[Unknown command: {head}]")
        if handled:
            self.line("m-ready")
        if self.args.garbage_every and self.commands % self.args.garbage_every == 0:
            self.garbage()

    def db(self, rest: list[str]) -> None:
        if not rest:
            self.line("e-[Command 'db' requires a subcommand]")
        elif rest[0] == "load":
            n = int(rest[1]) if len(rest) > 1 and rest[1].isdigit() else 0
            if len(rest) < 2:
                self.line("e-[Command 'db load' requires the # of bytes]")
            elif n == 0:
                self.line("e-[Command 'db load' must be >0 bytes]")
            else:
                self.buf, self.size, self.pos = bytearray(n), n, 0
                self.line(f"m-[Expecting {n} bytes]")
        elif rest[0] == "print":
            for i in range(0, self.size, 8):
                self.line("m-buffer-" + "-".join(f"{b:02x}" for b in self.buf[i : i + 8]))
        else:
            self.hex_piece(rest[0])

    def hex_piece(self, digits: str) -> None:
        self.hex_pieces += 1
        k = self.args.drop_hex_every
        if k and self.hex_pieces % k == 0:
            digits = digits[: len(digits) // 2] + digits[len(digits) // 2 + 1 :]  # one byte lost on the line
        if len(digits) % 2:
            self.line("e-[Insufficent number of hex digits]")
            return
        for i in range(0, len(digits), 2):
            try:
                value = int(digits[i : i + 2], 16)
            except ValueError:
                self.line(f"e-[Invalid hex digit '{digits[i : i + 2]}']")
                return
            if self.pos >= self.size:
                return
            self.buf[self.pos] = value
            self.pos += 1
            if self.pos == self.size:
                self.line("m-load-done")
                return  # the rest of the digits is disregarded, as the firmware does

    def infer(self, rest: list[str]) -> bool:
        """ee_infer; False when the device reset half way (the banner's m-ready ends the reply instead)."""
        n = int(rest[0]) if rest and rest[0].lstrip("-").isdigit() else 1
        w = int(rest[1]) if len(rest) > 1 and rest[1].lstrip("-").isdigit() else 10
        if n <= 0:
            self.line("e-[Inference iterations must be >0]")
            return True
        if w < 0:
            self.line("e-[Inference warmup must be >=0]")
            return True
        self.infers += 1
        us = self.args.us_per_inference
        self.line(f"m-warmup-start-{w}")
        self.spin(time.monotonic_ns() + w * us * 1000)
        self.line("m-warmup-done")
        self.line(f"m-infer-start-{n}")
        start = time.monotonic_ns()
        self.line(f"m-lap-us-{start // 1000 % (1 << 32)}")
        if self.args.reset_after_infers == self.infers and not self.reset_done:
            self.spin(start + n // 2 * us * 1000)
            self.reset_done = True
            self.boot()
            return False
        self.spin(start + n * us * 1000)
        self.line(f"m-lap-us-{time.monotonic_ns() // 1000 % (1 << 32)}")
        self.line("m-infer-done")
        self.last_results = results_for(bytes(self.buf[: self.pos]), self.args.model)
        self.results()
        return True

    def results(self) -> None:
        self.line("m-results-[" + ",".join(f"{v:0.3f}" for v in self.last_results) + "]")


def busy(until_ns: int) -> None:
    """Spin to an absolute deadline, as th_infer keeps a core busy (no sleep: a sleep's wake-up is late)."""
    while time.monotonic_ns() < until_ns:
        pass


def realtime() -> None:
    """SCHED_FIFO where allowed (root, CAP_SYS_NICE): a microcontroller's core is its own, and on a loaded host the
    scheduler's pauses would otherwise land between the laps. Without the right, it runs as it is (a test then bounds
    rates by ratio and may see the host's pauses)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (OSError, AttributeError):
        pass


class Line:
    """A UART at `baud` between the pty and the device (see --baud): bytes read get arrival times 10/baud s apart;
    bytes printed get deadlines on the same schedule, written once due."""

    def __init__(self, fd: int, baud: int):
        self.fd, self.byte_s = fd, 10.0 / baud
        self.rx: collections.deque[tuple[float, int]] = collections.deque()  # (arrival, byte), not arrived yet
        self.rx_last = 0.0  # the arrival of the last byte read
        self.tx: collections.deque[tuple[float, int]] = collections.deque()  # (deadline, byte), not written yet
        self.end = 0.0  # when the last byte printed has gone out
        self.now = 0.0  # the device's time as it prints (set by the device: a `%`'s arrival, or after a wait)

    def read(self, data: bytes, now: float) -> None:
        for c in data:
            self.rx_last = max(now, self.rx_last) + self.byte_s  # a byte takes its 10 bits on the line
            self.rx.append((self.rx_last, c))

    def send(self, data: bytes) -> None:
        t = max(self.now, self.end)
        for c in data:
            t += self.byte_s
            self.tx.append((t, c))
        self.end = t

    def arrived(self, now: float) -> list[tuple[float, int]]:
        got = []
        while self.rx and self.rx[0][0] <= now:
            got.append(self.rx.popleft())
        return got

    def flush(self, now: float) -> None:
        due = bytearray()
        while self.tx and self.tx[0][0] <= now:
            due.append(self.tx.popleft()[1])
        while due:
            n = os.write(self.fd, due)
            del due[:n]

    def next_event(self) -> float | None:
        times = [q[0][0] for q in (self.rx, self.tx) if q]
        return min(times) if times else None


def serve_paced(dev: Device, line: Line) -> None:
    """The device behind a paced line: each byte handled at its arrival, each byte printed at its deadline."""
    dev.paced = line
    while True:
        now = time.monotonic()
        for at, c in line.arrived(now):
            if dev.args.echo:
                line.now = at
                dev.send(bytes([c]))
            dev.receive(c, at)
        now = time.monotonic()
        line.flush(now)
        nxt = line.next_event()
        data = read_some(dev.fd, 1.0 if nxt is None else max(0.0, nxt - now))
        if data:
            line.read(data, time.monotonic())


def read_some(fd: int, timeout_s: float) -> bytes:
    """What the host wrote, waiting up to `timeout_s`; b"" for nothing (or no process holding the slave now: it may
    open it again)."""
    if not select.select([fd], [], [], timeout_s)[0]:
        return b""
    try:
        return os.read(fd, 4096)
    except OSError:  # EIO
        time.sleep(0.01)
        return b""


def serve(dev: Device, hang_after: int) -> None:
    pending = b""
    while True:
        data = read_some(dev.fd, 1.0)
        if not data:
            continue
        if dev.args.echo:
            os.write(dev.fd, data)
        pending += data
        while b"%" in pending:
            text, _, pending = pending.partition(b"%")
            if hang_after and dev.commands >= hang_after:
                continue  # a device that stopped answering still reads its UART
            dev.command(text.decode("ascii", "replace").strip("\r\n\0"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pty-link", required=True)
    p.add_argument("--us-per-inference", type=int, default=1000)
    p.add_argument("--model", choices=sorted(CLASSES), default="ic01")
    p.add_argument("--drop-hex-every", type=int, default=0)
    p.add_argument("--garbage-every", type=int, default=0)
    p.add_argument("--reset-after-infers", type=int, default=0)
    p.add_argument("--hang-after-commands", type=int, default=0)
    p.add_argument("--echo", action="store_true")
    p.add_argument("--seed", type=int, default=27)
    p.add_argument("--baud", type=int, default=0)
    args = p.parse_args(argv)
    master, slave = os.openpty()
    tty.setraw(slave)  # no echo, no newline translation: the bytes on the line are the device's own
    tmp = args.pty_link + ".tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(os.ttyname(slave), tmp)
    os.replace(tmp, args.pty_link)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    realtime()
    dev = Device(master, args)
    try:
        print(f"ready {args.pty_link}", flush=True)
        if args.baud:
            dev.paced = Line(master, args.baud)
            dev.paced.now = time.monotonic()
        dev.boot()
        if args.baud:
            serve_paced(dev, dev.paced)
        else:
            serve(dev, args.hang_after_commands)
    finally:
        if args.baud:
            print(f"lost {dev.lost}", file=sys.stderr, flush=True)
        if os.path.islink(args.pty_link):
            os.unlink(args.pty_link)
    return 0


if __name__ == "__main__":
    sys.exit(main())
