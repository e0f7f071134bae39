"""Parse /proc/interrupts (x86 and ARM layouts) and count what landed on given CPUs between two reads.

Pure functions: the text comes from `SystemRoot.read("/proc/interrupts")`. Layout (Documentation/filesystems/proc.rst):
a header of `CPUn` columns (online CPUs only, so the column index is not the CPU number), then one row per source:
`NAME:` followed by one count per column and a description. Numbered rows are device IRQs (the last word of the
description names the device); named rows are per-CPU kernel events (LOC, RES, CAL, TLB on x86; IPI0..IPI6 on ARM).
Rows with fewer counts than columns (ERR, MIS, Err) are totals, not per CPU, and are kept out of per-CPU counts;
rows with no counts at all (FIQ on old Raspberry Pis) are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from edge_runtime.system.cpulist import is_number

_HEADER = re.compile(r"CPU(\d+)")
_ROW = re.compile(r"^\s*([^:\s]+):(.*)$")


@dataclass(frozen=True)
class InterruptRow:
    name: str  # "24", "LOC", "IPI0"
    label: str  # what a person calls it: the device for numbered IRQs ("virtio0-input"), else the name
    description: str
    per_cpu: dict[int, int]  # CPU number -> count


def parse_interrupts(text: str) -> dict[str, InterruptRow]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return {}
    cpus = [int(m) for m in _HEADER.findall(lines[0])]
    rows: dict[str, InterruptRow] = {}
    for line in lines[1:]:
        m = _ROW.match(line)
        if not m:
            continue
        name, rest = m.group(1), m.group(2).split()
        counts: list[int] = []
        while rest and len(counts) < len(cpus) and is_number(rest[0]):
            counts.append(int(rest.pop(0)))
        if len(counts) != len(cpus):
            continue  # a total (ERR/MIS/Err) or no counts (FIQ): not attributable to a CPU
        description = " ".join(rest)
        if is_number(name):
            label = rest[-1] if len(rest) >= 2 else (description or f"irq{name}")
        else:
            label = name
        rows[name] = InterruptRow(name, label, description, dict(zip(cpus, counts, strict=True)))
    return rows


def interrupt_delta(
    before: dict[str, InterruptRow], after: dict[str, InterruptRow], cpus: list[int]
) -> dict[int, list[tuple[str, str, int]]]:
    """Per CPU of `cpus`: [(row name, label, count)] of the sources that fired between the reads, most first.

    A counter that went backwards (a row that vanished and came back, a wrap) counts as zero rather than negative.
    """
    out: dict[int, list[tuple[str, str, int]]] = {}
    for cpu in cpus:
        fired = []
        for name, row in after.items():
            if cpu not in row.per_cpu:
                continue
            prev = before.get(name)
            delta = row.per_cpu[cpu] - (prev.per_cpu.get(cpu, 0) if prev else 0)
            if delta > 0:
                fired.append((name, row.label, delta))
        fired.sort(key=lambda r: (-r[2], r[0]))
        out[cpu] = fired
    return out
