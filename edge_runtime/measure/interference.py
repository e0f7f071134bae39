"""What disturbed a measurement: interrupts on the measured CPUs (/proc/interrupts, x86 and ARM layouts), the
measuring thread's context switches, migrations, page faults and run-queue wait, and the other tasks that used the
measured CPUs. Read just before the first timed call and just after the last, so they cover the measured part only.

The parsing is pure: the text comes from `SystemRoot.read("/proc/interrupts")`. Layout
(Documentation/filesystems/proc.rst): a header of `CPUn` columns (online CPUs only, so the column index is not the
CPU number), then one row per source: `NAME:` followed by one count per column and a description. Numbered rows are
device IRQs (the last word of the description names the device); named rows are per-CPU kernel events (LOC, RES,
CAL, TLB on x86; IPI0..IPI6 on ARM). Rows with fewer counts than columns (ERR, MIS, Err) are totals, not per CPU,
and are kept out of per-CPU counts; rows with no counts at all (FIQ on old Raspberry Pis) are skipped.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

from edge_runtime.results import Interference, OtherTask
from edge_runtime.system.cpulist import format_cpu_list, is_number
from edge_runtime.system.process import major_faults, schedstat, task_migrations, task_status
from edge_runtime.system.root import SystemRoot

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


# ------------------------------------------------------------------------------------------------- the counters
def counters(root: SystemRoot, tid: int) -> dict:
    """One reading of everything `delta` compares: interrupts through the system root (None when there is no
    /proc/interrupts or nothing in it parses: unknown, not zero), the rest of the live measuring thread."""
    st = task_status(tid)
    text = root.read("/proc/interrupts")
    rows = parse_interrupts(text) if text else None
    return {
        "interrupts": rows or None,
        "interrupts_text": text,
        "nonvoluntary": int(st.get("nonvoluntary_ctxt_switches", 0) or 0),
        "voluntary": int(st.get("voluntary_ctxt_switches", 0) or 0),
        "migrations": task_migrations(tid),
        "majflt": major_faults(),
        "schedstat": schedstat(tid),
        "t": time.perf_counter(),  # when schedstat was read: the wait share is over this window, not a longer one
    }


WAIT_SHARE_WARN = 0.02
OTHER_TASK_WARN_S = 0.05


def competing_tasks(before_tasks, after_tasks, cpus, before, after, wall_s: float) -> dict:
    """Who else ran on the measured CPUs during the measured part, and how long the measuring thread waited for them."""
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    tasks = []
    for key, (comm, ticks, cpu, _state) in after_tasks.items():
        if cpu not in cpus:
            continue
        prev = before_tasks.get(key)
        used = ticks - (prev[1] if prev else 0)
        if used > 0:
            tasks.append({"pid": key[0], "tid": key[1], "comm": comm, "cpu": cpu, "cpu_s": round(used / hz, 3)})
    # A task that was running on a measured CPU when the run began and has ended since: it competed, for how long
    # its /proc entry can no longer say.
    # (Gone from /proc, or a zombie its parent has not reaped yet.)
    ended = [
        {"pid": key[0], "tid": key[1], "comm": comm, "cpu": cpu, "cpu_s": None}
        for key, (comm, _ticks, cpu, state) in before_tasks.items()
        if (key not in after_tasks or after_tasks[key][3] in ("Z", "X")) and cpu in cpus and state == "R"
    ]
    by_pid: dict[int, dict] = {}
    for t in tasks + ended:
        row = by_pid.setdefault(
            t["pid"], {"pid": t["pid"], "comm": t["comm"], "cpus": set(), "cpu_s": 0.0, "ended": False}
        )
        row["cpus"].add(t["cpu"])
        if t["cpu_s"] is None:
            row["ended"] = True
        else:
            row["cpu_s"] = round(row["cpu_s"] + t["cpu_s"], 3)
    rows = sorted(by_pid.values(), key=lambda r: (-r["cpu_s"], not r["ended"]))
    for r in rows:
        r["cpus"] = sorted(r["cpus"])
    wait_ms = share = None
    if before.get("schedstat") and after.get("schedstat"):
        wait_ns = after["schedstat"][1] - before["schedstat"][1]
        wait_ms = round(wait_ns / 1e6, 3)
        window = after["t"] - before["t"] if "t" in before and "t" in after else wall_s
        share = round(min(1.0, wait_ns / 1e9 / window), 4) if window > 0 else None
    heavy = [r for r in rows if r["cpu_s"] >= OTHER_TASK_WARN_S or r["ended"]] or rows[:4]
    warning = None
    if [r for r in rows if r["cpu_s"] >= OTHER_TASK_WARN_S or r["ended"]] or (
        share is not None and share >= WAIT_SHARE_WARN
    ):
        named = (
            ", ".join(
                f"{r['comm']} (pid {r['pid']}, "
                + (f"{r['cpu_s']:.2f} s" if r["cpu_s"] else "ended during the run")
                + ")"
                for r in heavy[:4]
            )
            or "tasks that could not be named"
        )
        wait = f"the measuring thread waited {share:.0%} of the run for the CPU; " if share is not None else ""
        warning = f"other tasks ran on the measured CPU {format_cpu_list(cpus)}: {wait}{named}"
    return {"runqueue_wait_ms": wait_ms, "runqueue_wait_share": share, "tasks": rows[:20], "warning": warning}


def interference_section(
    root: SystemRoot, marks: dict, measured_cpus: list[int], wall_s: float, warnings: list[str]
) -> Interference:
    """The result's interference section: what disturbed the measured CPUs during the measured part, from the
    counters read just around it (`marks`; unknown, never zero, for a run stopped before it). Appends to `warnings`
    what could not be counted."""
    before, after = marks.get("before"), marks.get("after")
    if before is None or after is None:
        return Interference(cpus=tuple(measured_cpus))
    if before["interrupts"] is None or after["interrupts"] is None:
        fired = None
        warnings.append(f"interrupts unknown: no readable /proc/interrupts under {root.root} (not zero: unread)")
    elif not root.is_live and before["interrupts_text"] == after["interrupts_text"]:
        fired = None  # a captured file that nobody updates: no count was observed
        warnings.append(
            f"interrupts unknown: {root.root}/proc/interrupts did not change during the run (a capture, not a count)"
        )
    else:
        fired = interrupt_delta(before["interrupts"], after["interrupts"], measured_cpus)
    migrations = (
        after["migrations"] - before["migrations"]
        if after["migrations"] is not None and before["migrations"] is not None
        else None
    )
    others = competing_tasks(marks["others_before"], marks["others_after"], measured_cpus, before, after, wall_s)
    if others["warning"]:
        warnings.append(others["warning"])
    return Interference(
        cpus=tuple(measured_cpus),
        interrupts=None if fired is None else sum(c for rows in fired.values() for _, _, c in rows),
        interrupts_per_cpu=None
        if fired is None
        else {str(cpu): [{"source": n, "label": lbl, "count": c} for n, lbl, c in rows] for cpu, rows in fired.items()},
        context_switches_involuntary=after["nonvoluntary"] - before["nonvoluntary"],
        context_switches_voluntary=after["voluntary"] - before["voluntary"],
        migrations=migrations,
        page_faults_major=after["majflt"] - before["majflt"],
        runqueue_wait_ms=others["runqueue_wait_ms"],
        runqueue_wait_share=others["runqueue_wait_share"],
        other_tasks=tuple(
            OtherTask(t["pid"], t["comm"], tuple(t["cpus"]), t["cpu_s"], t["ended"]) for t in others["tasks"]
        ),
    )
