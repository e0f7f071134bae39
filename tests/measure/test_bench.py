"""`edge-runtime bench` end to end: real backends, real threads, fake system trees from ../shared/fixtures."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from conftest import FIXTURES, ROOT, artifact, need
from helpers import assert_one_line_error, bench, cli, read_until, reaped, request, run_cli, thermal_tree

from edge_runtime import results
from edge_runtime.measure.corunners import StressSpec
from edge_runtime.results import BENCH_SCHEMA as SCHEMA
from edge_runtime.system.root import SystemRoot

MODEL = ("digits_cnn", "_int8.onnx")
DESIGN_KEYS = {
    "model": {"path", "sha256", "format", "precision"},
    "backend": {"name", "version", "device", "delegate", "fallback"},
    "config": {"threads", "cpus", "rt_priority", "mlock", "warmup", "iterations", "duration_s"},
    "latency_us": {"count", "min", "mean", "std", "p50", "p90", "p95", "p99", "p999", "p9999", "max"},
    "jitter_us": {"p99_minus_p50", "max_minus_min"},
    "pinning": {"requested", "all_threads_pinned", "threads"},
    "interference": {"interrupts", "context_switches_involuntary", "migrations", "page_faults_major"},
    "thermal": {"available", "start_c", "max_c", "end_c", "limit_c", "headroom_c", "throttled", "zones"},
    "power": {"available", "rail", "avg_w", "energy_per_inference_uj"},
    "quality": {"timer_overhead_ns", "percentile_method", "unstable", "warnings"},
    "environment": {"board", "kernel", "cmdline", "cpu_model", "governor", "isolated_cpus", "python", "packages"},
}


def spawn_bench(*args: str) -> subprocess.Popen:
    """`edge-runtime bench` on the reference model in a child process, still running when this returns."""
    return subprocess.Popen(
        [sys.executable, "-m", "edge_runtime.cli", "bench", str(artifact(*MODEL)), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stress_processes() -> list[str]:
    """The co-runners running now, by their whole command line. (Not `ps -eo args`: it cuts lines at 80 columns when it
    decides so, and under QEMU user-mode every command line starts with the ~90-character interpreter path, so the
    hog's marker fell past the cut and the tests saw no co-runner on arm64.)"""
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        line = " ".join(p.info["cmdline"] or [])
        if "stress-ng" in line or "edge_runtime_hog" in line:
            out.append(f"{p.info['pid']} {line}")
    return out


def stress_left(timeout: float = 10.0) -> list[str]:
    """The co-runners still there once `timeout` s have passed ([] as soon as none is): an exiting process can show
    in ps for a moment after its parent has stopped it, on a loaded machine for longer."""
    deadline = time.monotonic() + timeout
    while (left := stress_processes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_json_result_has_the_design_schema():
    need("onnxruntime")
    proc = run_cli("bench", str(artifact(*MODEL)), "--iterations", "300", "--cpus", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["schema"] == SCHEMA
    assert results.load(r).to_dict() == r  # read back through the records the host uses
    for section, keys in DESIGN_KEYS.items():
        assert keys <= set(r[section]), (section, keys - set(r[section]))
    assert "throughput_ips" in r and r["throughput_ips"] > 0
    lat = r["latency_us"]
    assert lat["count"] == 300
    assert lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p999"] <= lat["max"]
    assert sum(c for _, c in r["histogram_us"]) == 300
    assert r["pinning"]["all_threads_pinned"] is True
    assert all(t["cpus"] == [1] for t in r["pinning"]["threads"])
    assert r["config"]["threads"] == 1  # one CPU given: the backend's pool matches it
    assert r["quality"]["timer_overhead_ns"] > 0
    assert "nearest-rank" in r["quality"]["percentile_method"]
    assert r["environment"]["packages"]["onnxruntime"]


def test_text_report_and_histogram():
    need("openvino")
    proc = run_cli(
        "bench", str(artifact("digits_cnn", "_int8.xml")), "--iterations", "200", "--cpus", "0", "--histogram"
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for line in ("latency us   min", "pinning      all", "interference CPU0:", "# Histogram", "# Max Latencies:"):
        assert line in out, out
    rows = [ln for ln in out.splitlines() if ln[:6].isdigit()]
    assert sum(int(ln.split()[1]) for ln in rows) + int(out.split("# Histogram Overflows: ")[1].split()[0]) == 200
    # 200 samples hold a p99 (2 beyond it) but not a p99.9 or p99.99: those would be the max, so they are not shown
    lat = next(ln for ln in out.splitlines() if ln.startswith("latency us"))
    assert " p99 " in lat and "p99.9 -  p99.99 -  max " in lat, lat


def test_pinning_seen_from_outside_the_process():
    """While a bench runs, read /proc/PID/task/*/status of it: every thread must be allowed on CPU 1 only."""
    need("onnxruntime")
    proc = spawn_bench("--cpus", "1", "--threads", "2", "--duration", "4", "--json")
    try:
        seen: dict[str, str] = {}
        sampler_cpus: set[str] = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            tasks = Path(f"/proc/{proc.pid}/task")
            try:
                for t in tasks.iterdir():
                    status = (t / "status").read_text().splitlines()
                    name = next(ln for ln in status if ln.startswith("Name:")).split(":", 1)[1].strip()
                    cpus = next(ln for ln in status if ln.startswith("Cpus_allowed_list"))
                    if name == "edge-sampler":  # the thermal sampler: on a housekeeping CPU by design
                        sampler_cpus.add(cpus.split(":")[1].strip())
                        continue
                    seen[t.name] = cpus
            except (OSError, StopIteration):
                continue
            if len(seen) >= 3 and sampler_cpus and all(v.endswith("\t1") for v in seen.values()):
                break
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert len(seen) >= 3
    assert {v.split(":")[1].strip() for v in seen.values()} == {"1"}, seen
    assert sampler_cpus == {"0"}  # the sampler never sits on the measured CPU
    r = json.loads(out)
    assert r["pinning"]["all_threads_pinned"] and len(r["pinning"]["threads"]) >= 3, r["pinning"]


def _fake_root(tmp_path: Path, board: str = "rpi5", irq_tree: str = "amlogic-a53-irqbalance-issue") -> Path:
    """A board tree for 2 CPUs: the board's captures, IRQ affinities from a real capture, /proc/interrupts from x86."""
    src = FIXTURES / board
    if not src.exists():
        pytest.skip(f"fixture {src} not found")
    root = tmp_path / "root"
    shutil.copytree(src, root)
    shutil.copytree(FIXTURES / irq_tree / "proc" / "irq", root / "proc" / "irq")
    (root / "sys/devices/system/cpu").mkdir(parents=True, exist_ok=True)
    (root / "sys/devices/system/cpu/online").write_text("0-1\n")
    return root


def test_isolation_warnings_on_a_board_tree(tmp_path):
    need("onnxruntime")
    root = _fake_root(tmp_path)
    cfg = request(model=str(artifact(*MODEL)), cpus=[1], iterations=100, sandbox=False)
    r = bench(cfg, SystemRoot(root))
    warnings = r["quality"]["warnings"]
    assert any("CPU 1 not isolated" in w for w in warnings)
    # In the Amlogic capture IRQ 15 is pinned to CPU 1 (mask 2) and most others may go anywhere (mask f).
    assert "15" in r["isolation"]["irqs_routed_to_cpus"] and "14" not in r["isolation"]["irqs_routed_to_cpus"]
    assert any("IRQ(s) may be delivered to CPU 1" in w for w in warnings)

    cmdline = root / "proc/cmdline"
    cmdline.write_text(cmdline.read_text().strip() + " isolcpus=managed_irq,domain,1 nohz_full=1 rcu_nocbs=1\n")
    r = bench(cfg, SystemRoot(root))
    assert not any("not isolated" in w for w in r["quality"]["warnings"])
    assert r["isolation"]["isolcpus"] == [1] and r["environment"]["cmdline"].endswith("rcu_nocbs=1")


@pytest.mark.parametrize("capture", ["x86-node-exporter", "arm64-node-exporter"])
def test_interference_counts_the_interrupts_of_the_measured_part(tmp_path, capture):
    """A helper thread rewrites the fake /proc/interrupts while a real bench runs: the result names what fired."""
    need("onnxruntime")
    root = _fake_root(tmp_path)
    text = (FIXTURES / capture / "proc/interrupts").read_text()
    interrupts = root / "proc/interrupts"
    interrupts.write_text(text)
    lines = text.splitlines()
    loc = "LOC" if any(ln.strip().startswith("LOC:") for ln in lines) else "IPI0"

    said: list[str] = []

    def bump(msg: str) -> None:
        """At the first "measuring" message: the bench read its "before" when the measured part began, and reads its
        "after" when it ends, so whatever the machine's speed the interrupts fire inside the measured part."""
        said.append(msg)
        if not msg.startswith("measuring") or sum(m.startswith("measuring") for m in said) > 1:
            return
        out = []
        for line in lines:
            name, sep, rest = line.partition(":")
            if sep and name.strip() == loc:
                parts = rest.split()
                parts[1] = str(int(parts[1]) + 412)  # CPU1
                line = f"{name}:" + " ".join(parts)
            out.append(line)
        interrupts.write_text("\n".join(out) + "\n")

    # 3 s: the first "measuring" message comes at a chunk's end 1 s or more in, before the last chunk
    cfg = request(model=str(artifact(*MODEL)), cpus=[1], duration_s=3.0, sandbox=False)
    r = bench(cfg, SystemRoot(root), progress=bump)
    assert any(m.startswith("measuring") for m in said), said
    inter = r["interference"]
    assert inter["interrupts"] == 412
    assert inter["interrupts_per_cpu"]["1"] == [{"source": loc, "label": loc, "count": 412}]
    from edge_runtime.program.bench_text import format_report

    assert f"CPU1: 412 {loc}" in format_report(r)


@pytest.mark.parametrize("tool", ["stress-ng", "builtin"])
def test_stress_co_runner_runs_and_is_stopped(tool, monkeypatch):
    need("onnxruntime")
    if tool == "stress-ng" and not shutil.which("stress-ng"):
        pytest.skip("stress-ng not installed: apt-get install stress-ng (make test does this as root)")
    monkeypatch.setenv("EDGE_RUNTIME_STRESS_TOOL", tool)
    seen_during: list[str] = []
    said: list[str] = []

    def watch(msg: str) -> None:  # at the first "measuring" message: the measured part is under way
        said.append(msg)
        if msg.startswith("measuring") and sum(m.startswith("measuring") for m in said) == 1:
            seen_during.extend(stress_processes())

    cfg = request(
        model=str(artifact(*MODEL)), cpus=[1], duration_s=2.0, stress=[StressSpec.parse("cpu:0")], sandbox=False
    )
    r = bench(cfg, SystemRoot("/"), progress=watch)
    assert r["config"]["stress"] == [{"kind": "cpu", "cpus": [0], "tool": tool}]
    assert seen_during, f"no co-runner was running during the measurement: {said}"
    assert stress_left() == []


def test_stress_is_stopped_when_the_run_fails(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07" + os.urandom(300))
    proc = run_cli("bench", str(bad), "--stress", "cpu:0", "--iterations", "10")
    assert_one_line_error(proc, str(bad))
    assert stress_left() == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stress_is_stopped_on_ctrl_c_and_sigterm(sig):
    need("onnxruntime")
    with reaped(spawn_bench("--cpus", "1", "--duration", "30", "--stress", "cpu:0")) as proc:
        # The co-runner starts before the measured part, which a slow board (or QEMU) reaches in its own time: wait
        # for the bench to say so, not for a guess at its start-up.
        read_until(proc, "measuring", timeout=300)
        assert stress_processes(), "no co-runner while the bench measures"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig, err  # 130 for SIGINT, 143 for SIGTERM
    assert "interrupted" in err and "Traceback" not in err
    assert stress_left() == []


def test_stress_refuses_the_measured_cpus():
    need("onnxruntime")
    proc = run_cli("bench", str(artifact(*MODEL)), "--cpus", "1", "--stress", "cpu:1", "--iterations", "10")
    assert_one_line_error(proc, "overlaps the measured CPUs 1")
    assert_one_line_error(run_cli("bench", str(artifact(*MODEL)), "--stress", "gpu:0"), "--stress 'gpu:0'")


def test_hdr_log_reads_back_with_hdrhistogram(tmp_path):
    need("onnxruntime")
    hdrh_log = pytest.importorskip("hdrh.log", reason="hdrhistogram not installed: pip install 'edge-runtime[dev]'")
    from hdrh.histogram import HdrHistogram

    log = tmp_path / "run.hlog"
    proc = run_cli("bench", str(artifact(*MODEL)), "--iterations", "500", "--hdr-log", str(log), "--json")
    r = json.loads(proc.stdout)
    text = log.read_text()
    assert text.startswith("#") and "#[StartTime: " in text and '"StartTimestamp","Interval_Length"' in text
    reader = hdrh_log.HistogramLogReader(str(log), HdrHistogram(1, 3_600_000_000_000, 3))
    h = reader.get_next_interval_histogram()
    assert h is not None and h.get_total_count() == 500
    # HDR keeps 3 significant digits: its percentiles are within 0.1% of the exact nearest-rank ones.
    assert h.get_value_at_percentile(50) / 1e3 == pytest.approx(r["latency_us"]["p50"], rel=2e-3)
    assert h.get_max_value() / 1e3 == pytest.approx(r["latency_us"]["max"], rel=2e-3)


def test_rt_priority_and_mlock_are_applied_as_root():
    need("onnxruntime")
    if os.geteuid() != 0:
        pytest.skip("needs root (or CAP_SYS_NICE and CAP_IPC_LOCK)")
    code = (
        "import os, json, edge_runtime.measure.bench as b, edge_runtime.system.process as s\n"
        "from edge_runtime.system import SystemRoot\n"
        "seen = {}\n"
        "orig = b.measure\n"
        "def spy(fn, **kw):\n"
        "    seen['policy'] = {t.tid: os.sched_getscheduler(t.tid) for t in s.own_threads()}\n"
        "    seen['locked'] = [l for l in open('/proc/self/status') if l.startswith('VmLck')][0].split()[1]\n"
        "    return orig(fn, **kw)\n"
        "b.measure = spy\n"
        "from edge_runtime.measure.request import BenchRequest\n"
        f"b.run_bench(BenchRequest(model={str(artifact(*MODEL))!r}, cpus=(1,), rt_priority=10, mlock=True,"
        " iterations=50, sandbox=False), SystemRoot('/'))\n"
        "print(json.dumps({'policies': sorted(set(seen['policy'].values())), 'locked_kb': int(seen['locked']),"
        " 'after': os.sched_getscheduler(0)}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["policies"] == [os.SCHED_FIFO]  # every thread, the backend's too, during the measurement
    assert got["locked_kb"] > 0
    assert got["after"] == os.SCHED_OTHER  # restored afterwards


# Drops to nobody *after* everything is imported and the board profiles are read, inside one root process: the
# checkout may lie where nobody cannot go (a clone under /root, a private mktemp -d), and so may the interpreter.
_DROP_AND_BENCH = """
import importlib, os, pkgutil, resource, secrets, shutil, sys, tempfile
import numpy, numpy.random
import edge_runtime
from edge_runtime import cli
from edge_runtime.runtime import backends
from edge_runtime.system import boards
for m in pkgutil.walk_packages(edge_runtime.__path__, "edge_runtime."):  # every module, before they are unreadable
    if not m.name.endswith("__main__"):
        importlib.import_module(m.name)
backends.get("onnxruntime").library_version()  # imports onnxruntime, telemetry off
boards.load_all()
shared = tempfile.mkdtemp(prefix="er-priv-")  # world-readable, unlike the checkout may be
os.chmod(shared, 0o755)
model = os.path.join(shared, "m.onnx")
shutil.copyfile(sys.argv[1], model)
os.chmod(model, 0o644)
resource.setrlimit(resource.RLIMIT_RTPRIO, (0, 0))
resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 << 10, 64 << 10))
os.chdir(shared)
os.setgroups([])
os.setresgid(65534, 65534, 65534)
os.setresuid(65534, 65534, 65534)  # from root to another user: every capability is dropped too
try:
    code = cli.main(["bench", model, "--iterations", "10", "--no-isolate", sys.argv[2]])
finally:
    shutil.rmtree(shared, ignore_errors=True)
sys.exit(code)
"""


@pytest.mark.parametrize(("flag", "needle"), [("--rt-priority=10", "CAP_SYS_NICE"), ("--mlock", "RLIMIT_MEMLOCK")])
def test_missing_privilege_says_what_to_grant(flag, needle):
    need("onnxruntime")
    if os.geteuid() != 0:
        pytest.skip("needs root, to drop to an unprivileged user")
    proc = subprocess.run(
        [sys.executable, "-c", _DROP_AND_BENCH, str(artifact(*MODEL)), flag],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "HOME": "/tmp"},
    )
    assert_one_line_error(proc, needle)


def test_platform_latency_from_cyclictest():
    need("onnxruntime")
    if not shutil.which("cyclictest"):
        pytest.skip("cyclictest not installed: apt-get install rt-tests (make test does this as root)")
    proc = run_cli(
        "bench", str(artifact(*MODEL)), "--cpus", "1", "--iterations", "100", "--platform-latency", "1", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    pl = json.loads(proc.stdout)["platform_latency"]
    assert pl["tool"] == "cyclictest" and pl["cpus"] == [1]
    assert 0 <= pl["min_us"] <= pl["avg_us"] <= pl["max_us"]
    assert sum(c for _, c in pl["histogram"]) > 1000  # 1 s at 200 us intervals


def test_bench_bad_flags():
    need("onnxruntime")
    m = str(artifact(*MODEL))
    assert_one_line_error(run_cli("bench", m, "--iterations", "0"), "--iterations 0")
    assert_one_line_error(run_cli("bench", m, "--rt-priority", "120"), "--rt-priority 120")
    assert_one_line_error(run_cli("bench", m, "--iterations", "5", "--duration", "1"), "not allowed with argument")


def test_a_pinned_run_leaves_the_caller_as_it_was():
    need("onnxruntime")
    before = os.sched_getaffinity(0)
    bench(request(model=str(artifact(*MODEL)), cpus=[1], iterations=50, sandbox=False), SystemRoot("/"))
    assert os.sched_getaffinity(0) == before


def test_duration_mode_and_warmup_are_excluded():
    need("tflite")
    cfg = request(model=str(artifact("digits_cnn", "_int8.tflite")), duration_s=0.5, warmup=123, sandbox=False)
    r = bench(cfg, SystemRoot("/"))
    assert r["config"]["warmup"] == 123
    # Never short of the duration; past it only by the call in flight at the deadline (the run's slowest call at most)
    # and a stall before the clock is read (1 s covers a loaded VM's).
    assert 0.5 <= r["wall_s"] <= 0.5 + r["latency_us"]["max"] / 1e6 + 1.0, (r["wall_s"], r["latency_us"]["max"])
    assert r["latency_us"]["count"] == pytest.approx(r["throughput_ips"] * r["wall_s"], rel=1e-6)
    assert np.isfinite(r["latency_us"]["p9999"])


def test_output_paths_are_checked_before_the_run(tmp_path):
    need("onnxruntime")
    blocker = tmp_path / "file"
    blocker.write_text("")
    t0 = time.monotonic()
    proc = run_cli("bench", str(artifact(*MODEL)), "--duration", "30", "--hdr-log", str(blocker / "x.hlog"))
    assert_one_line_error(proc, "--hdr-log", "is not a directory")
    assert time.monotonic() - t0 < 20  # refused at once, not after a 30 s measurement
    for flag in ("--json", "--hdr-log", "--prom"):
        proc = run_cli("bench", str(artifact(*MODEL)), flag, str(artifact(*MODEL)), "--iterations", "5")
        assert_one_line_error(proc, flag, "refusing to overwrite it")


# ------------------------------------------------------------------------------------ hostile cases (issue 9's reviews)
DIGITS_INT8 = artifact("digits_cnn", "_int8.onnx")


def _ps(needle: str) -> list[str]:
    # -ww: whole command lines (ps may cut them at 80 columns; under QEMU they start with the interpreter's path)
    cmd = ["ps", "-ww", "-eo", "pid,cls,rtprio,args"]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()
    return [ln for ln in out if needle in ln and "ps -ww" not in ln]


def test_sigkill_takes_the_realtime_cyclictest_with_it():
    need("onnxruntime")
    if not shutil.which("cyclictest") or os.geteuid() != 0:
        pytest.skip("needs cyclictest (apt-get install rt-tests) and root for SCHED_FIFO")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edge_runtime.cli",
            "bench",
            str(DIGITS_INT8),
            "--platform-latency",
            "15",
            "--rt-priority",
            "50",
            "--iterations",
            "10",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not _ps("cyclictest -q") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _ps("cyclictest -q"), "cyclictest never started"
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while _ps("cyclictest -q") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _ps("cyclictest -q") == []
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run(["pkill", "-f", "cyclictest -q -m -p 50"])


def test_a_duration_too_short_for_one_inference():
    need("onnxruntime")
    assert_one_line_error(cli("bench", DIGITS_INT8, "--warmup", "0", "--duration", "1e-9"), "no inference completed")


def test_a_run_that_starts_above_the_limit_is_refused(tmp_path):
    need("onnxruntime")
    root = thermal_tree(tmp_path, {"cpu-thermal": "57000"})
    t0 = time.monotonic()
    proc = cli("bench", DIGITS_INT8, "--sysroot", root, "--thermal-limit", "50", "--duration", "30")
    assert_one_line_error(proc, "already above the thermal limit before measuring: 57.0 C > 50 C", code=1)
    assert time.monotonic() - t0 < 25


def test_the_python_api_never_writes_its_log_over_the_model(tmp_path):
    need("onnxruntime")
    from edge_runtime.errors import UserError
    from edge_runtime.measure.bench import run_bench
    from edge_runtime.measure.request import BenchRequest
    from edge_runtime.system import SystemRoot

    model = tmp_path / "m.onnx"
    shutil.copyfile(DIGITS_INT8, model)
    with pytest.raises(UserError, match="is the model"):
        run_bench(BenchRequest(model=str(model), iterations=10, sandbox=False), SystemRoot("/"), hdr_log=str(model))
    assert model.read_bytes() == DIGITS_INT8.read_bytes()
