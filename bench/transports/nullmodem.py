"""A serial null-modem cable in software: two pseudo-terminals and a thread that copies bytes between their masters.
One end for the agent (`serial:///dev/pts/N`), one for the host, both opened with pyserial as real ports are. For
trying the agent without hardware (`make demo`), and for tests and benchmarks of the link.

With `p`, each 64-byte block it forwards is hit with that probability (a bit flipped, or 1-11 bytes dropped: a bit error
rate near p/512, far worse than a working UART). With `flip` and `drop` (the per-byte mode), each byte on its own has a
bit flipped with probability `flip` and is lost with probability `drop`, as line noise and overruns hit a UART: a frame
of n bytes then survives with probability (1 - flip - drop)^n, however it is cut. `pull()` drops everything both ways
for a while, as an unplugged cable does. Bytes that find no room on the far side beyond 1 MB of backlog are dropped (a
UART overrun).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import select
import threading
import time
import tty

BACKLOG = 1 << 20


def damage(data: bytes, rng: random.Random, p: float) -> tuple[bytes, int]:
    """`data` as a bad line delivers it: each 64-byte block, with probability `p`, gets a bit flipped or 1-11 bytes
    dropped. Returns (the bytes, faults made)."""
    if not p:
        return data, 0
    out, faults = bytearray(), 0
    for i in range(0, len(data), 64):
        block = bytearray(data[i : i + 64])
        if rng.random() < p:
            faults += 1
            j = rng.randrange(len(block))
            if rng.random() < 0.5:
                block[j] ^= 1 << rng.randrange(8)
            else:
                del block[j : j + rng.randrange(1, 12)]
        out += block
    return bytes(out), faults


def damage_bytes(data: bytes, rng: random.Random, flip: float, drop: float) -> tuple[bytes, int]:
    """`data` as a noisy line delivers it, byte by byte: each byte has a bit flipped with probability `flip`, or is
    lost with probability `drop`. Returns (the bytes, faults made). The gaps between faulty bytes are drawn
    (geometric), so a clean megabyte costs a few draws, not a million."""
    hit = flip + drop
    if not hit or not data:
        return data, 0
    if flip < 0 or drop < 0 or hit >= 1:
        raise ValueError(f"flip {flip!r} and drop {drop!r}: per-byte probabilities, together under 1")
    out, faults, i, log_clean = bytearray(data), 0, -1, math.log1p(-hit)
    while True:
        i += 1 + int(math.log(1.0 - rng.random()) / log_clean)  # the next faulty byte
        if i >= len(out):
            return bytes(out), faults
        faults += 1
        if rng.random() * hit < drop:
            del out[i]
            i -= 1
        else:
            out[i] ^= 1 << rng.randrange(8)


class NullModem:
    def __init__(self, p: float = 0.0, seed: int = 0, flip: float = 0.0, drop: float = 0.0):
        if (p and (flip or drop)) or not all(0 <= x < 1 for x in (p, flip, drop)) or flip + drop >= 1:
            raise ValueError(f"p={p!r} (per 64-byte block) or flip={flip!r} + drop={drop!r} (per byte), under 1")
        self.p, self.flip, self.drop = p, flip, drop
        self.rng = random.Random(seed)
        self.m_agent, s_agent = os.openpty()
        self.m_host, s_host = os.openpty()
        for fd in (s_agent, s_host):
            tty.setraw(fd)
        for fd in (self.m_agent, self.m_host):
            os.set_blocking(fd, False)
        self.agent_path, self.host_path = os.ttyname(s_agent), os.ttyname(s_host)
        self._slaves = (s_agent, s_host)  # held open: a pty whose last slave closes hangs up its master
        self.pulled = False
        self.faults = 0
        self.forwarded = 0
        self._stop = False
        self._pending = {self.m_agent: bytearray(), self.m_host: bytearray()}
        self._thread = threading.Thread(target=self._run, name="cable", daemon=True)
        self._thread.start()

    @property
    def agent_url(self) -> str:
        return f"serial://{self.agent_path}?baud=921600"

    @property
    def host_url(self) -> str:
        return f"serial://{self.host_path}?baud=921600"

    def pull(self, seconds: float) -> None:
        """Unplug for `seconds` (in the background), then plug back in."""

        def unplug():
            self.pulled = True
            time.sleep(seconds)
            self.pulled = False

        threading.Thread(target=unplug, daemon=True).start()

    def _hit(self, data: bytes) -> bytes:
        if self.flip or self.drop:
            out, n = damage_bytes(data, self.rng, self.flip, self.drop)
        else:
            out, n = damage(data, self.rng, self.p)
        self.faults += n
        return out

    def _run(self) -> None:
        other = {self.m_agent: self.m_host, self.m_host: self.m_agent}
        while not self._stop:
            writers = [fd for fd, buf in self._pending.items() if buf]
            try:
                r, w, _ = select.select(list(other), writers, [], 0.05)
            except (OSError, ValueError):
                return
            for fd in r:
                try:
                    data = os.read(fd, 65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data or self.pulled:
                    continue
                data = self._hit(data)
                self.forwarded += len(data)
                buf = self._pending[other[fd]]
                if len(buf) + len(data) <= BACKLOG:
                    buf += data
            if self.pulled:
                for buf in self._pending.values():
                    buf.clear()
                continue
            for fd in w:
                buf = self._pending[fd]
                try:
                    n = os.write(fd, bytes(buf[:65536]))
                    del buf[:n]
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    buf.clear()

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=2)
        for fd in (self.m_agent, self.m_host, *self._slaves):
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> NullModem:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
