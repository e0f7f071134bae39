"""Real parts for the host-side tests: `edge-runtime agent` as a child process, and a serial cable made of two
pseudo-terminals with a forwarder between them that can flip and drop bytes and be pulled for a while.

The cable: the agent opens one pty's slave with pyserial, the host the other's; a thread copies bytes between the two
masters. With `p`, each 64-byte block it forwards is hit with that probability (a bit flipped, or 1-11 bytes dropped:
a bit error rate near p/512, far worse than a working UART). `pull()` drops everything both ways, as an unplugged cable
does. Bytes that find no room on the far side are dropped too (a UART overrun), beyond 1 MB of backlog.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import tty
from pathlib import Path

from conftest import ROOT

BACKLOG = 1 << 20


class Cable:
    def __init__(self, p: float = 0.0, seed: int = 0):
        self.p = p
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
        if not self.p:
            return data
        out = bytearray()
        for i in range(0, len(data), 64):
            block = bytearray(data[i : i + 64])
            if self.rng.random() < self.p:
                self.faults += 1
                j = self.rng.randrange(len(block))
                if self.rng.random() < 0.5:
                    block[j] ^= 1 << self.rng.randrange(8)
                else:
                    del block[j : j + self.rng.randrange(1, 12)]
            out += block
        return bytes(out)

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AgentProcess:
    """`edge-runtime agent ENDPOINT --state-dir DIR` in a child process; `url` for the host once it listens."""

    def __init__(self, endpoint: str, state_dir: Path, *extra: str, wait: bool = True):
        self.endpoint, self.state_dir, self.extra = endpoint, Path(state_dir), extra
        self.lines: list[str] = []
        self.proc: subprocess.Popen | None = None
        self.start(wait)

    def start(self, wait: bool = True) -> None:
        self.lines = []
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "edge_runtime.cli",
                "agent",
                self.endpoint,
                "--state-dir",
                str(self.state_dir),
                *self.extra,
            ],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        if wait:
            self.wait_for("listening on")

    def _read(self, proc) -> None:
        for line in proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines:
                if text in line:
                    return line
            if self.proc.poll() is not None:
                time.sleep(0.2)
                raise AssertionError(f"agent exited {self.proc.returncode}: {self.lines}")
            time.sleep(0.05)
        raise AssertionError(f"agent never said {text!r}: {self.lines}")

    @property
    def url(self) -> str:
        if self.endpoint.startswith("tcp://"):
            m = re.search(r"listening on (tcp://\S+)", self.wait_for("listening on"))
            return m.group(1)
        return self.endpoint

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self) -> AgentProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def comparable(result: dict) -> dict:
    """What two runs of the same request on the same machine must share: every key, and every field that is not a
    measurement (the model by hash, the backend, the configuration, what was pinned, the environment)."""

    def keys(d, prefix=""):
        out = set()
        for k, v in d.items():
            out.add(prefix + k)
            if isinstance(v, dict) and k not in ("isolation", "details", "interrupts_per_cpu", "measured_on"):
                out |= keys(v, prefix + k + ".")
        return out

    env = {k: v for k, v in result["environment"].items() if k not in ("started_at",)}
    return {
        "keys": keys({k: v for k, v in result.items() if k != "link"}),
        "model": {k: result["model"][k] for k in ("sha256", "format", "precision")},
        "backend": {k: result["backend"][k] for k in ("name", "version", "device", "delegate", "fallback")},
        "config": result["config"],
        "count": result["latency_us"]["count"],
        "pinning": (result["pinning"]["requested"], result["pinning"]["all_threads_pinned"]),
        "environment": env,
        "schema": result["schema"],
    }
