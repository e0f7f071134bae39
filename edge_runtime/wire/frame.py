"""Frames: the unit that crosses the wire. Sans-I/O: `encode_frame` gives bytes, `FrameDecoder.feed` takes any bytes
(a byte at a time, garbage, half a frame) and gives back the frames that arrived intact.

On the wire a frame is COBS(header + payload + crc32) followed by 0x00:

    header  version u8 | kind u8 | flags u8 | reserved u8 | link u32 | seq u64 | stamp u32 | length u32
            (24 bytes, big-endian)
    payload `length` bytes
    crc32   of header + payload (zlib's CRC-32, the one of Ethernet and PNG)

`link` names the connection (a random number the host picks at CONNECT), so frames of an earlier connection, still in a
buffer after a cable was pulled or a side restarted, are told apart and dropped. `seq` is the byte offset of a DATA
frame's payload in the connection's stream (as TCP's, so a frame can be resent cut smaller); ACK and NAK carry the
receiver's next expected offset in it. `stamp` numbers each DATA or PING transmission; the ACK or NAK it causes
echoes it, so every acknowledgement is an unambiguous round-trip sample, even for a resent frame (TCP's timestamps).

Since issue 22 an ACK or NAK may say more, in what a receiver of before ignored: FLAG_HELD when the DATA frame it
answers came after a gap and is held until the gap is filled, and in its payload up to three SACK blocks (RFC 2018),
the ranges held beyond `seq`, each as u32 start | u32 end relative to `seq`. CONNECT carries a stamp, which the ACCEPT
echoes.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from enum import IntEnum

from edge_runtime.wire import cobs

VERSION = 1
HEADER = struct.Struct("!BBBBIQII")
CRC = struct.Struct("!I")
OVERHEAD = HEADER.size + CRC.size
MIN_PAYLOAD = 64
DEFAULT_MAX_PAYLOAD = 16 * 1024
MAX_PAYLOAD = 1 << 20  # what either side may offer in CONNECT: larger frames only cost more on a noisy line


class Kind(IntEnum):
    DATA = 1  # a piece of a message, numbered
    ACK = 2  # "I have everything before seq"
    NAK = 3  # "resend from seq": a gap, or a frame that arrived broken
    CONNECT = 4  # host -> agent: a new connection `link`, with the protocol version and sizes (JSON payload)
    ACCEPT = 5  # agent -> host: the connection is open, the agreed sizes (JSON payload)
    REFUSE = 6  # the connection is refused, the reason in the payload (UTF-8)
    PING = 7  # keep-alive; answered with an ACK


FLAG_MORE = 0x01  # DATA: the message continues in the next frame
FLAG_HELD = 0x02  # ACK/NAK: the DATA frame it answers (its stamp) is held beyond a gap


@dataclass(frozen=True)
class Frame:
    kind: Kind
    link: int
    seq: int = 0
    payload: bytes = b""
    flags: int = 0
    stamp: int = 0


def encode_frame(frame: Frame) -> bytes:
    """The bytes to write for `frame`, delimiter included."""
    body = HEADER.pack(VERSION, int(frame.kind), frame.flags, 0, frame.link, frame.seq, frame.stamp, len(frame.payload))
    body += frame.payload
    return cobs.encode(body + CRC.pack(zlib.crc32(body))) + b"\x00"


@dataclass
class DecoderStats:
    frames: int = 0  # frames that arrived intact
    bytes: int = 0  # bytes fed in
    crc_errors: int = 0  # a delimited frame whose checksum (or COBS, or length) did not hold
    resyncs: int = 0  # runs of garbage skipped to find the next delimiter
    oversize: int = 0  # frames longer than the agreed maximum, discarded
    unknown: int = 0  # intact frames of an unknown version or kind
    discarded_bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class FrameDecoder:
    """Bytes in, intact frames out. A frame that fails any check is counted and skipped; the reader resynchronises at
    the next 0x00 whatever came before it. Memory is bounded by the largest frame allowed."""

    max_payload: int = MAX_PAYLOAD
    stats: DecoderStats = field(default_factory=DecoderStats)
    _buf: bytearray = field(default_factory=bytearray)
    _skipping: bool = False  # inside an oversize frame: drop bytes until the next delimiter

    @property
    def max_encoded(self) -> int:
        return cobs.max_encoded(self.max_payload + OVERHEAD)

    def feed(self, data: bytes) -> list[Frame]:
        self.stats.bytes += len(data)
        frames: list[Frame] = []
        pieces = bytes(data).split(b"\x00")
        for k, piece in enumerate(pieces):
            last = k == len(pieces) - 1
            if self._skipping:
                self.stats.discarded_bytes += len(piece)
                if not last:
                    self._skipping = False
                continue
            self._buf += piece
            if last:  # no delimiter yet: keep the bytes, unless they are already more than a frame can be
                if len(self._buf) > self.max_encoded:
                    self.stats.oversize += 1
                    self.stats.discarded_bytes += len(self._buf)
                    self._buf.clear()
                    self._skipping = True
                break
            raw, self._buf = bytes(self._buf), bytearray()
            if raw:
                frame = self._parse(raw)
                if frame is not None:
                    frames.append(frame)
        return frames

    def _parse(self, raw: bytes) -> Frame | None:
        if len(raw) > self.max_encoded:
            self.stats.oversize += 1
            self.stats.discarded_bytes += len(raw)
            return None
        try:
            body = cobs.decode(raw)
        except cobs.CobsError:
            return self._broken(raw, resync=True)
        if len(body) < OVERHEAD:
            return self._broken(raw, resync=True)
        if CRC.unpack_from(body, len(body) - CRC.size)[0] != zlib.crc32(body[: -CRC.size]):
            return self._broken(raw)
        version, kind, flags, _, link, seq, stamp, length = HEADER.unpack_from(body)
        if length != len(body) - OVERHEAD:
            return self._broken(raw)
        if version != VERSION or kind not in Kind._value2member_map_:
            self.stats.unknown += 1
            return None
        self.stats.frames += 1
        return Frame(Kind(kind), link, seq, body[HEADER.size : -CRC.size], flags, stamp)

    def _broken(self, raw: bytes, resync: bool = False) -> None:
        # Bytes between two delimiters that are not even a frame (line noise, a frame cut by a pulled cable, the
        # start of a stream joined mid-frame) are a resync; a frame whose checksum or length does not hold, a CRC error.
        if resync:
            self.stats.resyncs += 1
        else:
            self.stats.crc_errors += 1
        self.stats.discarded_bytes += len(raw)
        return None
