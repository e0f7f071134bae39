"""`make demo`, the link part: a board and a host on one machine, joined by a software null-modem cable (two
pseudo-terminals, bench.transports.nullmodem). The agent serves one end as it would a UART; the host asks it what it
is, then runs a small campaign on it and on this machine (single-stream and the open-loop server scenario), compares
two runs and writes the HTML report."""

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
MODEL = "models/resnet8/resnet8_int8.tflite"
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


def show(cmd: list[str]) -> list[str]:
    print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    return cmd


def main() -> int:
    bindir = Path(sys.executable).parent
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
            camp.write_text(CAMPAIGN.format(board=cable.host_url, model=ROOT / MODEL))
            store = f"{state}/edge-bench.sqlite"
            print(f"A campaign: the same model on the board (over the cable) and here, interleaved ({camp.name}):")
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
