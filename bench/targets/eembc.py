"""MLPerf Tiny firmware as a target (issue 27): a microcontroller that speaks the EEMBC runner's UART protocol, reached
by pyserial URL (`eembc:///dev/ttyACM0?baud=115200`; `eembc+socket://HOST:PORT` and `eembc+rfc2217://HOST:PORT` for
a device on a remote serial server). The firmware times itself: the host sends commands and reads the device's laps.

EembcDevice is the I/O half over one stream (bench/transports): a command out, its reply in (eembc_protocol's Reply),
every wait bounded and a timeout saying the last line the device sent; inputs loaded in the runner's pieces, each
acknowledged; a reset (a new `m-init-done`) seen and the loop retried a bounded number of times.

Never: parse a device line here (eembc_protocol.py does), or time an inference with the host's clock."""

from __future__ import annotations

import math
import statistics
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from bench.targets import eembc_protocol as proto
from bench.targets.base import Progress, Target, TargetError, TargetInfo, TargetOptions, TargetResult
from bench.transports import Stream, StreamLost, open_stream, parse_endpoint
from edge_runtime.errors import UserError

DEFAULT_TIMEOUT_S = 5.0  # serial_device.py's own: a command the firmware answers at once
RETRIES = 3  # the runner's _retry; also the bound on loops a reset may cost
LOAD_WINDOW = 2  # `db` pieces in flight while loading: the next goes out while the last one's m-ready is on its way
LOAD_LONGEST_ACK = 47  # `e-[Insufficent number of hex digits]` + `m-ready`, CR LF each: a piece's longest answer
LOAD_QUIET_S = 0.5  # acks still due after trouble: given up once the device is this quiet (a piece at 1200 baud)


def serial_url(url: str) -> str:
    """The pyserial URL an `eembc` URL names: `eembc:///dev/X?baud=N` -> `serial:///dev/X?baud=N`,
    `eembc+socket://H:P` -> `socket://H:P`; one UserError line for anything else."""
    u = urllib.parse.urlsplit(url)
    scheme, _, inner = u.scheme.lower().partition("+")
    if scheme != "eembc" or (not inner and (u.netloc or not u.path)) or (inner and not u.netloc):
        raise UserError(f"target {url!r}: expected eembc:///dev/DEVICE?baud=N or eembc+socket://HOST:PORT")
    return (inner or "serial") + url[len(u.scheme) :]  # the rest as written (urlunsplit drops an empty `//`)


class DeviceReset(TargetError):
    """The device booted again (a new `m-init-done`) while it answered a command: what it held is gone."""

    def __init__(self, message: str):
        super().__init__(message, "crashed")


@dataclass
class Loop:
    """One `infer N W` loop, kept: the device's figures and the resets it took to get it."""

    perf: proto.Performance
    resets: int = 0


class EembcDevice:
    """One EEMBC device on one stream. `clock` is the host's monotonic clock, for deadlines only."""

    def __init__(self, stream: Stream, name: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic):  # fmt: skip
        self.stream, self.name, self.timeout_s, self.clock = stream, name, timeout_s, clock
        self.splitter = proto.LineSplitter()
        self.after: list[str] = []  # lines read after a reply's m-ready: stale for the next command
        self.last_line = ""  # the last line the device sent, in any reply: what a timeout names
        self.resets_between = 0  # boots seen between commands (a banner that came while nobody asked)
        self.pieces_resent = 0
        self.refused = ""  # the device's words when it last refused a piece
        self.loaded: bytes | None = None  # what the device holds now (lost with a reset)

    @classmethod
    def open(cls, url: str, **kw) -> EembcDevice:
        try:
            return cls(open_stream(serial_url(url)), url, **kw)
        except StreamLost as err:
            raise TargetError(f"{url}: {proto_words(err)}") from None

    def close(self) -> None:
        self.stream.close()

    # ------------------------------------------------------------------ one command, one reply
    def _drain(self, quiet_s: float = 0.0) -> None:
        """What came before a command (a banner, garbage, the end of a reply cut short by a reset) is not its reply:
        read until the device has been quiet `quiet_s`, and judged here."""
        stale, lines, self.after = proto.Reply("(between commands)"), self.after, []
        quiet_until = self.clock() + quiet_s
        while True:
            for line in lines:
                stale.feed(line)
            data = self._read(max(0.0, min(quiet_until - self.clock(), 0.5)))
            if data:
                quiet_until = self.clock() + quiet_s
            elif self.clock() >= quiet_until:
                break
            lines = self.splitter.feed(data)
        if stale.reset:
            self.resets_between += 1
        if stale.last_line:
            self.last_line = stale.last_line

    def _read(self, timeout_s: float) -> bytes:
        try:
            return self.stream.read(timeout_s)
        except StreamLost as err:
            raise TargetError(f"{self.name}: {proto_words(err)} (last line {self.last_line!r})") from None

    def ask(self, cmd: bytes, timeout_s: float | None = None) -> proto.Reply:
        """Send one command and collect its reply up to `m-ready`; TargetError (kind timeout) naming the command and
        the last line the device sent when it does not come in time."""
        self._drain()
        text = cmd.decode("ascii").rstrip("%")
        shown = text if len(text) <= 24 else text[:21] + "..."
        reply = proto.Reply(shown)
        try:
            self.stream.write(cmd)
        except StreamLost as err:
            raise TargetError(f"{self.name}: {proto_words(err)}") from None
        limit = self.timeout_s if timeout_s is None else timeout_s
        deadline = self.clock() + limit
        while not reply.done:
            left = deadline - self.clock()
            if left <= 0:
                raise TargetError(f"{self.name}: {shown}: no m-ready in {limit:g} s; last line {self.last_line!r}",
                                  "timeout")  # fmt: skip
            lines = self.splitter.feed(self._read(min(left, 0.5)))
            for i, line in enumerate(lines):
                if reply.feed(line):
                    self.after = lines[i + 1 :]
                    break
            if reply.last_line:
                self.last_line = reply.last_line
        return reply

    def check(self, reply: proto.Reply) -> proto.Reply:
        """The reply, or a one-line error: DeviceReset for a reset, TargetError with the device's own words."""
        if reply.reset:
            raise DeviceReset(f"{self.name}: {reply.command}: the device reset (m-init-done)")
        if reply.errors:
            raise TargetError(f"{self.name}: {reply.command}: {reply.said()}", "refused")
        return reply

    # ------------------------------------------------------------------ what the runner does
    def sync(self, quiet_s: float = 0.2) -> tuple[str, str]:
        """Be sure the next line read answers the next command: wait for the device to be quiet (a boot banner on its
        way), then `name` until one is answered without a reset; its (role, vendor's name)."""
        for _ in range(RETRIES):
            self._drain(quiet_s)
            reply = self.ask(proto.cmd_name())
            if not reply.reset:
                self._drain(quiet_s)  # a reply cut short by a banner may still end after it
                return self.check(reply).value("name")
        raise DeviceReset(f"{self.name}: name: the device reset {RETRIES} times while asked")

    def identify(self) -> dict:
        """Sync and say who it is: `name` and `profile`, as the runner asks."""
        name = self.sync()
        prof = self.check(self.ask(proto.cmd_profile()))
        model = prof.value("model")
        if model not in proto.MODELS:
            raise TargetError(f"{self.name}: model {model!r} is none of MLPerf Tiny's {', '.join(proto.MODELS)}",
                              "unusable")  # fmt: skip
        return {"board": f"{name[1]} ({name[0]})", "profile": prof.value("profile"), "model": model}

    load_window = LOAD_WINDOW  # 1: every piece acknowledged before the next (the runner's own way)
    loads_fallen_back = 0  # loads the pipelined path gave up on, done again one piece at a time

    def load(self, data: bytes) -> None:
        """`db load N`, then the `db HH..` pieces: pipelined (`_load_pipelined`); on any trouble there, the whole load
        again one piece at a time, each acknowledged (its m-ready) before the next (`_load_once`), where a piece
        refused for an odd number of hex digits (one lost on the line) is sent again: the firmware checks the count
        before it keeps a byte (internally_implemented.cpp, ee_buffer_parse); any other refusal restarts the load."""
        if self.load_window > 1:
            if self._load_pipelined(data):
                return
            self.loads_fallen_back += 1
            try:  # a piece whose `%` the device missed may still sit in its one command buffer: `name` takes it away
                self.ask(proto.cmd_name())
            except TargetError as err:
                if err.kind != "timeout":
                    raise
                raise TargetError(f"{self.name}: db: the device went quiet mid-load (no m-ready in {self.timeout_s:g} "
                                  f"s; last line {self.last_line!r})", "timeout") from None  # fmt: skip
        for _ in range(RETRIES):
            if self._load_once(data):
                return
        raise TargetError(f"{self.name}: db: {len(data)} bytes not loaded in {RETRIES} tries: {self.refused}",
                          "refused")  # fmt: skip

    def _db_load(self, n: int) -> None:
        expecting = self.check(self.ask(proto.cmd_db_load(n))).value("expecting")
        if expecting != n:
            raise TargetError(f"{self.name}: db load {n}: the device expects {expecting} bytes", "refused")

    def _load_once(self, data: bytes) -> bool:
        self._db_load(len(data))
        reply = None
        for piece in proto.db_pieces(data):
            for _ in range(RETRIES):
                reply = self.ask(piece)
                if reply.reset or not any("hex digits" in e for e in reply.errors):
                    break
                self.pieces_resent += 1
            if reply.reset:
                self.check(reply)  # DeviceReset: the caller loads again
            if reply.errors:
                self.refused = reply.said()
                return False
        if reply is None or reply.first("load-done") is None:
            raise TargetError(f"{self.name}: db: {len(data)} bytes sent and no m-load-done (a byte lost on the "
                              f"line?); last line {self.last_line!r}", "refused")  # fmt: skip
        return True

    def _load_pipelined(self, data: bytes) -> bool:
        """`load_window` (2) pieces in flight: piece k+1 goes out once piece k-1 is acknowledged, so it is on the line
        while piece k's m-ready comes back: no turnaround and no ack's 9 characters per piece, only the 66 characters
        for 31 bytes (1.065x the digits' time). Acks are counted in order: the k-th m-ready answers the k-th piece.

        Why this is safe on reference firmware, which has one command buffer (ee_serial_callback): a `%` puts the
        write position back at 0 and keeps the parser busy until the reply's m-ready is out, and a `%` arriving
        meanwhile is ignored (that command lost, merged into the next). Piece k+1's first characters arrive while
        piece k's reply is being printed: they land at positions 0.. over piece k's text, which was parsed when its
        `%` came, and they are the start of piece k+1 anyway. Piece k+1's own `%` comes 66 characters after piece k's,
        and piece k's reply is 9 (`m-ready`), 22 with `m-load-done`, 47 with a refusal: long out before. So what
        makes it safe is that each reply is shorter on the line than the piece behind it, whatever the window (3 and
        5 lost no command against tests/servers/eembc_sim.py's model of that buffer either); 2 is the least that
        keeps the line full, and it bounds what trouble costs (one piece to drain). A short last piece breaks the rule
        (`db XX%` is 6 characters, behind a 9-character m-ready: its `%` is ignored; the simulator caught it), so a
        piece no longer than LOAD_LONGEST_ACK goes out only when nothing is in flight. A piece behind a longer reply
        is lost: a reset's banner (72 characters), or a firmware that echoes what it reads (75 characters out for 66
        in: it falls behind); that shows as trouble, and trouble ends the pipelined try.

        False on any trouble (a refused piece, a reset, an ack not in within the timeout), the acks still due
        drained so that none is taken for the careful load's, which the caller does next."""
        self._db_load(len(data))
        self._drain()  # lines after the `db load` reply are judged now: the acks read below are the pieces' own
        pieces, lines, sent_at = proto.db_pieces(data), [], []
        reply, last, acked = proto.Reply("db"), None, 0
        while acked < len(pieces):
            while len(sent_at) < len(pieces) and len(sent_at) - acked < self.load_window:
                if len(sent_at) > acked and len(pieces[len(sent_at)]) <= LOAD_LONGEST_ACK:
                    break  # its `%` could come while the piece before it is still answered
                self._send(pieces[len(sent_at)])
                sent_at.append(self.clock())
            while lines and not reply.done:
                reply.feed(lines.pop(0))
            if reply.last_line:
                self.last_line = reply.last_line
            if reply.done and (reply.reset or reply.errors):
                self.refused = reply.said()
                self._drain_acks(len(sent_at) - acked - 1, lines)
                return False
            if reply.done:
                acked, last, reply = acked + 1, reply, proto.Reply("db")
                continue
            left = sent_at[acked] + self.timeout_s - self.clock()
            if left <= 0:
                self.refused = f"no m-ready in {self.timeout_s:g} s; last line {self.last_line!r}"
                self._drain_acks(len(sent_at) - acked, [])  # an ack later than the timeout is no one's
                return False
            lines += self.splitter.feed(self._read(min(left, 0.5)))
        self.after = lines
        # no m-load-done: a byte lost on the line (the firmware counts bytes, not pieces); the careful load says so
        return last is not None and last.first("load-done") is not None

    def _send(self, cmd: bytes) -> None:  # as `ask` writes
        try:
            self.stream.write(cmd)
        except StreamLost as err:
            raise TargetError(f"{self.name}: {proto_words(err)}") from None

    def _drain_acks(self, due: int, lines: list[str]) -> None:
        """The m-ready lines still due to pieces already sent, read and dropped, until they came, the device has been
        quiet LOAD_QUIET_S (a piece it missed is never answered) or the timeout passed; what comes after the last of
        them waits for the next command, as `ask` leaves it."""
        deadline, quiet_until = self.clock() + self.timeout_s, self.clock() + LOAD_QUIET_S
        while due > 0:
            for i, line in enumerate(lines):
                msg = proto.parse_line(line)
                if line.strip():
                    self.last_line = line.strip()
                if msg is not None and msg.kind == "ready":
                    due -= 1
                if due <= 0:
                    self.after = lines[i + 1 :]
                    return
            left = min(deadline, quiet_until) - self.clock()
            if left <= 0:
                self.after = []
                return
            data = self._read(min(left, 0.5))
            quiet_until = self.clock() + LOAD_QUIET_S if data else quiet_until
            lines = self.splitter.feed(data)
        self.after = lines

    def infer(self, n: int, warmups: int, timeout_s: float) -> proto.Performance:
        reply = self.check(self.ask(proto.cmd_infer(n, warmups), timeout_s))
        try:
            return proto.performance(reply)
        except proto.ProtocolError as err:
            raise TargetError(f"{self.name}: {err}", "refused") from None

    def loop(self, data: bytes, n: int, warmups: int, timeout_s: float) -> Loop:
        """Run one loop on `data` (loaded unless the device holds it already); a reset on the way costs a sync, a
        reload and a retry, at most RETRIES times."""
        resets = 0
        while True:
            try:
                if self.loaded != data:
                    self.loaded = None
                    self.load(data)
                    self.loaded = data
                return Loop(self.infer(n, warmups, timeout_s), resets)
            except DeviceReset as err:
                self.loaded = None  # its RAM is gone with it
                resets += 1
                if resets >= RETRIES:
                    raise TargetError(f"{err} ({resets} times; no whole loop)", "crashed") from None
                self.sync()

    def performance(self, data: bytes, *, loops: int = 5, min_loop_s: float = 10.0, warmups: int = 10,
                    probe: int = 10) -> list[Loop]:  # fmt: skip
        """MLPerf Tiny's performance mode: a short probe (`probe` inferences) sizes N so that one loop lasts at least
        `min_loop_s` by the device's timer, then `loops` loops; a loop found short (the device sped up) is run again
        with N scaled, once. The median is the caller's to take (`median_ips`)."""
        first = self.loop(data, probe, warmups, self.timeout_s + 60.0)
        per_inference_s = max(first.perf.latency_us, 1.0) / 1e6
        n = max(1, math.ceil(min_loop_s / per_inference_s * 1.05))  # 5%: the probe's own error
        kept = []
        for _ in range(loops):
            budget = (n + warmups) * per_inference_s * 2 + self.timeout_s
            got = self.loop(data, n, warmups, budget)
            if got.perf.elapsed_us < min_loop_s * 1e6:
                n = math.ceil(n * min_loop_s * 1e6 / max(got.perf.elapsed_us, 1) * 1.05)
                got = self.loop(data, n, warmups, budget * 2)
            kept.append(got)
        return kept


def median_ips(loops: list[Loop]) -> float:
    """The median of the loops' inferences per second (MLPerf Tiny reports the median of its loops)."""
    return statistics.median(loop.perf.inferences_per_s for loop in loops)


def proto_words(err: Exception) -> str:
    """An error's text without the stream's own name in front (the target names itself once)."""
    text = " ".join(str(err).split())
    return text.partition(": ")[2] or text


class EembcTarget(Target):
    """`eembc:` URLs: what `edge-bench targets` shows of a device; `bench` records come with issue 27's next part."""

    schemes = ("eembc", "eembc+socket", "eembc+rfc2217")
    info = TargetInfo(kind="board", summary="eembc:///dev/ttyACM0?baud=115200 for MLPerf Tiny firmware (EEMBC runner)",
                      scenarios=frozenset({"single-stream"}))  # fmt: skip

    def __init__(self, url: str, options: TargetOptions | None = None):
        super().__init__(url, options)
        self.device: EembcDevice | None = None

    @classmethod
    def check_url(cls, url: str) -> None:
        parse_endpoint(serial_url(url), "target", listen=False)  # the baud rate checked as a serial target's

    def connect(self) -> dict:
        if self.device is None:
            self.device = EembcDevice.open(self.url, timeout_s=self.options.connect_timeout)
        try:
            self.identity = {**self.device.identify(), "kind": "eembc"}
        except TargetError:
            self.close()
            raise
        return self.identity

    def describe(self) -> dict:
        return {**self.connect(), "modes": ["performance"], "energy": ENERGY}

    @classmethod
    def describe_text(cls, row: dict) -> list[str]:
        return [
            f"{row['url']}  reachable  (MLPerf Tiny firmware: {row.get('profile') or '?'})",
            f"  board     {row.get('board') or '?'}",
            f"  model     {row.get('model') or '?'}",
            f"  modes     {', '.join(row.get('modes') or [])} (the device's own timer); energy: {ENERGY}",
        ]

    def bench(self, request, *, progress: Progress | None = None, rid: str | None = None,
              sink: Callable[[TargetResult], None] | None = None) -> TargetResult:  # fmt: skip
        raise TargetError(f"{self.url}: runs on MLPerf Tiny firmware are not recorded yet (issue 27: the "
                          "performance and accuracy records come next); `edge-bench targets` names the device",
                          "unusable")  # fmt: skip

    def close(self) -> None:
        if self.device is not None:
            self.device.close()
            self.device = None


ENERGY = "needs a power monitor and the runner's I/O manager between host and device: not offered"
