"""Co-runners that load other CPUs for the length of a jitter test, and are always stopped afterwards.

stress-ng when installed (its workers pinned with --taskset), otherwise a built-in hog: one child process per CPU,
pinned to it, spinning (cpu) or streaming through 64 MiB (memory). Every co-runner is bounded by its own timeout,
runs in its own session so the whole group is killed at once, and on Linux dies with its parent (PR_SET_PDEATHSIG),
so a crashed or killed bench never leaves a hog behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from edge_runtime.errors import UserError
from edge_runtime.results import Record
from edge_runtime.system.cpulist import format_cpu_list, parse_cpu_list
from edge_runtime.system.process import dies_with_parent

KINDS = ("cpu", "memory")
TOOLS = ("stress-ng", "builtin")

_HOG = r"""
# edge_runtime_hog
import os, sys, time
cpu, kind, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
os.sched_setaffinity(0, [cpu])
end = time.monotonic() + seconds
if kind == "cpu":
    x = 0
    while time.monotonic() < end:
        for _ in range(10000):
            x += 1
else:
    buf = bytearray(64 << 20)
    view = memoryview(buf)
    step = 4096
    while time.monotonic() < end:
        for i in range(0, len(buf), step):
            view[i] = (view[i] + 1) & 0xFF
"""


@dataclass(frozen=True)
class StressSpec(Record):
    """One co-runner: `kind` (cpu | memory) on `cpus`. A record, so a bench request can carry it as JSON."""

    kind: str
    cpus: tuple[int, ...]

    @classmethod
    def parse(cls, text: str) -> StressSpec:
        kind, sep, cpus = text.partition(":")
        if not sep or kind not in KINDS:
            raise UserError(f"--stress {text!r}: expected KIND:CPUS", hint=f"KIND is one of {', '.join(KINDS)}")
        try:
            cpu_list = parse_cpu_list(cpus)
        except ValueError as err:
            raise UserError(f"--stress {text!r}: {cpus!r} is not a CPU list") from err
        if not cpu_list:
            raise UserError(f"--stress {text!r}: no CPUs")
        return cls(kind, tuple(cpu_list))


class CoRunner:
    """`with CoRunner(specs, max_seconds):` runs the co-runners for the block and stops them, whatever happens."""

    def __init__(self, specs: list[StressSpec], max_seconds: float, measured_cpus: list[int] | None = None):
        self.specs = specs
        self.max_seconds = max_seconds
        self.procs: list[subprocess.Popen] = []
        self.ended_early = False
        forced = os.environ.get("EDGE_RUNTIME_STRESS_TOOL")  # "builtin" to test (or prefer) the built-in hog
        if forced and forced not in TOOLS:
            raise UserError(f"EDGE_RUNTIME_STRESS_TOOL={forced!r}: not one of {', '.join(TOOLS)}")
        self.tool = forced or ("stress-ng" if shutil.which("stress-ng") else "builtin")
        allowed = set(os.sched_getaffinity(0)) | set(range(os.cpu_count() or 1))
        seen: set[int] = set()
        for spec in specs:
            twice = sorted(seen & set(spec.cpus))
            if twice:
                raise UserError(
                    f"--stress {spec.kind}:{format_cpu_list(spec.cpus)}: CPU {format_cpu_list(twice)} "
                    "is already loaded by another --stress"
                )
            seen |= set(spec.cpus)
        usable = set(os.sched_getaffinity(0))
        if specs and not measured_cpus and usable <= seen:
            raise UserError(
                f"--stress loads every CPU this process may use ({format_cpu_list(sorted(usable))}): none is left to "
                "measure on",
                hint="pin the measurement with --cpus and load the others",
            )
        for spec in specs:
            bad = [c for c in spec.cpus if c not in allowed]
            if bad:
                raise UserError(f"--stress {spec.kind}:{format_cpu_list(spec.cpus)}: no CPU {format_cpu_list(bad)}")
            overlap = sorted(set(spec.cpus) & set(measured_cpus or []))
            if overlap:
                raise UserError(
                    f"--stress {spec.kind}:{format_cpu_list(spec.cpus)} overlaps the measured CPUs "
                    f"{format_cpu_list(overlap)}",
                    hint="load the other CPUs: the co-runner is there to disturb them, not to share a core",
                )

    def _commands(self, spec: StressSpec) -> list[list[str]]:
        seconds = max(1, int(self.max_seconds + 0.999))
        if self.tool == "stress-ng":
            worker = (
                ["--cpu", str(len(spec.cpus))]
                if spec.kind == "cpu"
                else ["--vm", str(len(spec.cpus)), "--vm-bytes", "64M"]
            )
            return [
                ["stress-ng", *worker, "--taskset", format_cpu_list(spec.cpus), "--timeout", f"{seconds}s", "--quiet"]
            ]
        return [[sys.executable, "-c", _HOG, str(cpu), spec.kind, str(seconds)] for cpu in spec.cpus]

    def start(self) -> None:
        for spec in self.specs:
            for cmd in self._commands(spec):
                self.procs.append(
                    subprocess.Popen(
                        dies_with_parent(cmd),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                )
        if self.procs:
            time.sleep(0.2)  # let the workers start loading their CPUs before measuring
        dead = [p for p in self.procs if p.poll() is not None]
        if dead:  # a run "under load" that was never under load would be a false result
            raise UserError(
                f"--stress: the {self.tool} co-runner exited at once (exit {dead[0].returncode})",
                hint="is stress-ng installed and on PATH? EDGE_RUNTIME_STRESS_TOOL=builtin uses the built-in load",
            )

    def stop(self) -> None:
        if any(p.poll() is not None for p in self.procs):
            self.ended_early = True  # a worker died or hit its timeout before the run ended
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 3.0
        for p in self.procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        self.procs.clear()

    def describe(self) -> list[dict]:
        return [{"kind": s.kind, "cpus": list(s.cpus), "tool": self.tool} for s in self.specs]

    def __enter__(self) -> CoRunner:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
