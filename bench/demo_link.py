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
CAMPAIGN = """
[campaign]
name = "board-and-local"
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
iterations = 3000
[[scenario]]
kind = "server"
rate_qps = 1000
duration_s = 2
[slo]
p99_ms = 2
error_budget = 0.01
"""


SERVER = """
[[target]]
name = "triton"
url = "kserve+http://{http}/resnet8?metrics={metrics_port}"
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
                return proc, SERVER.format(http=f"127.0.0.1:{http}", metrics_port=metrics)
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
            camp = Path(state) / "board-and-local.toml"
            camp.write_text(CAMPAIGN.format(board=cable.host_url, model=ROOT / MODEL, server=server or ""))
            store = f"{state}/edge-bench.sqlite"
            where = "here and on the server" if server else "and here"
            print(f"A campaign: the same model on the board (over the cable), {where}, interleaved ({camp.name}):")
            code |= subprocess.call(show([host, "run", str(camp), "--store", store, "--html", REPORT]), cwd=ROOT)
            code &= ~1  # an SLO missed on this VM is a finding, not a failed demo
            print(f"The campaign's report, plots and all, in one file that opens offline: {ROOT / REPORT}")
            code |= subprocess.call(show([host, "compare", "1", "2", "--store", store, "--threshold", "10"]), cwd=ROOT)
            code &= ~1
        finally:
            agent.terminate()
            agent.wait(timeout=30)
    return code


if __name__ == "__main__":
    sys.exit(main())
