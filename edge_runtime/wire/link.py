"""A reliable, ordered message link over a byte stream that loses, flips and duplicates bytes. Sans-I/O: the caller
feeds what it read (`receive`), calls `poll` now and then, writes what `outgoing()` returns, and takes `events()`.
Nothing here reads a clock by itself: every call is given `now` (seconds, monotonic), so tests drive time.

How it is reliable (selective repeat ARQ with TCP's byte numbering, SACK blocks and RACK loss detection; with a
peer that only takes frames in order, as this link did before issue 22, it is go-back-N, as in HDLC):
- Messages are one stream of bytes per connection; a message is cut into DATA frames of at most `segment` bytes
  (FLAG_MORE on all but the last; a frame never holds two messages), each numbered by the offset of its first byte.
  At most `window` frames of the agreed size (as many more smaller ones) and `window_bytes` bytes are in flight.
- The receiver delivers bytes in order. A frame holding the next expected offset: its new bytes are taken, with any
  held frames that now follow, and acknowledged (ACK next offset). An old one (a retransmission whose ACK was lost):
  dropped, acknowledged again. A later one (one was lost before it): held (up to MAX_HELD frames), and answered with a
  NAK of the next expected offset; every ACK and NAK lists the ranges held beyond it (SACK blocks, RFC 2018, in its
  payload), so the sender resends only what is missing. A broken frame: a NAK (without a stamp).
- Every ACK and NAK echoes the stamp of the frame that caused it, so the sender knows which transmission arrived; the
  line keeps order, so a frame sent before it and neither acknowledged nor held was lost, and is resent at once (RFC
  8985's RACK, without a reordering window). The timer covers the rest: when the oldest frame in flight is older than
  the retransmission timeout (RFC 6298's smoothed round trip + 4 deviations, doubled on each timeout until the line
  delivers again), everything in flight is resent. Round trips are measured on every echoed stamp (RFC 7323).
- The segment size adapts to the line: halved (from the size of the frame lost) once per loss, doubled again after a
  run of clean frames, between MIN_PAYLOAD and the agreed maximum; a resend is cut again at the new size (byte offsets
  make that safe), so a noisy serial line still moves data in frames small enough to survive it.
- CONNECT (host) / ACCEPT (agent) start a connection: a fresh `link` number and stream offsets from 0, the protocol
  version checked and the frame size agreed (the smaller offer). Both are small, and the CONNECT is repeated every
  CONNECT_EVERY seconds until an ACCEPT comes, so a line that carries small data frames carries the handshake too. The
  ACCEPT echoes the CONNECT's stamp and the host pings at once on it: both sides start with a measured round trip.
  Frames of another link are stale and dropped.
- The host pings when idle; each side declares the other gone after `dead_after` seconds without a frame.

Long because the sender and the receiver of one connection share its state (offsets, timers, the segment size) and
are one state machine; split, each half would reach into the other.
"""

from __future__ import annotations

import json
import random
import secrets
import statistics
import struct
from collections import deque
from dataclasses import dataclass, field

from edge_runtime.wire.frame import (
    DEFAULT_MAX_PAYLOAD,
    FLAG_HELD,
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
CONNECT_EVERY = 0.05  # CONNECT repeated this often until answered (a 64-byte frame; on a serial line of known rate
# no more often than it carries a CONNECT and its ACCEPT a few times over)
MIN_RTO = 0.05
MAX_RTO = 4.0
NAK_INTERVAL = 0.02
STAMPS_KEPT = 4096
RTT_KEPT = 64
CLEAN_RUN = 16  # acknowledged frames without a loss before the segment grows again
MAX_HELD = 256  # frames a receiver holds beyond a gap, and their bytes at most: bounded whatever the peer sends
MAX_HELD_BYTES = 1 << 20
MAX_BLOCKS = 3  # SACK blocks in an ACK or NAK (8 bytes each: a longer ACK is likelier to be hit on a noisy line)
BLOCK = struct.Struct("!II")  # a SACK block: start and end of a held range, relative to the ACK's offset


# ------------------------------------------------------------------------------------------------------ events
@dataclass(frozen=True)
class Connected:
    link: int
    peer: dict  # the other side's CONNECT/ACCEPT parameters
    fresh: bool  # a new connection (the agent resets its per-connection state); False: a CONNECT repeated


@dataclass(frozen=True)
class Message:
    data: bytes
    first_at: float = 0.0  # when its first byte was taken (the `now` of that receive)


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
    # The link's own round trip: a frame (DATA or PING) to the ACK that echoes its stamp, which the peer's link
    # writes as soon as it reads the frame (before any request is handled). The median of the last RTT_KEPT, so a few
    # ACKs held up by a busy board do not make it (the retransmission timer has its own smoothed estimate).
    rtt_ms: float | None = None
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
    tx: int = 0  # the transmission that carried it last (the link counts every stamped frame it sends)
    sacked: bool = False  # the receiver holds it beyond a gap
    lost: bool = False  # to send again

    @property
    def end(self) -> int:
        return self.off + len(self.payload)

    @property
    def in_flight(self) -> bool:
        return not self.sacked and not self.lost


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
        # Repeated at a steady pace, not backed off: on a line that loses most frames of this size a CONNECT and its
        # ACCEPT may both need many tries, and a longer wait only makes the handshake the weakest part (issue 22).
        self._connect_every = max(CONNECT_EVERY, 1024 / self.line_rate) if self.line_rate else CONNECT_EVERY

    def _reset_session(self) -> None:
        self._next_off = 0
        self._queued_end = 0
        self._msg_first = 0.0  # receiver: when the first byte of the message being taken came
        self._sent: list[_Sent] = []  # sent and not yet acknowledged, by offset: in flight, held there, or lost
        self._queue: deque[list] = deque()  # [message bytes, offset]
        self._expected = 0
        self._held: dict[int, tuple[bytes, int]] = {}  # receiver: offset -> (payload, flags) of frames after a gap
        self._held_bytes = 0
        self._parts: list[bytes] = []
        self._parts_size = 0
        self._skipping_message = False
        self._nak_for: tuple[int, float] | None = None
        self._tx = 0  # stamped frames sent (a stamp is its low 32 bits)
        self._stamps: dict[int, tuple[float, int]] = {}  # stamp -> (when sent, tx), the last STAMPS_KEPT
        self._delivered_tx = 0  # the latest transmission known to have arrived
        self._shrunk_tx = 0  # a loss of a frame sent before this was answered by a smaller segment already
        self._peer_holds = False  # the peer said it holds frames after a gap (FLAG_HELD, SACK blocks)
        self._probes, self._probed = 0, 0.0  # tail-loss probes since the line last delivered, and the last one's time
        self._garbled = False  # broken frames came since the last timeout or probe
        self._srtt: float | None = None
        self._rttvar = 0.0
        self._rtt_recent: deque[float] = deque(maxlen=RTT_KEPT)  # ms
        self._rto = INITIAL_RTO
        self._before_timeout: set[int] | None = None  # stamps sent before a timeout, until an ACK decides it
        self._timeouts_open = 0  # timeouts since then
        self.segment = self.agreed_payload
        self._clean = 0
        self._accept_sent: float | None = None  # agent: when the last ACCEPT left, until the host's first frame

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

    def send(self, message: bytes, now: float) -> int:
        """Queue one message; it leaves as the window allows. Returns its end in this connection's stream: the peer
        has all of it once `acked` reaches that. Raises ValueError over `max_message` or when empty."""
        if not message:
            raise ValueError("an empty message")
        if len(message) > self.max_message:
            raise ValueError(f"message of {len(message):,} bytes is over the limit of {self.max_message:,}")
        self._queue.append([bytes(message), 0])
        self._queued_end += len(message)
        self.stats.messages_out += 1
        self._fill(now)
        return self._queued_end

    @property
    def acked(self) -> int:
        """The stream offset below which the peer has acknowledged every byte."""
        return self._sent[0].off if self._sent else self._next_off

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
            self._garbled = True
        if d.oversize > before[1]:
            self._events.append(ProtocolError("oversize", f"a frame over {self.decoder.max_payload:,} bytes: dropped"))
        if d.unknown > before[2]:
            self._events.append(ProtocolError("unknown-frame", "a frame of an unknown version or kind: dropped"))

    def poll(self, now: float) -> None:
        """Timers: resend on timeout, repeat CONNECT, ping when idle, notice a silent peer."""
        if self.state == "connecting" and now - self._connect_sent >= self._connect_every:
            self._send_connect(now)
        if self.state in ("connecting", "open") and now - self._last_heard > self.dead_after:
            self.state = "down"
            self._events.append(Down(f"nothing heard for {now - self._last_heard:.1f} s"))
            return
        if not self.is_open:
            return
        oldest = self._oldest_in_flight()
        if oldest is not None and now - oldest.last >= self._rto + oldest.ahead:
            self.stats.timeouts += 1
            if self._before_timeout is None:
                self._before_timeout, self._timeouts_open = set(self._stamps), 0
            self._timeouts_open += 1
            if not self._garbled:
                # Backed off only when the line brought nothing at all: a peer stalled, a cable out. A line that
                # brings broken frames is alive, and its losses are noise: waiting longer only slows the resends.
                self._rto = min(self._rto * 2, self.max_rto)
            self._garbled = False
            self._shrink(len(oldest.payload))
            for s in self._sent:
                s.lost = s.lost or not s.sacked
            self._fill(now)
        elif (due := self._probe_due()) is not None and now >= due:
            self._probes, self._probed, self._garbled = self._probes + (not self._garbled), now, False
            self._ping(now)
        elif self.role == "host" and now - self._last_sent >= self.keepalive:
            self._ping(now)

    def end_session(self) -> None:
        """Agent: end this connection; frames that still come on it are answered with REFUSE."""
        if self.state in ("open", "connecting"):
            self.state = "down"
        self._queue.clear()
        self._sent.clear()

    @property
    def backlog(self) -> int:
        """Bytes of messages not yet acknowledged (queued, to resend, in flight)."""
        queued = sum(len(m) - off for m, off in self._queue)
        return queued + sum(len(x.payload) for x in self._sent)

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
        return not self._sent and not self._queue

    def stats_dict(self) -> dict:
        return self.stats.as_dict(self.decoder.stats.as_dict())

    def next_timer(self, now: float) -> float:
        """Seconds until `poll` has something to do (the I/O loop's wait)."""
        waits = [self.keepalive if self.role == "host" else 1.0]
        oldest = self._oldest_in_flight()
        if oldest is not None:
            waits.append(oldest.last + self._rto + oldest.ahead - now)
        due = self._probe_due()
        if due is not None:
            waits.append(due - now)
        if self.state == "connecting":
            waits.append(self._connect_sent + self._connect_every - now)
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
        if self._accept_sent is not None:
            # The host's first frame after the ACCEPT (it pings at once) is the agent's first round trip, as TCP's
            # third handshake segment is: its first answers go out with a timer that fits the line, not 1 s.
            self._rtt_sample(max(now - self._accept_sent, 1e-4))
            self._accept_sent = None
        if f.kind == Kind.ACCEPT:
            if self.state == "connecting":
                sent = self._stamps.pop(f.stamp, None)  # the CONNECT it answers (an agent before issue 22 echoes 0)
                if sent is not None:
                    self._rtt_sample(max(now - sent[0], 1e-4))
                peer = _params(f.payload)
                self.agreed_payload = _agreed(self.max_payload, peer)
                self.segment = self.agreed_payload
                self.state = "open"
                self._events.append(Connected(self.link, peer, True))
                self._ping(now)
                self._fill(now)
        elif f.kind == Kind.REFUSE:
            self.state = "refused"
            self._events.append(Refused(f.payload.decode("utf-8", "replace")[:500]))
        elif f.kind == Kind.PING:
            self._ack(f.stamp, now)
        elif f.kind in (Kind.ACK, Kind.NAK):
            if self._before_timeout is not None and self._sent and f.seq > self._sent[0].off:
                # The first ACK that moves on after a timeout decides it (RFC 3522's Eifel detection): echoing a
                # stamp sent before the timeout, it answers a first send that was late, not lost, and every resend
                # of it since was needless.
                if f.kind == Kind.ACK and f.stamp in self._before_timeout:
                    self.stats.spurious_timeouts += self._timeouts_open
                self._before_timeout = None
            sent = self._stamps.pop(f.stamp, None)
            if sent is not None:
                self._rtt_sample(max(now - sent[0], 1e-4))  # sent: when the frame left the line (see _queue_delay)
            tx = sent[1] if sent else None
            self._on_ack(f.seq, now, f.kind == Kind.NAK, _blocks(f.seq, f.payload), tx, bool(f.flags & FLAG_HELD))
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
        if self._srtt is None:
            self._accept_sent = now
        # The ACCEPT echoes the CONNECT's stamp: the host's first round trip sample, whichever CONNECT got through.
        self._emit(Frame(Kind.ACCEPT, self.link, 0, _compact(accept), stamp=f.stamp), now)
        self._events.append(Connected(self.link, peer, fresh))

    def _on_data(self, f: Frame, now: float) -> None:
        end = f.seq + len(f.payload)
        if end <= self._expected:
            self.stats.duplicates += 1
            self._ack(f.stamp, now)
            return
        if f.seq > self._expected:
            held = FLAG_HELD if self._hold(f) else 0
            if not self._nak(now, f.stamp, held):
                self._ack(f.stamp, now, held)  # the gap was asked for just now: still say what came, and what is held
            return
        self._take(f.payload[self._expected - f.seq :], f.flags, now)  # all of it, unless an earlier cut came first
        for off in sorted(self._held):  # what was held after the gap, as far as it now follows without one
            if off > self._expected:
                break
            payload, flags = self._held.pop(off)
            self._held_bytes -= len(payload)
            if off + len(payload) > self._expected:
                self._take(payload[self._expected - off :], flags, now)
        self._ack(f.stamp, now)

    def _take(self, new: bytes, flags: int, now: float) -> None:
        """The next bytes of the stream, in order: a message is complete at a frame without FLAG_MORE."""
        if not self._parts and not self._skipping_message:
            self._msg_first = now
        self._expected += len(new)
        if not self._skipping_message:
            self._parts.append(new)
            self._parts_size += len(new)
            if self._parts_size > self.max_message:
                self._skipping_message = True
                self._parts, self._parts_size = [], 0
                self._events.append(
                    ProtocolError("oversize", f"a message over the limit of {self.max_message:,} bytes: dropped")
                )
        if not flags & FLAG_MORE:
            if not self._skipping_message:
                self.stats.messages_in += 1
                self._events.append(Message(b"".join(self._parts), self._msg_first))
            self._parts, self._parts_size, self._skipping_message = [], 0, False

    def _hold(self, f: Frame) -> bool:
        """A frame after a gap, kept until the gap is filled (the longer cut, where two start at the same offset).
        False when there is no room for it."""
        have = self._held.get(f.seq, (b"", 0))[0]
        if len(have) >= len(f.payload):
            return True
        if (not have and len(self._held) >= MAX_HELD) or self._held_bytes - len(have) + len(f.payload) > MAX_HELD_BYTES:
            return False
        self._held[f.seq] = (f.payload, f.flags)
        self._held_bytes += len(f.payload) - len(have)
        return True

    def _ack(self, stamp: int, now: float, flags: int = 0) -> None:
        self._emit(Frame(Kind.ACK, self.link, self._expected, self._sack(), flags, stamp), now)

    def _sack(self) -> bytes:
        """The first MAX_BLOCKS ranges held beyond the next expected offset, as SACK blocks."""
        ranges: list[list[int]] = []
        for off in sorted(self._held):
            end = off + len(self._held[off][0])
            if ranges and off <= ranges[-1][1]:
                ranges[-1][1] = max(ranges[-1][1], end)
            elif len(ranges) == MAX_BLOCKS:
                break
            else:
                ranges.append([off, end])
        return b"".join(BLOCK.pack(a - self._expected, b - self._expected) for a, b in ranges)

    def _nak(self, now: float, stamp: int = 0, flags: int = 0) -> bool:
        # One NAK per gap per 20 ms: a burst of later frames after one loss asks once, not once each.
        if self._nak_for and self._nak_for[0] == self._expected and now - self._nak_for[1] < NAK_INTERVAL:
            return False
        self._nak_for = (self._expected, now)
        self.stats.naks_sent += 1
        self._emit(Frame(Kind.NAK, self.link, self._expected, self._sack(), flags, stamp), now)
        return True

    def _oldest_in_flight(self) -> _Sent | None:
        flight = [s for s in self._sent if s.in_flight]
        return min(flight, key=lambda s: s.last + s.ahead) if flight else None

    def _on_ack(self, nxt: int, now: float, nak: bool, blocks: list[tuple[int, int]], tx: int | None,
                held: bool) -> None:  # fmt: skip
        sent = self._sent
        progressed = bool(sent) and sent[0].off < nxt
        done = 0
        while done < len(sent) and sent[done].end <= nxt:
            done += 1
        if done:
            del sent[:done]
            self._clean += done
        if sent and sent[0].off < nxt:  # the receiver took the head of a frame cut smaller since
            s = sent[0]
            s.payload, s.off = s.payload[nxt - s.off :], nxt
        self._peer_holds = self._peer_holds or held or bool(blocks)
        for s in sent:  # held there: the frame this ACK answers (FLAG_HELD), or one in a SACK block
            if not s.sacked and ((held and s.tx == tx) or any(a <= s.off and s.end <= b for a, b in blocks)):
                s.sacked, s.lost = True, False
        if sent and sent[0].sacked:  # asked for all the same: the receiver could not keep it (full) or reset
            sent[0].sacked, sent[0].lost = False, True
        if tx is not None and tx > self._delivered_tx:
            self._delivered_tx, self._probes = tx, 0
        if nak:
            self.stats.naks_received += 1
        # Lost: sent before a transmission that arrived, and neither acknowledged nor held (the line keeps order). A
        # NAK without a stamp (a broken frame arrived) also marks what should have been acknowledged by now.
        late = self._nak_guard() if nak and tx is None else float("inf")
        lost = [s for s in sent if s.in_flight and (s.tx < self._delivered_tx or now - s.last >= late + s.ahead)]
        for s in lost:
            s.lost = True
        if lost and max(s.tx for s in lost) > self._shrunk_tx:  # once per loss: not once per frame of one window
            self._shrink(len(lost[0].payload))
        if progressed:  # the line delivers again: undo the timeout backoff
            self._rto = self._computed_rto()
        if self._clean >= CLEAN_RUN and self.segment < self.agreed_payload:
            self.segment = min(self.segment * 2, self.agreed_payload)
            self._clean = 0
        self._fill(now)

    def _probe_due(self) -> float | None:
        """When to ping for the state of what is in flight (RFC 8985's tail loss probe): after two round trips without
        an answer, doubled per probe unanswered. Its ACK tells what arrived, and, the PING being the latest frame sent,
        that what was sent before it and is neither acknowledged nor held was lost: the frames after the last loss
        are resent in a few round trips, not after the timer (at least MIN_RTO)."""
        if self._srtt is None or not self.is_open:
            return None
        flight = [s for s in self._sent if s.in_flight]
        if not flight:
            return None
        newest = max(flight, key=lambda s: s.tx)
        return max(newest.last + newest.ahead, self._probed) + max(2 * self._srtt, 0.002) * 2**self._probes

    def _ping(self, now: float) -> None:
        self._emit(Frame(Kind.PING, self.link, self._expected, stamp=self._next_stamp(now)), now)

    def _nak_guard(self) -> float:
        """How long a frame may go unacknowledged before a broken frame at the receiver is taken to be it."""
        if self._srtt is None:
            return min(self._rto / 2, 0.5)
        return min(max(2 * self._srtt, 0.002), self._rto / 2)

    # ------------------------------------------------------------------------------------------------ send
    def _fill(self, now: float) -> None:
        if not self.is_open:
            return
        flight = [s for s in self._sent if s.in_flight]
        count, size = len(flight), sum(len(s.payload) for s in flight)
        # Frames cut smaller keep the window's bytes: `window` frames of the agreed size, as more smaller ones (up to
        # what a receiver holds), so a line that carries only 64-byte frames still has a round trip's worth out. Not
        # to a peer that drops what comes after a gap (before issue 22): it would be sent again, all of it.
        frames = self.window
        if self._peer_holds:
            frames = min(MAX_HELD, self.window * max(1, self.agreed_payload // self.segment))
        waiting = False  # a lost frame the window has no room for yet: no new data before it
        i = 0
        while i < min(len(self._sent), MAX_HELD):  # no further than a receiver holds after the first gap
            s = self._sent[i]
            i += 1
            if not s.lost:
                continue
            if count >= frames or size >= self.window_bytes:
                waiting = True
                break
            if len(s.payload) > self.segment:  # cut again at the current size
                self._sent[i - 1 : i] = pieces = self._cut(s)
                s = pieces[0]
            s.lost, s.resent, s.last, s.ahead = False, True, now, self._queue_delay(size, len(s.payload))
            count, size = count + 1, size + len(s.payload)
            self.stats.retransmissions += 1
            self._write(self._data_frame(s), now)
        span = min(self.window_bytes, MAX_HELD_BYTES)
        while (
            not waiting
            and self._queue
            and count < frames
            and size < self.window_bytes
            and (not self._sent or (len(self._sent) < MAX_HELD and self._next_off - self._sent[0].off < span))
        ):
            item = self._queue[0]
            msg, off = item
            piece = msg[off : off + self.segment]
            item[1] = off + len(piece)
            more = item[1] < len(msg)
            if not more:
                self._queue.popleft()
            s = _Sent(self._next_off, piece, more, now, now, ahead=self._queue_delay(size, len(piece)))
            self._sent.append(s)
            count, size = count + 1, size + len(piece)
            self._next_off += len(piece)
            self._write(self._data_frame(s), now)

    def _cut(self, s: _Sent) -> list[_Sent]:
        """A lost frame as frames of the current segment size (still lost: to be sent)."""
        n, seg = len(s.payload), self.segment
        return [_Sent(s.off + i, s.payload[i : i + seg], s.more or i + seg < n, s.first, s.last, True, lost=True)
                for i in range(0, n, seg)]  # fmt: skip

    def _queue_delay(self, in_flight: int, size: int) -> float:
        """On a line of known rate, how long a new frame of `size` bytes takes to leave behind what is already in
        flight: its timer and its round-trip sample leave that out (a slow line is not a lossy one)."""
        return (in_flight + size + OVERHEAD) / self.line_rate if self.line_rate else 0.0

    def _data_frame(self, s: _Sent) -> bytes:
        stamp = self._next_stamp(s.last + s.ahead)
        s.tx = self._tx
        return encode_frame(Frame(Kind.DATA, self.link, s.off, s.payload, FLAG_MORE if s.more else 0, stamp))

    def _next_stamp(self, now: float) -> int:
        self._tx += 1
        stamp = self._tx & 0xFFFFFFFF or 1
        self._stamps[stamp] = (now, self._tx)
        if len(self._stamps) > STAMPS_KEPT:
            del self._stamps[next(iter(self._stamps))]  # the oldest (dicts keep insertion order)
        return stamp

    def _shrink(self, lost: int) -> None:
        """A frame of `lost` payload bytes was lost: the next ones are cut at half that (a 2 kB answer sent whole on a
        line that keeps only 100-byte frames finds its size in a few losses, not in one per halving from 64 kB)."""
        self.segment = max(MIN_PAYLOAD, min(self.segment, lost) // 2)
        self._clean = 0
        self._shrunk_tx = self._tx

    def _rtt_sample(self, r: float) -> None:
        ms = r * 1e3
        self.stats.rtt_min_ms = ms if self.stats.rtt_min_ms is None else min(self.stats.rtt_min_ms, ms)
        if self._srtt is None:
            self._srtt, self._rttvar = r, r / 2
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self._srtt - r)
            self._srtt = 0.875 * self._srtt + 0.125 * r
        self._rtt_recent.append(ms)
        self.stats.rtt_ms = statistics.median(self._rtt_recent)
        self._rto = self._computed_rto()

    def _computed_rto(self) -> float:
        if self._srtt is None:
            return INITIAL_RTO
        return min(max(self._srtt + 4 * self._rttvar, self.min_rto), self.max_rto)

    def _send_connect(self, now: float) -> None:
        params = {"version": VERSION, "max_payload": self.max_payload, **self.hello}
        self._connect_sent = now
        self._out += b"\x00"  # ends whatever noise the line held before, so the CONNECT is not joined to it
        self._emit(Frame(Kind.CONNECT, self.link, 0, _compact(params), stamp=self._next_stamp(now)), now)

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


def _blocks(seq: int, payload: bytes) -> list[tuple[int, int]]:
    """The SACK blocks of an ACK or NAK (absolute offsets); none from a peer that holds nothing or sends none."""
    if not payload or len(payload) % BLOCK.size or len(payload) > MAX_BLOCKS * 4 * BLOCK.size:
        return []
    return [(seq + a, seq + b) for a, b in BLOCK.iter_unpack(payload) if a < b]


def _compact(params: dict) -> bytes:
    """CONNECT/ACCEPT parameters as short as JSON allows: on a noisy line every byte of a frame is a risk."""
    return json.dumps(params, separators=(",", ":")).encode()


def _agreed(mine: int, peer: dict) -> int:
    theirs = peer.get("max_payload")
    if isinstance(theirs, int) and not isinstance(theirs, bool) and MIN_PAYLOAD <= theirs <= MAX_PAYLOAD:
        return min(mine, theirs)
    return min(mine, DEFAULT_MAX_PAYLOAD)


def refuse_bytes(reason: str, link: int = 0) -> bytes:
    """A REFUSE frame for a connection this side will not take at all (a second host while one is in session)."""
    return encode_frame(Frame(Kind.REFUSE, link, 0, reason.encode("utf-8")))
