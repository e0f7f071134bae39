"""How the eembc target loads an input into the device (issue 27): `db load N`, then `db HH..%` pieces of 31 bytes,
as the runner sends them, pipelined (two in flight: the line stays full) and, on any trouble, again one piece at a
time with each acknowledged. A mixin of EembcDevice (eembc.py): it uses the device's ask/check/value, its stream,
clock, splitter and timeout.

Measured (`make bench`, tests/benchmarks/test_eembc.py, the simulator paced as a UART at 115200 baud with the
reference firmware's one command buffer): 50 KB in 1.065x the time its hex digits need on the line (the floor the
framing sets: 66 characters for 31 bytes), against 1.242x one piece at a time.

Never: parse a device line here beyond counting its m-ready (eembc_protocol.py reads them)."""

from __future__ import annotations

from bench.targets import eembc_protocol as proto
from bench.targets.base import TargetError
from bench.transports import StreamLost

RETRIES = 3  # the runner's _retry
LOAD_WINDOW = 2  # `db` pieces in flight while loading: the next goes out while the last one's m-ready is on its way
LOAD_LONGEST_ACK = 47  # `e-[Insufficent number of hex digits]` + `m-ready`, CR LF each: a piece's longest answer
LOAD_QUIET_S = 0.5  # acks still due after trouble: given up once the device is this quiet (a piece at 1200 baud)


def proto_words(err: Exception) -> str:
    """An error's text without the stream's own name in front (the target names itself once)."""
    text = " ".join(str(err).split())
    return text.partition(": ")[2] or text


class Loading:
    """EembcDevice's loading (see the module's docstring)."""

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
        expecting = self.value(self.check(self.ask(proto.cmd_db_load(n))), "expecting")
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
                self.resets_between += reply.reset  # said in the record: the load is done again
                self._drain_acks(len(sent_at) - acked - 1, lines)
                return False
            if reply.done:
                acked, last, reply = acked + 1, reply, proto.Reply("db")
                continue
            left = sent_at[acked] + self.timeout_s - self.clock()
            if left <= 0:
                self.refused = f"no m-ready in {self.timeout_s:.3g} s; last line {self.last_line!r}"
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
        deadline, quiet_until = self.clock() + self.timeout_s, self.clock() + max(LOAD_QUIET_S, self.line_s(150))
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
            quiet_until = self.clock() + max(LOAD_QUIET_S, self.line_s(150)) if data else quiet_until
            lines = self.splitter.feed(data)
        self.after = lines
