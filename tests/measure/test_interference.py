"""/proc/interrupts parsing on real x86 and ARM captures, and per-CPU deltas between two reads."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest
from conftest import FIXTURES, ROOT, artifact, need
from helpers import cli, end, four_cpu_tree, read_until, strict_json

from edge_runtime.measure.interference import interrupt_delta, parse_interrupts


def _read(name: str) -> str:
    path = FIXTURES / name / "proc" / "interrupts"
    if not path.exists():
        pytest.skip(f"fixture {path} not found (../shared/fixtures beside the checkout)")
    return path.read_text()


def test_x86_layout():
    rows = parse_interrupts(_read("x86-procfs"))
    assert rows["0"].per_cpu == {0: 49, 1: 0, 2: 0, 3: 0}
    assert rows["0"].label == "timer"
    assert rows["1"].label == "i8042" and rows["1"].per_cpu[3] == 9
    assert rows["LOC"].label == "LOC" and len(rows["LOC"].per_cpu) == 4
    assert "ERR" not in rows and "MIS" not in rows  # totals, not per CPU


def test_arm64_layout_with_ipis_glued_to_their_counts():
    text = _read("arm64-node-exporter")
    rows = parse_interrupts(text)
    assert rows["IPI0"].per_cpu[0] == 2768808080  # "IPI0:2768808080 ..." has no space after the colon
    assert rows["IPI0"].description == "Rescheduling interrupts"
    assert rows["10"].label == "arch_timer" and rows["10"].per_cpu[7] == 3225020442
    assert "Err" not in rows
    assert all(len(r.per_cpu) == 8 for r in rows.values())


def test_single_core_pi_with_unnamed_rows_and_fiq():
    rows = parse_interrupts(_read("rpi1-bosun-issue"))
    assert rows["3"].per_cpu == {0: 119269}
    assert rows["32"].label == "dwc_otg_hcd:usb1"
    assert "FIQ" not in rows  # no counts on that row
    assert rows["75"].label == "ARMCTRL"  # no device name: the controller is the best label there is


def test_delta_counts_only_what_fired_on_the_chosen_cpus():
    before = parse_interrupts(_read("x86-node-exporter"))
    text = _read("x86-node-exporter")
    lines = text.splitlines()
    header = lines[0]
    cpus = len(header.split())
    # Bump the local timer on CPU 1 by 412 and the first numbered IRQ on CPU 1 by 37, CPU 0 by 5.
    out = [header]
    first_irq = None
    for line in lines[1:]:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if name.strip() == "LOC":
            parts[1] = str(int(parts[1]) + 412)
        elif first_irq is None and name.strip().isdigit() and len(parts) > cpus:
            first_irq = name.strip()
            parts[0] = str(int(parts[0]) + 5)
            parts[1] = str(int(parts[1]) + 37)
        out.append(f"{name}: " + " ".join(parts))
    after = parse_interrupts("\n".join(out))
    fired = interrupt_delta(before, after, [1])
    assert list(fired) == [1]
    assert fired[1][0] == ("LOC", "LOC", 412)
    assert fired[1][1][0] == first_irq and fired[1][1][2] == 37
    assert interrupt_delta(before, after, [0])[0] == [(first_irq, before[first_irq].label, 5)]
    assert interrupt_delta(after, before, [1]) == {1: []}  # counters going backwards are not negative counts


# ------------------------------------------------------------------------------------ hostile cases (issue 9's reviews)
MODEL = artifact("digits_cnn", "_int8.onnx")


def measuring_bench(*args: str) -> subprocess.Popen:
    """A bench in the background, returned once it reports that it is measuring (about 1 s into its measured part)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "edge_runtime.cli", "bench", str(MODEL), *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    read_until(proc, "measuring")  # (its later progress lines stay in the pipe: a few KB a minute)
    return proc


def test_no_proc_interrupts_is_unknown_not_zero(tmp_path):
    need("onnxruntime")
    root = four_cpu_tree(tmp_path)
    r = strict_json(cli("bench", MODEL, "--sysroot", root, "--iterations", "200", "--json").stdout)
    assert r["interference"]["interrupts"] is None and r["interference"]["interrupts_per_cpu"] is None
    assert any("interrupts unknown" in w for w in r["quality"]["warnings"])
    text = cli("bench", MODEL, "--sysroot", root, "--iterations", "200").stdout
    assert (
        "interrupts unknown (see the warning below)" in text
        and "no interrupts" not in text
        and "no readable /proc/interrupts" in text
    )


def test_a_second_bench_on_the_same_cpu_sees_the_first():
    need("onnxruntime")
    # The first measures until it is told to stop, after the second has returned: it competes for the whole of the
    # second's measured part, however long the second takes to start.
    first = measuring_bench("--cpus", "1", "--duration", "60")
    try:
        r = strict_json(cli("bench", MODEL, "--cpus", "1", "--duration", "2", "--json").stdout)
    finally:
        first.send_signal(signal.SIGINT)
        try:
            first.wait(timeout=60)
        finally:
            end(first)
    inter = r["interference"]
    assert inter["runqueue_wait_share"] is not None and inter["runqueue_wait_share"] > 0.2, inter
    assert first.pid in [t["pid"] for t in inter["other_tasks"]], inter["other_tasks"]
    assert any(w.startswith("other tasks ran on the measured CPU 1") for w in r["quality"]["warnings"])


def test_a_capture_gives_no_interrupt_counts(tmp_path):
    need("onnxruntime")
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "x86-node-exporter", root)
    r = strict_json(cli("bench", MODEL, "--sysroot", root, "--iterations", "200", "--cpus", "1", "--json").stdout)
    assert r["interference"]["interrupts"] is None
    assert any("did not change during the run (a capture" in w for w in r["quality"]["warnings"])
    (root / "proc/interrupts").write_bytes(os.urandom(1 << 16))
    r = strict_json(cli("bench", MODEL, "--sysroot", root, "--iterations", "200", "--json").stdout)
    assert r["interference"]["interrupts"] is None


def test_a_competitor_that_ends_first_is_still_named():
    need("onnxruntime")
    first = measuring_bench("--cpus", "1", "--duration", "60")
    second = None
    # the second measures until told to stop, after the first has ended
    cmd = [sys.executable, "-m", "edge_runtime.cli", "bench", str(MODEL), "--cpus", "1", "--duration", "60", "--json"]
    try:
        second = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        read_until(second, "measuring")  # the second's measured part began with the first running beside it
        first.send_signal(signal.SIGINT)
        first.wait(timeout=60)  # the first has ended (and is reaped) while the second still measures
        assert second.poll() is None, "the second bench ended before the first"
        second.send_signal(signal.SIGINT)  # it ends now, its partial result whole
        out, err = second.communicate(timeout=60)
    finally:
        end(first, second)
    assert second.returncode == 130, err
    r = strict_json(out)
    inter = r["interference"]
    row = next((t for t in inter["other_tasks"] if t["pid"] == first.pid), None)
    assert row is not None, (first.pid, inter["other_tasks"], inter["runqueue_wait_share"])
    assert row["ended"] is True
    assert 0 < inter["runqueue_wait_share"] <= 1.0  # a share of the measured part, never more than all of it


def test_a_short_idle_run_waits_little_for_its_cpu():
    need("onnxruntime")
    shares = []
    for _ in range(3):
        r = strict_json(cli("bench", MODEL, "--iterations", "200", "--cpus", "1", "--json").stdout)
        share = r["interference"]["runqueue_wait_share"]
        assert share is not None and 0 <= share <= 1, r["interference"]  # a share of the measured part
        shares.append(share)
    # Waits little: a run this short can land on a moment the (shared, loaded) machine is busy, not all three.
    assert min(shares) < 0.5, shares
