"""The platform's own scheduling latency, from cyclictest (rt-tests), measured on the same CPUs before a run.

Puts model jitter and platform jitter side by side: if cyclictest already sees 200 us spikes on CPU 1, no model will
run smoother there.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from edge_runtime.system.cpulist import format_cpu_list
from edge_runtime.system.process import dies_with_parent

_SUMMARY = re.compile(r"^# (Min|Avg|Max) Latencies:\s*(.*)$")


def available() -> bool:
    return shutil.which("cyclictest") is not None


def parse_cyclictest(text: str) -> dict:
    """Parse `cyclictest -q -h N` output: the histogram rows and the per-thread Min/Avg/Max lines."""
    histogram: dict[int, int] = {}
    summary: dict[str, list[int]] = {}
    for line in text.splitlines():
        m = _SUMMARY.match(line)
        if m:
            summary[m.group(1).lower()] = [int(v) for v in m.group(2).split()]
            continue
        if line and line[0] in "0123456789":
            parts = line.split()
            histogram[int(parts[0])] = sum(int(v) for v in parts[1:])
    if not summary.get("max"):
        raise ValueError("no latency summary in cyclictest output")
    return {
        "min_us": min(summary["min"]),
        "avg_us": sum(summary["avg"]) / len(summary["avg"]),
        "max_us": max(summary["max"]),
        "histogram": [[k, v] for k, v in sorted(histogram.items()) if v],
    }


def run_cyclictest(cpus: list[int], seconds: float = 3.0, priority: int = 80, buckets: int = 1000) -> dict:
    """One cyclictest thread per CPU, SCHED_FIFO `priority`, memory locked, 200 us interval, for `seconds`."""
    cmd = [
        "cyclictest", "-q", "-m", "-p", str(priority), "-i", "200", "-D", f"{max(1, round(seconds))}s",
        "-a", format_cpu_list(cpus), "-t", str(len(cpus)), "-h", str(buckets),
    ]  # fmt: skip
    # SCHED_FIFO at `priority`: it must die with us, also when we are killed with SIGKILL.
    proc = subprocess.run(dies_with_parent(cmd), capture_output=True, text=True, timeout=seconds + 30)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"cyclictest failed (exit {proc.returncode}): {last}")
    result = parse_cyclictest(proc.stdout)
    result.update(
        {
            "tool": "cyclictest",
            "cpus": cpus,
            "duration_s": max(1, round(seconds)),
            "priority": priority,
            "interval_us": 200,
            "command": " ".join(cmd),
        }
    )
    return result
