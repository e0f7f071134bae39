"""Real KServe v2 servers for the host tests: Triton (PyTriton's tritonserver on CPU) and MLServer, each run from its
own environment (`make test` builds .venv-triton and .venv-mlserver), and the perf_analyzer anchor (`make bench`
builds .venv-perf).

    with serverkit.triton(MODELS / "digits_cnn" / "digits_cnn_int8.onnx", "digits") as srv:
        ...  # srv.http == "127.0.0.1:PORT", srv.grpc, srv.metrics, srv.token, srv.name, srv.pid

Every server listens on 127.0.0.1 only, on ports picked free here, and runs in its own process group (its own session):
stop() sends SIGTERM to the group, waits STOP_TIMEOUT_S, then SIGKILLs it. Every wait is bounded. A missing environment
skips the test and says which make target builds it; a server that dies before it is ready fails the test with the last
lines it wrote on stderr. This module never binds or talks to anything but loopback.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import ROOT

HOST = "127.0.0.1"
SERVERS = ROOT / "tests" / "servers"
TRITON_VENV = ROOT / ".venv-triton"
MLSERVER_VENV = ROOT / ".venv-mlserver"
PERF_VENV = ROOT / ".venv-perf"
PERF_ANALYZER = SERVERS / "perf_analyzer.sh"
DEFAULT_TOKEN = "edge-bench-test-token"

READY_TIMEOUT_S = 120.0  # Triton on 2 CPUs is ready in ~10 s; MLServer in ~3 s
STOP_TIMEOUT_S = 20.0  # SIGTERM -> SIGKILL
KILL_TIMEOUT_S = 10.0  # SIGKILL -> gone
LOG_LINES = 2000  # stderr kept per server (the pipe is always drained; older lines are dropped)


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on loopback (held open together, so none is handed out twice)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind((HOST, 0))
            ports.append(s.getsockname()[1])
        return ports


def group_pids(pgid: int) -> list[int]:
    """Live (not zombie) processes whose process group is `pgid`, from /proc."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        # Fields after the command name (which may hold spaces and parentheses): state ppid pgrp ...
        rest = stat[stat.rfind(b")") + 2 :].split()
        if len(rest) >= 3 and int(rest[2]) == pgid and rest[0] not in (b"Z", b"X"):
            pids.append(int(entry.name))
    return pids


@dataclass
class Server:
    """A KServe v2 server started by this module; `http`, `grpc`, `metrics` are "127.0.0.1:PORT" (metrics None where
    the server has none), `token` the access token its protected endpoints want (None where it has no such guard)."""

    kind: str
    name: str
    http: str
    grpc: str
    metrics: str | None
    token: str | None
    proc: subprocess.Popen
    _stderr: collections.deque = field(default_factory=lambda: collections.deque(maxlen=LOG_LINES), repr=False)
    _readers: list[threading.Thread] = field(default_factory=list, repr=False)
    scratch: set[Path] = field(default_factory=set, repr=False)  # folders the server may leave (see leftovers())

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def pgid(self) -> int:
        return self.proc.pid  # the launcher leads its own group (a session of its own, or only a group)

    def log(self) -> str:
        """What the server wrote so far, stderr and the ready line (the last LOG_LINES lines)."""
        return "".join(self._stderr)

    def tail(self, lines: int = 40) -> str:
        return "".join(list(self._stderr)[-lines:])

    def group_pids(self) -> list[int]:
        return group_pids(self.pgid)

    def leftovers(self) -> list[Path]:
        """What the server made outside its own temporary directory and still exists: for Triton, the Python backend's
        shared-memory regions (/dev/shm/pytrtion<launcher pid>-*) and the model folders its stubs ran from
        (/tmp/folderXXXXXX). The launcher removes them when it stops; stop() removes them after a SIGKILL."""
        regions = Path("/dev/shm").glob(f"pytrtion{self.pid}-*") if self.kind == "triton" else []
        return [*regions, *(p for p in self.scratch if p.exists())]

    def _note_scratch(self) -> None:
        # A Triton stub's command line: triton_python_backend_stub /tmp/folderXXXXXX/1/model.py pytrtion<pid>-...
        for pid in self.group_pids():
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
                if len(argv) > 2 and argv[0].endswith("triton_python_backend_stub"):
                    folder = Path(argv[1]).parents[1]
                    if folder.parent == Path("/tmp") and folder.name.startswith("folder"):
                        self.scratch.add(folder)

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, sig)

    def _wait_group(self, timeout_s: float) -> bool:
        """Bounded: the launcher reaped and its whole group gone."""
        deadline = time.monotonic() + timeout_s
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=max(0.0, timeout_s))
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and not self.group_pids():
                return True
            time.sleep(0.05)
        return self.proc.poll() is not None and not self.group_pids()

    def stop(self) -> int | None:
        """SIGTERM to the process group, STOP_TIMEOUT_S for all of it to exit, then SIGKILL. Returns the launcher's exit
        status (negative: the signal that ended it). Safe to call twice."""
        if self.proc.poll() is None or self.group_pids():
            self._signal_group(signal.SIGTERM)
            if not self._wait_group(STOP_TIMEOUT_S):
                self._signal_group(signal.SIGKILL)
                self._wait_group(KILL_TIMEOUT_S)
        if not self.group_pids():
            for path in self.leftovers():
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
        for reader in self._readers:
            reader.join(timeout=2.0)
        return self.proc.returncode


def _venv_python(venv: Path) -> Path:
    if not (venv / ".done").exists():
        pytest.skip(f"{venv.name} not built: make test builds {venv.name} (or: make {venv.name}/.done)")
    return venv / "bin" / "python"


def _server_env() -> dict[str, str]:
    # The launchers run in their own venv: nothing from this interpreter's environment may leak into their imports.
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def _drain(stream, sink: collections.deque, ready: queue.Queue | None) -> None:
    for line in stream:
        if ready is not None and line.startswith("ready "):
            ready.put(line)
        sink.append(line)
    stream.close()


def _parse_ready(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.split()[1:] if "=" in part)


@contextlib.contextmanager
def _serve(kind: str, argv: list[str], *, session: bool = True, **fields) -> Iterator[Server]:
    """session True: the server leads a session of its own; False: only a process group of its own, in the caller's
    session. Either way stop() signals the whole group. With the kernel's autogroup scheduling
    (/proc/sys/kernel/sched_autogroup_enabled) a session is a scheduling group of its own, given an equal share of the
    CPUs against the caller's: measured, perf_analyzer at concurrency 16 against the fast server in a session of its own
    finished one 3 s window in 50 s and never settled, and in the caller's session it settled in seconds. A server a
    client is timed against shares the client's session, as it would when both are started from one shell."""
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=_server_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        # its own process group: stop() signals the launcher and every child it made
        **({"start_new_session": True} if session else {"process_group": 0}),
    )
    server = Server(kind=kind, proc=proc, **fields)
    ready: queue.Queue = queue.Queue()
    for stream, q in ((proc.stdout, ready), (proc.stderr, None)):
        reader = threading.Thread(target=_drain, args=(stream, server._stderr, q), daemon=True, name=f"{kind}-log")
        reader.start()
        server._readers.append(reader)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        line = None
        while line is None:
            try:
                line = ready.get(timeout=0.2)
            except queue.Empty:
                if proc.poll() is not None:
                    for reader in server._readers:
                        reader.join(timeout=2.0)
                    pytest.fail(f"{kind} exited {proc.returncode} before it was ready:\n{server.tail()}", pytrace=False)
                if time.monotonic() > deadline:
                    server.stop()
                    pytest.fail(f"{kind} not ready after {READY_TIMEOUT_S:.0f} s:\n{server.tail()}", pytrace=False)
        said = _parse_ready(line)
        expected = {k: getattr(server, k) for k in ("http", "grpc", "metrics") if getattr(server, k)}
        if any(said.get(k) != v for k, v in expected.items()):
            pytest.fail(f"{kind} said {line.strip()!r}, expected {expected}", pytrace=False)
        server._note_scratch()
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def triton(model: Path | str, name: str, token: str | None = DEFAULT_TOKEN, max_batch: int = 0) -> Iterator[Server]:
    """Triton Inference Server (PyTriton 0.7.0, tritonserver 2.51, CPU) serving `model` (.onnx) as `name` through ONNX
    Runtime; statistics and the other protected endpoints want header `triton-access-token: TOKEN` (gRPC metadata
    `triton-grpc-protocol-triton-access-token`); token None guards nothing (perf_analyzer 2.41 cannot send a token over
    gRPC). max_batch 0: no batching, shapes exactly as in the file; N: Triton's shapes lose the batch dimension."""
    python = _venv_python(TRITON_VENV)
    http, grpc, metrics = free_ports(3)
    argv = [str(python), str(SERVERS / "triton_server.py"), "--model", str(model), "--name", name]
    argv += ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    argv += ["--no-token"] if token is None else ["--token", token]
    argv += ["--max-batch", str(max_batch)]
    addresses = {"http": f"{HOST}:{http}", "grpc": f"{HOST}:{grpc}", "metrics": f"{HOST}:{metrics}"}
    with _serve("triton", argv, name=name, token=token, **addresses) as server:
        yield server


@contextlib.contextmanager
def mlserver(model: Path | str, name: str) -> Iterator[Server]:
    """MLServer 1.7.1 serving `model` (.onnx) as `name` through the ONNX Runtime runtime in tests/servers/mlserver_onnx:
    JSON tensors over HTTP and gRPC; no binary tensors over HTTP (422), no statistics endpoint (404), no metrics."""
    python = _venv_python(MLSERVER_VENV)
    http, grpc = free_ports(2)
    argv = [str(python), str(SERVERS / "mlserver_server.py"), "--model", str(model), "--name", name]
    argv += ["--http-port", str(http), "--grpc-port", str(grpc)]
    addresses = {"http": f"{HOST}:{http}", "grpc": f"{HOST}:{grpc}", "metrics": None}
    with _serve("mlserver", argv, name=name, token=None, **addresses) as server:
        yield server


@functools.cache
def _perf_analyzer_problem() -> str | None:
    if not (PERF_VENV / ".done").exists():
        return f"{PERF_VENV.name} not built: make bench builds {PERF_VENV.name} (or: make {PERF_VENV.name}/.done)"
    try:
        run = subprocess.run([str(PERF_ANALYZER), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{PERF_ANALYZER.name} --version: {err}"
    if run.returncode != 0:
        return f"{PERF_ANALYZER.name} does not start: {(run.stderr or run.stdout).strip()[-300:]}"
    return None


def perf_analyzer_path() -> Path:
    """tests/servers/perf_analyzer.sh (perf_analyzer 2.41.0 with its libraries on LD_LIBRARY_PATH); skips the test when
    .venv-perf is not built or the binary cannot start (libb64-0d missing: make sys-libs as root)."""
    problem = _perf_analyzer_problem()
    if problem:
        pytest.skip(problem)
    return PERF_ANALYZER


@contextlib.contextmanager
def fast(name: str = "fast", processes: int = 2, delay_ms: float = 0.0) -> Iterator[Server]:
    """tests/servers/fast_server.py: a KServe v2 HTTP server with precomputed replies that answers at once (or
    `delay_ms` late), on `processes` processes sharing its port; run by this interpreter (it needs only the standard
    library). No gRPC, no metrics, no token."""
    (http,) = free_ports(1)
    argv = [sys.executable, str(SERVERS / "fast_server.py"), "--http-port", str(http), "--name", name,
            "--processes", str(processes), "--delay-ms", str(delay_ms)]  # fmt: skip
    with _serve(
        "fast", argv, session=False, name=name, token=None, http=f"{HOST}:{http}", grpc="", metrics=None
    ) as server:
        yield server
