"""/proc/interrupts parsing on real x86 and ARM captures, and per-CPU deltas between two reads."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

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
