"""A reliable, ordered message link over a byte stream that loses, flips and duplicates bytes. Sans-I/O: the caller
feeds what it read (`receive`), calls `poll` now and then, writes what `outgoing()` returns, and takes `events()`.
Nothing here reads a clock by itself: every call is given `now` (seconds, monotonic), so tests drive time.

How it is reliable (go-back-N ARQ, as in HDLC and the textbooks, with TCP's byte numbering):
- Messages are one stream of bytes per connection; a message is cut into DATA frames of at most `segment` bytes
  (FLAG_MORE on all but the last; a frame never holds two messages), each numbered by the offset of its first byte.
  At most `window` frames and `window_bytes` bytes are unacknowledged at once.
- The receiver takes bytes in order only. A frame holding the next expected offset: its new bytes are taken and
  acknowledged (ACK next offset). An old one (a retransmission whose ACK was lost): dropped, acknowledged again. A later
  one (one was lost before it), or a broken frame: NAK next, so the sender resends from there at once instead of
  waiting for its timer.
- The sender resends everything unacknowledged when the oldest frame is older than the retransmission timeout (RFC
  6298's smoothed round trip + 4 deviations, doubled on each timeout until the line delivers again). Round trips are
  measured on every ACK through the stamp it echoes (RFC 7323's timestamps), so a lossy line still has samples.
- The segment size adapts to the line: halved on every loss, doubled again after a run of clean frames, between
  MIN_PAYLOAD and the agreed maximum; a resend is cut again at the new size (byte offsets make that safe), so a noisy
  serial line still moves data in frames small enough to survive it.
- CONNECT (host) / ACCEPT (agent) start a connection: a fresh `link` number and stream offsets from 0, the protocol
  version checked and the frame size agreed (the smaller offer). Frames of another link are stale and dropped.
- The host pings when idle; each side declares the other gone after `dead_after` seconds without a frame.

Long because the sender and the receiver of one connection share its state (offsets, timers, the segment size) and
are one state machine; split, each half would reach into the other.
"""

from __future__ import annotations

import json
import random
import secrets
from collections import deque
from dataclasses import dataclass, field

from edge_runtime.wire.frame import (
    DEFAULT_MAX_PAYLOAD,
    FLAG_MORE,
    MAX_PAYLOAD,
    MIN_PAYLOAD,
    OVERHEAD,
    VERSION,
    Frame,
    FrameDecoder,
    Kind,
    encode_frame,
)

MAX_MESSAGE = 64 << 20  # a result with a long timeline is a few MB; model bytes travel in chunks, not one message
INITIAL_RTO = 1.0
MIN_RTO = 0.05
MAX_RTO = 4.0
NAK_INTERVAL = 0.02
STAMPS_KEPT = 4096
CLEAN_RUN = 16  # acknowledged frames without a loss before the segment grows again


# ------------------------------------------------------------------------------------------------------ events
@dataclass(frozen=True)
class Connected:
    link: int
    peer: dict  # the other side's CONNECT/ACCEPT parameters
    fresh: bool  # a new connection (the agent resets its per-connection state); False: a CONNECT repeated


@dataclass(frozen=True)
class Message:
    data: bytes


@dataclass(frozen=True)
class Refused:
    reason: str


@dataclass(frozen=True)
class Down:
    reason: str


@dataclass(frozen=True)
class ProtocolError:
    kind: str  # "oversize" (a frame or message over the limit), "unknown-frame", "connect" (a CONNECT refused)
    detail: str


@dataclass
class LinkStats:
    frames_out: int = 0
    frames_in: int = 0
    bytes_out: int = 0
    bytes_in: int = 0
    messages_out: int = 0
    messages_in: int = 0
    retransmissions: int = 0  # DATA frames sent again
    timeouts: int = 0
    spurious_timeouts: int = 0  # timeouts undone: the first send's ACK came after the resend (a stall, not a loss)
    naks_sent: int = 0
    naks_received: int = 0
    duplicates: int = 0  # DATA frames received twice (their ACK was lost)
    stale: int = 0  # frames of an earlier connection
    reconnects: int = 0
    rtt_ms: float | None = None  # smoothed round trip of a DATA frame to its ACK
    rtt_min_ms: float | None = None

    def as_dict(self, decoder_stats: dict | None = None) -> dict:
        d = dict(self.__dict__)
        if decoder_stats:
            d.update(
                crc_errors=decoder_stats["crc_errors"],
                resyncs=decoder_stats["resyncs"],
                oversize_frames=decoder_stats["oversize"],
                unknown_frames=decoder_stats["unknown"],
            )
        for k in ("rtt_ms", "rtt_min_ms"):
            if d[k] is not None:
                d[k] = round(d[k], 3)
        return d


@dataclass
class _Sent:
    off: int  # stream offset of payload[0]
    payload: bytes
    more: bool  # the message goes on after this frame
    first: float
    last: float
    resent: bool = False
    ahead: float = 0.0  # seconds the line needs for what was in flight before this frame (0 without a line rate)

    @property
    def end(self) -> int:
        return self.off + len(self.payload)


@dataclass
class Link:
    """One end. `role` "host" connects and pings; "agent" accepts any CONNECT (a new link replaces the old one: the
    host restarted). Sizes: `max_payload` is this side's largest frame payload, offered in CONNECT/ACCEPT."""

    role: str = "host"
    max_payload: int = DEFAULT_MAX_PAYLOAD
    window: int = 16
    window_bytes: int = 256 * 1024
    line_rate: float | None = None  # bytes/s of a serial line: the window, the frames and the timers fit it
    max_message: int = MAX_MESSAGE
    keepalive: float = 1.0
    dead_after: float = 10.0
    hello: dict = field(default_factory=dict)  # extra CONNECT/ACCEPT parameters (identity is exchanged in messages)
    stats: LinkStats = field(default_factory=LinkStats)

    def __post_init__(self) -> None:
        if not MIN_PAYLOAD <= self.max_payload <= MAX_PAYLOAD:
            raise ValueError(f"max_payload {self.max_payload}: must be {MIN_PAYLOAD} to {MAX_PAYLOAD}")
        self.max_rto, self.min_rto = MAX_RTO, MIN_RTO
        if self.line_rate:
            # In flight at most ~half a second of the line, frames of at most ~0.1 s, and a timer that waits out a
            # full window: otherwise a 115200-baud line times out on frames still queued, not lost.
            rate = max(float(self.line_rate), 10.0)
            self.window_bytes = max(4 * MIN_PAYLOAD, min(self.window_bytes, int(rate * 0.5)))
            self.max_payload = max(MIN_PAYLOAD, min(self.max_payload, int(rate * 0.1)))
            self.max_rto = max(MAX_RTO, 4 * (self.window_bytes + self.max_payload) / rate)
        self.decoder = FrameDecoder(max_payload=max(self.max_payload, DEFAULT_MAX_PAYLOAD))
        self.link = 0
        self.nonce = ""
        self._refused_at = -1.0
        self.state = "idle"  # idle | connecting | open | refused | down
        self.agreed_payload = self.max_payload
        self._out = bytearray()
        self._events: deque = deque()
        self._reset_session()
        self._last_heard = 0.0
        self._last_sent = 0.0
        self._connect_sent = 0.0
        self._connect_rto = INITIAL_RTO

    def _reset_session(self) -> None:
        self._next_off = 0
        self._unacked: deque[_Sent] = deque()  # sent, not yet acknowledged
        self._resend: deque[_Sent] = deque()  # to send again (cut anew after a loss), before any new data
        self._inflight_bytes = 0
        self._queue: deque[list] = deque()  # [message bytes, offset]
        self._expected = 0
        self._parts: list[bytes] = []
        self._parts_size = 0
        self._skipping_message = False
        self._nak_for: tuple[int, float] | None = None
        self._stamp = 0
        self._stamps: dict[int, float] = {}  # stamp -> when sent (the last STAMPS_KEPT)
        self._srtt: float | None = None
        self._rttvar = 0.0
        self._rto = INITIAL_RTO
        self._before_timeout: set[int] | None = None  # stamps sent before a timeout, until an ACK decides it
        self._timeouts_open = 0  # timeouts since then
        self.segment = self.agreed_payload
        self._clean = 0

    # ------------------------------------------------------------------------------------------------ interface
    @property
    def is_open(self) -> bool:
        return self.state == "open"

    def connect(self, now: float, link: int | None = None) -> None:
        """Host: open a new connection (a new link number; everything unsent of the old one is dropped)."""
        if self.state != "idle":
            self.stats.reconnects += 1
        self.link = link if link is not None else random.SystemRandom().randrange(1, 2**32)
        self.state = "connecting"
        self.agreed_payload = self.max_payload
        self._reset_session()
        self._send_connect(now)
        self._last_heard = now

    def send(self, message: bytes, now: float) -> None:
        """Queue one message; it leaves as the window allows. Raises ValueError over `max_message` or when empty."""
        if not message:
            raise ValueError("an empty message")
        if len(message) > self.max_message:
            raise ValueError(f"message of {len(message):,} bytes is over the limit of {self.max_message:,}")
        self._queue.append([bytes(message), 0])
        self.stats.messages_out += 1
        self._fill(now)

    def receive(self, data: bytes, now: float) -> None:
        if not data:
            return
        self.stats.bytes_in += len(data)
        d = self.decoder.stats
        before = (d.crc_errors + d.resyncs, d.oversize, d.unknown)
        for frame in self.decoder.feed(data):
            self.stats.frames_in += 1
            self._on_frame(frame, now)
        if not self.is_open:
            return
        if d.crc_errors + d.resyncs > before[0]:
            self._nak(now)  # something broken arrived: ask for the rest again now rather than at the timeout
        if d.oversize > before[1]:
            self._events.append(ProtocolError("oversize", f"a frame over {self.decoder.max_payload:,} bytes: dropped"))
        if d.unknown > before[2]:
            self._events.append(ProtocolError("unknown-frame", "a frame of an unknown version or kind: dropped"))

    def poll(self, now: float) -> None:
        """Timers: resend on timeout, repeat CONNECT, ping when idle, notice a silent peer."""
        if self.state == "connecting" and now - self._connect_sent >= self._connect_rto:
            self._connect_rto = min(self._connect_rto * 2, self.max_rto)
            self._send_connect(now)
        if self.state in ("connecting", "open") and now - self._last_heard > self.dead_after:
            self.state = "down"
            self._events.append(Down(f"nothing heard for {now - self._last_heard:.1f} s"))
            return
        if not self.is_open:
            return
        if self._unacked and now - self._unacked[0].last >= self._rto + self._unacked[0].ahead:
            self.stats.timeouts += 1
            if self._before_timeout is None:
                self._before_timeout, self._timeouts_open = set(self._stamps), 0
            self._timeouts_open += 1
            self._rto = min(self._rto * 2, self.max_rto)
            self._shrink()
            self._resend_all(now)
        elif self.role == "host" and now - self._last_sent >= self.keepalive:
            self._emit(Frame(Kind.PING, self.link, self._expected, stamp=self._next_stamp(now)), now)

    def end_session(self) -> None:
        """Agent: end this connection; frames that still come on it are answered with REFUSE."""
        if self.state in ("open", "connecting"):
            self.state = "down"
        self._queue.clear()
        self._resend.clear()
        self._unacked.clear()
        self._inflight_bytes = 0

    @property
    def backlog(self) -> int:
        """Bytes of messages not yet acknowledged (queued, to resend, in flight)."""
        queued = sum(len(m) - off for m, off in self._queue)
        return queued + sum(len(x.payload) for x in self._resend) + self._inflight_bytes

    def outgoing(self) -> bytes:
        out, self._out = bytes(self._out), bytearray()
        return out

    def events(self) -> list:
        out = list(self._events)
        self._events.clear()
        return out

    @property
    def idle(self) -> bool:
        """Everything sent has been acknowledged."""
        return not self._unacked and not self._resend and not self._queue

    def stats_dict(self) -> dict:
        return self.stats.as_dict(self.decoder.stats.as_dict())

    def next_timer(self, now: float) -> float:
        """Seconds until `poll` has something to do (the I/O loop's wait)."""
        waits = [self.keepalive if self.role == "host" else 1.0]
        if self._unacked:
            waits.append(self._unacked[0].last + self._rto + self._unacked[0].ahead - now)
        if self.state == "connecting":
            waits.append(self._connect_sent + self._connect_rto - now)
        return max(0.0, min(waits))

    # ------------------------------------------------------------------------------------------------ receive
    def _on_frame(self, f: Frame, now: float) -> None:
        if f.kind == Kind.CONNECT:
            self._on_connect(f, now)
            return
        if f.kind == Kind.REFUSE and f.link == 0 and self.state == "connecting":
            f = Frame(f.kind, self.link, f.seq, f.payload)  # refused before the agent read our CONNECT (busy)
        if f.link != self.link or self.link == 0:
            self.stats.stale += 1
            return
        if self.role == "agent" and self.state != "open":
            # This side ended the session (silence, the host never proved its token, a stream error) while the host
            # may still think it open: tell it, so it connects again instead of waiting for answers that never come.
            if f.kind != Kind.REFUSE and now - self._refused_at >= 0.5:
                self._refused_at = now
                self._emit(Frame(Kind.REFUSE, self.link, 0, b"session ended: connect again"), now)
            return
        self._last_heard = now
        if f.kind == Kind.ACCEPT:
            if self.state == "connecting":
                peer = _params(f.payload)
                self.agreed_payload = _agreed(self.max_payload, peer)
                self.segment = self.agreed_payload
                self.state = "open"
                self._events.append(Connected(self.link, peer, True))
                self._fill(now)
        elif f.kind == Kind.REFUSE:
            self.state = "refused"
            self._events.append(Refused(f.payload.decode("utf-8", "replace")[:500]))
        elif f.kind == Kind.PING:
            self._emit(Frame(Kind.ACK, self.link, self._expected, stamp=f.stamp), now)
        elif f.kind in (Kind.ACK, Kind.NAK):
            if self._before_timeout is not None and f.seq > self._lowest_unacked(f.seq):
                # The first ACK that moves on after a timeout decides it (RFC 3522's Eifel detection): echoing a
                # stamp sent before the timeout, it answers a first send that was late, not lost, and every resend
                # of it since was needless.
                if f.kind == Kind.ACK and f.stamp in self._before_timeout:
                    self.stats.spurious_timeouts += self._timeouts_open
                self._before_timeout = None
            sent = self._stamps.pop(f.stamp, None)
            if sent is not None:
                self._rtt_sample(max(now - sent, 1e-4))  # sent: when the frame left the line (see _queue_delay)
            self._on_ack(f.seq, now, nak=f.kind == Kind.NAK)
        elif f.kind == Kind.DATA and self.is_open:
            self._on_data(f, now)

    def _on_connect(self, f: Frame, now: float) -> None:
        if self.role != "agent":
            self.stats.stale += 1
            return
        peer = _params(f.payload)
        if peer.get("version") != VERSION:
            reason = f"protocol version {peer.get('version')!r} is not {VERSION}, the one this agent speaks"
            self._emit(Frame(Kind.REFUSE, f.link, 0, reason.encode()), now)
            self._events.append(ProtocolError("connect", reason))
            return
        self._last_heard = now
        fresh = f.link != self.link or not self.is_open
        if fresh:
            if self.link:
                self.stats.reconnects += 1
            self.link = f.link
            self.agreed_payload = _agreed(self.max_payload, peer)
            self._reset_session()
            self.state = "open"
            self.decoder.max_payload = max(self.max_payload, self.agreed_payload)
            self.nonce = secrets.token_hex(16)  # a fresh challenge per connection (the agent's hello checks the answer)
        accept = {"version": VERSION, "max_payload": self.agreed_payload, "nonce": self.nonce, **self.hello}
        self._emit(Frame(Kind.ACCEPT, self.link, 0, json.dumps(accept).encode()), now)
        self._events.append(Connected(self.link, peer, fresh))

    def _on_data(self, f: Frame, now: float) -> None:
        end = f.seq + len(f.payload)
        if end <= self._expected:
            self.stats.duplicates += 1
            self._emit(Frame(Kind.ACK, self.link, self._expected, stamp=f.stamp), now)
            return
        if f.seq > self._expected:
            self._nak(now, f.stamp)
            return
        new = f.payload[self._expected - f.seq :]  # all of it, unless an earlier cut of the same bytes arrived first
        self._expected = end
        self._emit(Frame(Kind.ACK, self.link, self._expected, stamp=f.stamp), now)
        if not self._skipping_message:
            self._parts.append(new)
            self._parts_size += len(new)
            if self._parts_size > self.max_message:
                self._skipping_message = True
                self._parts, self._parts_size = [], 0
                self._events.append(
                    ProtocolError("oversize", f"a message over the limit of {self.max_message:,} bytes: dropped")
                )
        if not f.flags & FLAG_MORE:
            if not self._skipping_message:
                self.stats.messages_in += 1
                self._events.append(Message(b"".join(self._parts)))
            self._parts, self._parts_size, self._skipping_message = [], 0, False

    def _nak(self, now: float, stamp: int = 0) -> None:
        # One NAK per gap per 20 ms: a burst of later frames after one loss asks once, not once each.
        if self._nak_for and self._nak_for[0] == self._expected and now - self._nak_for[1] < NAK_INTERVAL:
            return
        self._nak_for = (self._expected, now)
        self.stats.naks_sent += 1
        self._emit(Frame(Kind.NAK, self.link, self._expected, stamp=stamp), now)

    def _lowest_unacked(self, default: int) -> int:
        offs = [q[0].off for q in (self._unacked, self._resend) if q]
        return min(offs) if offs else default

    def _on_ack(self, nxt: int, now: float, nak: bool) -> None:
        progressed = bool(self._unacked) and self._unacked[0].off < nxt
        while self._unacked and self._unacked[0].end <= nxt:
            s = self._unacked.popleft()
            self._inflight_bytes -= len(s.payload)
            self._clean += 1
        if self._unacked and self._unacked[0].off < nxt:  # the receiver took the head of a frame cut smaller since
            s = self._unacked[0]
            self._inflight_bytes -= nxt - s.off
            s.payload, s.off = s.payload[nxt - s.off :], nxt
        while self._resend and self._resend[0].off < nxt:  # resends the receiver no longer needs
            s = self._resend[0]
            if s.end <= nxt:
                self._resend.popleft()
            else:
                s.payload, s.off = s.payload[nxt - s.off :], nxt
        if progressed:  # the line delivers again: undo the timeout backoff
            self._rto = self._computed_rto()
        if self._clean >= CLEAN_RUN and self.segment < self.agreed_payload:
            self.segment = min(self.segment * 2, self.agreed_payload)
            self._clean = 0
        if nak:
            self.stats.naks_received += 1
            if self._unacked and self._unacked[0].off == nxt and now - self._unacked[0].last >= min(self._rto / 2, 0.5):
                self._shrink()
                self._resend_all(now)
        self._fill(now)

    # ------------------------------------------------------------------------------------------------ send
    def _fill(self, now: float) -> None:
        if not self.is_open:
            return
        while self._resend and len(self._unacked) < self.window and self._inflight_bytes < self.window_bytes:
            s = self._resend.popleft()
            s.last, s.ahead = now, self._queue_delay(len(s.payload))
            self._unacked.append(s)
            self._inflight_bytes += len(s.payload)
            self.stats.retransmissions += 1
            self._write(self._data_frame(s), now)
        while (
            not self._resend
            and self._queue
            and len(self._unacked) < self.window
            and self._inflight_bytes < self.window_bytes
        ):
            item = self._queue[0]
            msg, off = item
            piece = msg[off : off + self.segment]
            item[1] = off + len(piece)
            more = item[1] < len(msg)
            if not more:
                self._queue.popleft()
            s = _Sent(self._next_off, piece, more, now, now, ahead=self._queue_delay(len(piece)))
            self._unacked.append(s)
            self._inflight_bytes += len(piece)
            self._next_off += len(piece)
            self._write(self._data_frame(s), now)

    def _queue_delay(self, size: int) -> float:
        """On a line of known rate, how long a new frame of `size` bytes takes to leave behind what is already in
        flight: its timer and its round-trip sample leave that out (a slow line is not a lossy one)."""
        return (self._inflight_bytes + size + OVERHEAD) / self.line_rate if self.line_rate else 0.0

    def _data_frame(self, s: _Sent) -> bytes:
        stamp = self._next_stamp(s.last + s.ahead)
        return encode_frame(Frame(Kind.DATA, self.link, s.off, s.payload, FLAG_MORE if s.more else 0, stamp))

    def _next_stamp(self, now: float) -> int:
        self._stamp = (self._stamp + 1) & 0xFFFFFFFF or 1
        self._stamps[self._stamp] = now
        if len(self._stamps) > STAMPS_KEPT:
            for k in list(self._stamps)[: len(self._stamps) - STAMPS_KEPT]:
                del self._stamps[k]
        return self._stamp

    def _resend_all(self, now: float) -> None:
        """Everything unacknowledged again, cut at the current segment size (smaller after a loss)."""
        again: deque[_Sent] = deque()
        for s in (*self._unacked, *self._resend):
            for i in range(0, len(s.payload), self.segment):
                piece = s.payload[i : i + self.segment]
                last = i + len(piece) >= len(s.payload)
                again.append(_Sent(s.off + i, piece, s.more or not last, s.first, now, True))
        self._unacked, self._resend, self._inflight_bytes = deque(), again, 0
        self._fill(now)

    def _shrink(self) -> None:
        self.segment = max(MIN_PAYLOAD, self.segment // 2)
        self._clean = 0

    def _rtt_sample(self, r: float) -> None:
        ms = r * 1e3
        self.stats.rtt_min_ms = ms if self.stats.rtt_min_ms is None else min(self.stats.rtt_min_ms, ms)
        if self._srtt is None:
            self._srtt, self._rttvar = r, r / 2
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self._srtt - r)
            self._srtt = 0.875 * self._srtt + 0.125 * r
        self.stats.rtt_ms = self._srtt * 1e3
        self._rto = self._computed_rto()

    def _computed_rto(self) -> float:
        if self._srtt is None:
            return INITIAL_RTO
        return min(max(self._srtt + 4 * self._rttvar, self.min_rto), self.max_rto)

    def _send_connect(self, now: float) -> None:
        params = {"version": VERSION, "max_payload": self.max_payload, **self.hello}
        self._connect_sent = now
        self._out += b"\x00"  # ends whatever noise the line held before, so the CONNECT is not joined to it
        self._emit(Frame(Kind.CONNECT, self.link, 0, json.dumps(params).encode()), now)

    def _emit(self, frame: Frame, now: float) -> None:
        self._write(encode_frame(frame), now)

    def _write(self, raw: bytes, now: float) -> None:
        self._out += raw
        self.stats.frames_out += 1
        self.stats.bytes_out += len(raw)
        self._last_sent = now


def _params(payload: bytes) -> dict:
    if len(payload) > 4096:  # CONNECT/ACCEPT parameters are a few numbers
        return {}
    try:
        d = json.loads(payload.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {}
    return d if isinstance(d, dict) else {}


def _agreed(mine: int, peer: dict) -> int:
    theirs = peer.get("max_payload")
    if isinstance(theirs, int) and not isinstance(theirs, bool) and MIN_PAYLOAD <= theirs <= MAX_PAYLOAD:
        return min(mine, theirs)
    return min(mine, DEFAULT_MAX_PAYLOAD)


def refuse_bytes(reason: str, link: int = 0) -> bytes:
    """A REFUSE frame for a connection this side will not take at all (a second host while one is in session)."""
    return encode_frame(Frame(Kind.REFUSE, link, 0, reason.encode("utf-8")))
