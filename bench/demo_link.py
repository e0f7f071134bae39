"""`make demo`, the link part: a board and a host on one machine, joined by a software null-modem cable (two
pseudo-terminals, bench.transports.nullmodem), and an inference server beside them (Triton on CPU, PyTriton's
tritonserver from .venv-triton, serving the same model over KServe v2 on 127.0.0.1). The agent serves one end of the
cable as it would a UART; the host asks it what it is, then runs a small campaign on the board, on this machine and on
the server (single-stream and the open-loop server scenario), compares two runs and writes the HTML report with the
edge-versus-server comparison. Without .venv-triton (make demo builds it) the server is left out, and it says so."""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.transports.nullmodem import NullModem

ROOT = Path(__file__).resolve().parent.parent
MODEL = "models/resnet8/resnet8_int8.onnx"  # the same file on the board, here and on the server
REPORT = "edge-bench-demo.html"  # kept after the demo (git ignores it): open it in a browser
STORE = "edge-bench-demo.sqlite"  # kept after the demo (git ignores it), started afresh by each demo
CAMPAIGN = """
[campaign]
name = "demo"
repetitions = 3
description = "the same model on a board (over the cable), on this machine and on a server, interleaved"
[[target]]
name = "board"
url = "{board}"
cpus = "1"
[[target]]
name = "local"
url = "local:"
cpus = "1"
{server}
[[model]]
name = "resnet8"
path = "{model}"
[[scenario]]
kind = "single-stream"
iterations = 1000
[[scenario]]
kind = "server"
rate_qps = {rate}
duration_s = 2
[slo]
p99_ms = 20
error_budget = 0.01
"""
RATE_QPS = 100  # below what Triton on CPU serves here (about 300/s): a healthy server, not a saturated one
TIGHT_P99_MS = 0.5  # the server's own SLO, set below what any CPU Triton does: the demo's one deliberate miss


SERVER = """
[[target]]
name = "triton"
url = "kserve+http://{http}/resnet8?metrics={metrics_port}"
[target.slo]
p99_ms = {tight}
"""
TRITON_PY = ROOT / ".venv-triton" / "bin" / "python"


def free_ports(n: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def start_triton():
    """Triton serving the model on loopback, or None (said) when its environment is missing or it does not start."""
    import select

    if not TRITON_PY.exists():
        print("(no .venv-triton: the server target is left out; make demo builds it)")
        return None, None
    http, grpc, metrics = free_ports(3)
    cmd = [str(TRITON_PY), str(ROOT / "tests" / "servers" / "triton_server.py"), "--model", str(ROOT / MODEL),
           "--name", "resnet8", "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
           "--no-token"]  # fmt: skip
    proc = subprocess.Popen(show(cmd), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            line = proc.stdout.readline()
            if line.startswith("ready"):
                print(f"  {line.strip()}")
                return proc, SERVER.format(http=f"127.0.0.1:{http}", metrics_port=metrics, tight=TIGHT_P99_MS)
            if not line:
                break
        if proc.poll() is not None:
            break
    print("(Triton did not start: the server target is left out)")
    stop_triton(proc)
    return None, None


def stop_triton(proc) -> None:
    import os
    import signal

    if proc is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def show(cmd: list[str]) -> list[str]:
    print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    return cmd


def main() -> int:
    bindir = Path(sys.executable).parent
    print("An inference server on this machine (Triton on CPU, KServe v2 on 127.0.0.1):")
    triton, server = start_triton()
    try:
        return with_server(bindir, server)
    finally:
        stop_triton(triton)


def with_server(bindir: Path, server: str | None) -> int:
    with tempfile.TemporaryDirectory(prefix="edge-agent-") as state, NullModem() as cable:
        print("A board and a host joined by a software null-modem cable (two ptys, pyserial at both ends):")
        agent = subprocess.Popen(
            show([str(bindir / "edge-runtime"), "agent", cable.agent_url, "--state-dir", state]),
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            for line in agent.stderr:
                print("  " + line.rstrip(), flush=True)
                if "listening on" in line or time.monotonic() > deadline:
                    break
            threading.Thread(target=lambda: [None for _ in agent.stderr], daemon=True).start()  # drained, unshown
            host = str(bindir / "edge-bench")
            code = subprocess.call(show([host, "targets", cable.host_url]), cwd=ROOT)
            code |= campaign(host, Path(state), cable.host_url, server)
        finally:
            agent.terminate()
            agent.wait(timeout=30)
    return code


def campaign(host: str, state: Path, board: str, server: str | None) -> int:
    """The campaign (3 repetitions, interleaved) into a store kept in the checkout, its HTML report, then a compare
    of the board against this machine on their single-stream runs; an SLO missed is a finding, not a failed demo."""
    camp = state / "demo.toml"
    camp.write_text(CAMPAIGN.format(board=board, model=ROOT / MODEL, server=server or "", rate=RATE_QPS))
    store = ROOT / STORE
    for old in (store, store.with_name(STORE + "-wal"), store.with_name(STORE + "-shm")):
        old.unlink(missing_ok=True)  # each demo starts its own store: the run ids it prints are its own
    where = "here and on a server" if server else "and here"
    print(f"A campaign: the same model on the board (over the cable), {where}; 3 repetitions, interleaved.")
    print(f"  SLO for all: p99 under 20 ms, error budget 1%; the server at {RATE_QPS} queries/s (below saturation)")
    if server:
        print(f"  the server's own SLO is p99 under {TIGHT_P99_MS} ms, tighter than a CPU Triton can do: the one "
              "deliberate miss")  # fmt: skip
    code = subprocess.call(show([host, "run", str(camp), "--store", STORE, "--html", REPORT]), cwd=ROOT)
    code &= ~1
    print(f"Kept: the store {ROOT / STORE} and the report {ROOT / REPORT} (plots and all; opens offline).")
    board_ids, local_ids = (single_stream_runs(store, t) for t in ("board", "local"))
    if board_ids and local_ids:
        print("The board against this machine, three runs a side (runs are the unit of evidence):")
        cmd = [host, "compare", "--a", *board_ids, "--b", *local_ids, "--store", STORE]
        code |= subprocess.call(show(cmd), cwd=ROOT) & ~1
    return code


def single_stream_runs(store: Path, target: str) -> list[str]:
    """The ids of a target's single-stream runs in the demo's store."""
    import contextlib
    import sqlite3

    if not store.exists():
        return []
    with contextlib.closing(sqlite3.connect(store)) as db:
        rows = db.execute("SELECT id FROM runs WHERE target = ? AND scenario = 'single-stream' ORDER BY id", (target,))
        return [str(r[0]) for r in rows]


if __name__ == "__main__":
    sys.exit(main())
