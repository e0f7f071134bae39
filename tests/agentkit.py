"""Real parts for the host-side tests: `edge-runtime agent` as a child process, and the software null-modem cable
(bench.transports.nullmodem: two pseudo-terminals, pyserial at both ends, faults and pulls on demand); `tmpfs` mounts a
small real file system (a board's tiny or read-only disk); `Host` drives an in-process agent through a link, no socket.
helpers.read_until waits for a child's progress line."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT

from bench.transports.nullmodem import NullModem
from edge_runtime.agent.server import Agent
from edge_runtime.wire import messages as wm
from edge_runtime.wire.link import Link, Message

BACKLOG = 1 << 20


Cable = NullModem


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def tmpfs(path: Path, *options: str, size: str = "64k"):
    """A real tmpfs of `size` mounted at `path` (made if missing) for the block, with mount `options` (e.g. "ro");
    unmounted after it. Skips the test, saying why, where mounting is not possible (not root, EPERM in a container)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    opts = ",".join([f"size={size}", *options])
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True, text=True,
                          timeout=30)  # fmt: skip
    if proc.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {' '.join(proc.stderr.split())}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True, timeout=30).returncode:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)  # still busy: detach it


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
        self.reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True)
        self.reader.start()
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
                self.reader.join(10)  # its last words
                raise AssertionError(f"agent exited {self.proc.returncode}: {self.lines}")
            time.sleep(0.05)
        raise AssertionError(f"agent never said {text!r}: {self.lines}")

    @property
    def url(self) -> str:
        if self.endpoint.startswith("tcp://"):
            m = re.search(r"listening on (tcp://\S+)", self.wait_for("listening on"))
            return m.group(1)
        return self.endpoint

    def wait(self, timeout: float = 60.0) -> int:
        """Wait for the agent to exit and for its stderr to be read to the end (self.lines complete); its status."""
        code = self.proc.wait(timeout=timeout)
        self.reader.join(timeout)
        assert not self.reader.is_alive(), f"the agent's stderr is still open after it exited: {self.lines}"
        return code

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


def lost_nothing(link: dict) -> bool:
    """Over a lossless stream (TCP, a clean pty) no frame may be lost: no gap reported (NAK), and any resend followed
    a stall (this VM's, or the peer's), which the link recognised because the first send's ACK came after it."""
    resends_explained = link["retransmissions"] == 0 or link["timeouts"] == link["spurious_timeouts"]
    return link["naks_received"] == 0 and resends_explained


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


class Host:
    """A host Link wired straight to an in-process Agent (no sockets: the agent's I/O loop is what is tested)."""

    def __init__(self, agent: Agent, now: float = 0.0):
        self.agent, self.now, self.link = agent, now, Link(role="host")
        self.link.connect(now)
        self.pump()

    def pump(self, steps: int = 5) -> list:
        events = []
        for _ in range(steps):
            self.now += 0.01
            self.agent.feed(self.link.outgoing(), self.now)
            self.agent.poll(self.now)
            self.link.receive(self.agent.outgoing(), self.now)
            self.link.poll(self.now)
            events += self.link.events()
        return events

    def ask(self, op: str, args: dict | None = None, rid: str = "r1", blob: bytes = b"") -> dict:
        self.link.send(wm.encode(wm.request(rid, op, args, blob)), self.now)
        deadline = time.monotonic() + 10  # some requests are answered by a worker thread
        while time.monotonic() < deadline:
            for ev in self.pump(5):
                if isinstance(ev, Message):
                    m = wm.decode(ev.data)
                    if m.type == "response" and m.get("id") == rid:
                        return m.fields
            time.sleep(0.01)
        raise AssertionError(f"no answer to {op}")
