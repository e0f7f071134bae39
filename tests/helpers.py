"""Helpers the tests share: the CLI in a child process, the one-line-error contract, a bench run as a dict, the x86
system tree built from the fixtures (tune and audit tests use it), and waiting for a child's progress line.

The hostile cases (issue 9's review: "a hostile afternoon") are built from real parts with these helpers: device nodes
made with mknod under tmp_path, fifos, links, fixture trees, real concurrent processes and signals. Every case: a
clean exit with one line, or the behaviour its test names; nothing hangs (every child has a deadline), nothing is
replaced."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

from edge_runtime.measure.bench import run_bench
from edge_runtime.measure.request import BenchRequest


def cli(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """`edge-runtime ARGS` in a child with a deadline: a hang fails the test instead of stalling the suite."""
    return subprocess.run(
        [sys.executable, "-m", "edge_runtime.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        **kw,
    )


def cli_child(*args: str, stdout=subprocess.PIPE, text: bool = True) -> subprocess.Popen:
    """`edge-runtime ARGS` started in a child (stderr piped, for read_until), for a test that signals it, races it or
    reads its progress: end it with `end` or `reaped`."""
    return subprocess.Popen([sys.executable, "-m", "edge_runtime.cli", *args], cwd=ROOT, stdout=stdout,
                            stderr=subprocess.PIPE, text=text)  # fmt: skip


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`edge-runtime ARGS` in a child process, from the checkout, with a deadline; `env` adds to this environment."""
    return cli(*args, timeout=180, env={**os.environ, **(env or {})})


def sustained_ips(model: str, cpus: str = "1") -> float:
    """What `model` sustains on this machine now, one inference at a time on `cpus` (a closed loop of 0.5 s): the CPU
    and its load change between sessions, so a test that overloads a target measures the rate first."""
    import json

    proc = run_cli("bench", model, "--cpus", cpus, "--duration", "0.5", "--warmup", "20", "--json")
    assert proc.returncode == 0, proc.stderr
    return float(json.loads(proc.stdout)["throughput_ips"])


def assert_one_line_error(proc, *needles: str, code: int = 2, program: str = "edge-runtime") -> None:
    """The error contract: exit `code`, one line on stderr starting `PROGRAM: error: `, no traceback."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{program}: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def request(model: str, **kw) -> BenchRequest:
    """A BenchRequest from test-friendly arguments (lists for CPU lists and stress specs; no crash-check child)."""
    if kw.get("cpus") is not None:
        kw["cpus"] = tuple(kw["cpus"])
    if "stress" in kw:
        kw["stress"] = tuple(kw["stress"])
    kw.setdefault("sandbox", False)
    return BenchRequest(model=str(model), **kw)


def bench(req: BenchRequest, root, progress=None) -> dict:
    """run_bench, its result as the JSON dict `edge-runtime bench --json` writes."""
    return run_bench(req, root, progress=progress).result.to_dict()


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Files of a fake system tree under `root` (relative path -> text), directories made as needed."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def fixture(name: str) -> Path:
    """A capture from ../shared/fixtures; the test skips, saying where it looked, when the captures are not there."""
    p = FIXTURES / name
    if not p.exists():
        pytest.skip(f"fixture {p} not found (../shared/fixtures beside the checkout)")
    return p


def x86_tree(tmp: Path) -> Path:
    """x86: node_exporter's sysfs capture (4 CPUs, intel_pstate cpufreq), IRQs of its /proc/interrupts capture."""
    src = fixture("x86-node-exporter")
    t = tmp / "x86"
    shutil.copytree(src / "sys", t / "sys")
    for line in (src / "proc/interrupts").read_text().splitlines()[1:]:
        irq = line.split(":")[0].strip()
        if irq.isdigit():
            (t / f"proc/irq/{irq}").mkdir(parents=True)
            (t / f"proc/irq/{irq}/smp_affinity_list").write_text("0-3\n")
    (t / "proc/irq/default_smp_affinity").write_text("f\n")
    (t / "proc/sys/kernel").mkdir(parents=True)
    (t / "proc/sys/kernel/timer_migration").write_text("1\n")
    (t / "proc/sys/kernel/sched_rt_runtime_us").write_text("950000\n")
    for wq in ("sys/devices/virtual/workqueue", "sys/devices/virtual/workqueue/writeback"):
        (t / wq).mkdir(parents=True, exist_ok=True)
        (t / wq / "cpumask").write_text("f\n")
    for q, mask in (("rx-0", "0"), ("rx-1", "c")):
        (t / f"sys/class/net/eth0/queues/{q}").mkdir(parents=True)
        (t / f"sys/class/net/eth0/queues/{q}/rps_cpus").write_text(mask + "\n")
    (t / "sys/devices/system/cpu/intel_pstate").mkdir(parents=True, exist_ok=True)
    (t / "sys/devices/system/cpu/intel_pstate/no_turbo").write_text("0\n")
    (t / "etc/default").mkdir(parents=True)
    (t / "etc/default/irqbalance").write_text("#IRQBALANCE_ONESHOT=\nIRQBALANCE_BANNED_CPULIST=1\n")
    return t


def read_until(proc: subprocess.Popen, needle: str | re.Pattern, timeout: float = 120.0) -> list[str]:
    """proc's stderr lines up to the first that holds `needle` (a string, or a compiled regex that searches the line).
    Fails (and kills proc) if none comes within `timeout` s, or if the stream ends first. The lines after it are left to
    proc.communicate(). The default deadline allows for a server or an agent starting first on a loaded machine."""
    seen: list[str] = []
    found = needle.search if isinstance(needle, re.Pattern) else (lambda line: needle in line)
    what = needle.pattern if isinstance(needle, re.Pattern) else needle

    def read() -> None:
        for line in proc.stderr:
            seen.append(line)
            if found(line):
                return

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        proc.kill()  # the reader ends with the pipe
        t.join(10)
        raise AssertionError(f"no {what!r} line within {timeout:g} s: {''.join(seen)[-2000:]}")
    assert seen and found(seen[-1]), f"ended (exit {proc.wait(10)}) before a {what!r} line: {''.join(seen)}"
    return seen


@contextlib.contextmanager
def reaped(proc: subprocess.Popen):
    """`with reaped(Popen(...)) as proc:` the child is killed and reaped when the block ends, however it ends (a
    failed assertion must not leave a bench running behind the next test)."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def end(*procs: subprocess.Popen) -> None:
    """Kill and reap whichever of `procs` is still running (a test's finally: no child outlives it)."""
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(10)


def strict_json(text: str):
    """json.loads that refuses NaN and Infinity, which are not JSON."""

    def bad(name):
        raise AssertionError(f"{name} in JSON output")

    return json.loads(text, parse_constant=bad)


def mknod_char(path: Path, major: int = 1, minor: int = 3) -> Path:
    """A character device node (1:3 is /dev/null) under tmp_path: writing to it loses nothing of the test machine."""
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    return path


def fifo_reader(path: Path) -> tuple[threading.Thread, list[bytes]]:
    """Read everything written into the fifo at `path`, in a thread."""
    got: list[bytes] = []

    def read():
        with open(path, "rb") as f:
            got.append(f.read())

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t, got


def make_fifo(tmp_path: Path, name: str) -> Path:
    p = tmp_path / name
    os.mkfifo(p)
    return p


def four_cpu_tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "sys/devices/system/cpu").mkdir(parents=True)
    (root / "sys/devices/system/cpu/online").write_text("0-3\n")
    return root


def tree_with(tmp_path: Path, files: dict[str, str]) -> Path:
    return write_tree(four_cpu_tree(tmp_path), files)


def thermal_tree(tmp_path: Path, temps: dict[str, str], cooling: dict | None = None) -> Path:
    root = tmp_path / "root"
    for i, (ztype, raw) in enumerate(temps.items()):
        z = root / f"sys/class/thermal/thermal_zone{i}"
        z.mkdir(parents=True)
        (z / "type").write_text(ztype + "\n")
        (z / "temp").write_text(raw + "\n")
        (z / "trip_point_0_temp").write_text("85000\n")
        (z / "trip_point_0_type").write_text("passive\n")
    for j, (ctype, (cur, mx)) in enumerate((cooling or {}).items()):
        c = root / f"sys/class/thermal/thermal_zone0/cdev{j}"
        c.mkdir(parents=True)
        (c / "type").write_text(ctype + "\n")
        (c / "cur_state").write_text(f"{cur}\n")
        (c / "max_state").write_text(f"{mx}\n")
    return root


def state_key(root: Path) -> str:
    from edge_runtime.system.tuning import root_key

    return root_key(str(root))
