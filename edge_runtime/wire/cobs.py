"""COBS (Consistent Overhead Byte Stuffing, Cheshire and Baker 1999): a frame holds no 0x00 byte, so 0x00 ends every
frame and a reader that lost its place (garbage, a dropped byte, a cable plugged in mid-frame) finds the next frame at
the next 0x00. Overhead: one byte per 254, at most.

Written here rather than taken from the `cobs` package: the board side stays numpy + psutil, and the whole codec is the
two functions below. They work a zero-free run at a time (bytes.split, slices), not a byte at a time, so a model upload
is not slowed by Python loops: about 4 k steps per MB of typical weights.
"""

from __future__ import annotations


class CobsError(ValueError):
    """The bytes are not a COBS encoding (a zero inside, or a block that runs past the end)."""


_CODE = [bytes([i]) for i in range(256)]


def encode(data: bytes) -> bytes:
    """`data` with every 0x00 removed: each zero-free run becomes blocks of a length code and up to 254 bytes."""
    runs = bytes(data).split(b"\x00")
    if max(map(len, runs)) < 254:  # the common case (headers, small frames): one block per run
        return b"".join([_CODE[len(r) + 1] + r for r in runs])
    out = bytearray()
    for k, run in enumerate(runs):
        last = k == len(runs) - 1
        while len(run) >= 254:
            out.append(0xFF)  # a full block: no zero implied after it
            out += run[:254]
            run = run[254:]
            if last and not run:
                return bytes(out)  # data that ends in a full block needs no final code (as the paper's encoder)
        out.append(len(run) + 1)  # the zero that followed the run is implied by a code below 0xFF
        out += run
    return bytes(out)


def decode(enc: bytes) -> bytes:
    """The inverse of `encode`. Raises CobsError for bytes no encoder writes."""
    enc = bytes(enc)
    if b"\x00" in enc:
        raise CobsError("a zero byte inside a frame")
    parts: list[bytes] = []
    append = parts.append
    i, n = 0, len(enc)
    while i < n:
        code = enc[i]
        j = i + code
        append(enc[i + 1 : j])
        i = j
        if code < 0xFF and i < n:
            append(b"\x00")
    if i > n:
        raise CobsError(f"the last block runs {i - n} byte(s) past the end ({n})")
    return b"".join(parts)


def max_encoded(n: int) -> int:
    """The longest encoding of n bytes."""
    return n + n // 254 + 1
