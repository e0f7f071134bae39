"""The MLPerf Tiny (EEMBC runner) UART protocol, sans-I/O: bytes in, lines out; lines in, typed messages out; the
commands as bytes; one command's reply collected up to its `m-ready`; inferences per second from two lap times.

The device side is mlcommons/tiny's benchmark/api/internally_implemented.cpp (and a submitter's th_* functions): a
command ends with `%`, every reply ends with `m-ready`, an unknown command gets `e-[Unknown command: X]`, and a boot
prints `m-timestamp-mode-performance`, `m-lap-us-N`, `m-init-done`, `m-ready`. The host side it mirrors is the
runner's device_under_test.py (31 bytes per `db` piece) and serial_device.py (lines split on `\\n`, `\\r` and NUL
dropped).

Never: open a port, read a clock or sleep here; eembc.py owns the port and the deadlines."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

READY = "m-ready"
TERMINATOR = b"%"
MODELS = ("ic01", "kws01", "vww01", "ad01")  # internally_implemented.h: EE_MODEL_VERSION_*
# device_under_test.py: `_max_bytes = 26 if power_manager else 31`: 31 bytes are 62 hex digits, `db ` and `%` make
# 66 characters, inside the firmware's 80-character command buffer (EE_CMD_SIZE) with room for a submitter's smaller one
CHUNK_BYTES = 31
LAP_WRAP_US = 1 << 32  # `m-lap-us-%lu` from a 32-bit MCU's microsecond counter wraps after 71.6 minutes
MAX_LINE = 1 << 16  # a line longer than any result vector is noise: cut, so a device spewing bytes cannot grow memory


class ProtocolError(ValueError):
    """A reply that does not say what the command asks for (one line, the device's words or its last line in it)."""


# ----------------------------------------------------------------------------------------------- bytes -> lines
class LineSplitter:
    """Bytes from the port -> whole lines, as serial_device.py's reader splits them: on `\\n`, with `\\r` and NUL
    dropped, so `\\r\\n` and `\\n` both end a line; a line arrives in any number of pieces."""

    def __init__(self, max_line: int = MAX_LINE):
        self._buf = bytearray()
        self._max = max_line
        self.cut = 0  # lines cut at max_line (noise)

    def feed(self, data: bytes) -> list[str]:
        self._buf += data.replace(b"\r", b"").replace(b"\0", b"")
        *lines, rest = self._buf.split(b"\n")
        self._buf = bytearray(rest)
        if len(self._buf) > self._max:
            self._buf.clear()
            self.cut += 1
        return [line.decode("ascii", "replace") for line in lines]

    def pending(self) -> str:
        """What came after the last whole line (a partial line), as text; kept for the next feed."""
        return self._buf.decode("ascii", "replace")

    def clear(self) -> None:
        self._buf.clear()


# ----------------------------------------------------------------------------------------------- line -> message
@dataclass(frozen=True)
class Message:
    """One device line read: `kind` (the message's name: "lap", "ready", "results", "error", ...) and its value."""

    kind: str
    value: object = None
    line: str = ""


# Where a message starts in a line: the leftmost start of a message the protocol has, wherever it is, so an echo of our
# own command or garbage glued in front ("infer 10 1%m-warmup-start-1", "\xff~~partialm-ready") is skipped; else any
# `m-` or `e-` not glued to a word (a submitter's own m- lines), so "m-name-dut" stays one message.
_KNOWN = re.compile(r"m-(?:ready|init-done|load-done|warmup-|infer-|lap-us-|timestamp-mode-|name-|profile-\[|model-\[|"
                    r"results-\[|\[)|e-\[")  # fmt: skip
_START = re.compile(r"(?<![A-Za-z0-9])[me]-")
_NUMBER = {"lap-us": "lap", "warmup-start": "warmup-start", "infer-start": "infer-start"}
_BARE = {"init-done", "ready", "load-done", "warmup-done", "infer-done"}


def parse_line(line: str) -> Message | None:
    """A device line as a Message, or None for a line that holds none (an echo, garbage, a blank)."""
    m = _KNOWN.search(line) or _START.search(line)
    if not m:
        return None
    text = line[m.start() :].strip()
    if text.startswith("e-"):
        return _error(text)
    body = text[2:]
    if body in _BARE:
        return Message(body, None, text)
    if body.startswith("timestamp-mode-"):
        return Message("timestamp-mode", body[len("timestamp-mode-") :], text)
    for prefix, kind in _NUMBER.items():
        if body.startswith(prefix + "-"):
            digits = body[len(prefix) + 1 :]
            return Message(kind, int(digits), text) if digits.isdigit() else Message("garbled", text, text)
    bracket = re.fullmatch(r"(name-[^\[]*|profile|model|results|)-?\[(.*)\]", body)
    if bracket:
        return _bracketed(bracket.group(1), bracket.group(2), text)
    return Message("message", body, text)  # another m- line (m-buffer-..., a submitter's own): said, not understood


def _error(text: str) -> Message:
    words = text[3:-1] if text.startswith("e-[") and text.endswith("]") else text[2:]
    unknown = re.fullmatch(r"Unknown command:? '?(.*?)'?", words)
    if unknown:
        return Message("unknown-command", unknown.group(1), text)
    return Message("error", words, text)


def _bracketed(head: str, inside: str, text: str) -> Message:
    if head == "":  # m-[Expecting N bytes]
        n = re.fullmatch(r"Expecting (\d+) bytes", inside)
        return Message("expecting", int(n.group(1)), text) if n else Message("message", inside, text)
    if head == "results":
        try:
            return Message("results", tuple(float(v) for v in inside.split(",") if v.strip()), text)
        except ValueError:
            return Message("garbled", text, text)
    if head.startswith("name-"):  # EE_MSG_NAME "m-name-%s-[%s]": the device's role ("dut") and its vendor's name
        return Message("name", (head[len("name-") :].strip("-[]"), inside), text)
    return Message(head, inside, text)


# ----------------------------------------------------------------------------------------------- commands -> bytes
def command(text: str) -> bytes:
    """One command line as the device reads it (ee_serial_callback: everything up to `%`)."""
    if "%" in text or not text.isascii() or not text.strip():
        raise ValueError(f"not a command: {text!r}")
    return text.encode("ascii") + TERMINATOR


def cmd_name() -> bytes:
    return command("name")


def cmd_profile() -> bytes:
    return command("profile")


def cmd_results() -> bytes:
    return command("results")


def cmd_db_load(n: int) -> bytes:
    if n <= 0:
        raise ValueError(f"db load: {n} bytes (the device refuses 0: 'db load' must be >0 bytes)")
    return command(f"db load {n}")


def db_pieces(data: bytes, chunk: int = CHUNK_BYTES) -> list[bytes]:
    """`data` as the `db HH..%` commands that load it, `chunk` bytes each (the runner's 31)."""
    if chunk <= 0:
        raise ValueError(f"chunk: {chunk}")
    return [command("db " + data[i : i + chunk].hex()) for i in range(0, len(data), chunk)]


def cmd_infer(n: int, warmups: int) -> bytes:
    """`infer N W`, W always given: the firmware's default is 10 warm-ups (device_under_test.py says the same)."""
    if n <= 0 or warmups < 0:
        raise ValueError(f"infer {n} {warmups}: N > 0 inferences and W >= 0 warm-ups")
    return command(f"infer {n} {warmups}")


# ----------------------------------------------------------------------------------------------- lines -> reply
@dataclass
class Reply:
    """What the device said to one command, up to its `m-ready`: the messages in order, its errors (the words inside
    `e-[...]`), and whether it reset on the way (a new `m-init-done`: the `m-ready` that ends the reply is then the
    boot's, and the command's own answer never came)."""

    command: str
    messages: list[Message] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    noise: list[str] = field(default_factory=list)  # lines that held no message (echo, garbage)
    reset: bool = False
    done: bool = False
    last_line: str = ""  # the last non-blank line the device sent (for a timeout's one-line error)

    def feed(self, line: str) -> bool:
        """Take one line; True once the reply is complete (its `m-ready`)."""
        if line.strip():
            self.last_line = line.strip()
        msg = parse_line(line)
        if msg is None:
            if line.strip():
                self.noise.append(line)
            return False
        if msg.kind == "init-done":
            self.reset = True
            self.messages.clear()  # what came before the reset answered nothing that still holds
            self.errors.clear()
        elif msg.kind in ("error", "unknown-command"):
            self.errors.append(msg.value if msg.kind == "error" else f"Unknown command: {msg.value}")
        if msg.kind == "ready":
            self.done = True
        else:
            self.messages.append(msg)
        return self.done

    def first(self, kind: str) -> Message | None:
        return next((m for m in self.messages if m.kind == kind), None)

    def all(self, kind: str) -> list:
        return [m.value for m in self.messages if m.kind == kind]

    def value(self, kind: str) -> object:
        """The value of the reply's first `kind` message; ProtocolError naming the command and what came instead."""
        msg = self.first(kind)
        if msg is None:
            raise ProtocolError(f"{self.command}: {self.said()}, no m-{kind}")
        return msg.value

    def said(self) -> str:
        """The reply in a few words for an error: the device's own error words, a reset, or its last line."""
        if self.errors:
            return "the device said " + "; ".join(repr(e) for e in self.errors)
        if self.reset:
            return "the device reset (m-init-done)"
        return f"last line {self.last_line!r}" if self.last_line else "nothing"


# ----------------------------------------------------------------------------------------------- reply -> figures
@dataclass(frozen=True)
class Performance:
    """One `infer N W` loop as the device timed it: N inferences between its two laps."""

    inferences: int
    warmups: int
    t0_us: int
    t1_us: int
    results: tuple[float, ...]

    @property
    def elapsed_us(self) -> int:
        return (self.t1_us - self.t0_us) % LAP_WRAP_US  # one wrap of a 32-bit counter is undone; two cannot be seen

    @property
    def inferences_per_s(self) -> float:
        return self.inferences / (self.elapsed_us / 1e6) if self.elapsed_us else float("inf")

    @property
    def latency_us(self) -> float:
        """The mean per inference: the device times the loop, not each inference (no distribution to report)."""
        return self.elapsed_us / self.inferences


def performance(reply: Reply) -> Performance:
    """An `infer N W` reply read: its two laps, N, W and its results; ProtocolError (the device's words, a reset, or
    its last line) when it is not a whole one."""
    if reply.errors or reply.reset or not reply.done:
        raise ProtocolError(f"{reply.command}: {reply.said()}")
    n = reply.value("infer-start")
    laps = reply.all("lap")
    if len(laps) != 2 or reply.first("infer-done") is None:
        raise ProtocolError(f"{reply.command}: {len(laps)} laps and no whole run ({reply.said()})")
    results = reply.all("results")
    return Performance(int(n), int(reply.value("warmup-start")), laps[0], laps[1], results[-1] if results else ())
