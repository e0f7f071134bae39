"""Are the measured CPUs set apart? isolcpus / nohz_full / rcu_nocbs / irqaffinity from the observed kernel command
line and sysfs, and the IRQs that may still land on them. Warnings, not errors: a bench runs anywhere, and says where
it ran.
"""

from __future__ import annotations

from edge_runtime.system.cpulist import format_cpu_list
from edge_runtime.system.root import SystemRoot


def isolation_report(root: SystemRoot, cpus: list[int] | None) -> dict:
    """Are the measured CPUs set apart, and can IRQs still land on them? Warnings, not errors."""
    iso = root.isolation()
    isolated = set(iso.get("isolcpus", [])) | set(iso.get("nohz_full", [])) | set(iso.get("sysfs_isolated", []))
    out: dict = {
        "isolcpus": iso.get("isolcpus", []),
        "nohz_full": iso.get("nohz_full", []),
        "rcu_nocbs": iso.get("rcu_nocbs", []),
        "irqaffinity": iso.get("irqaffinity", []),
        "sysfs_isolated": iso.get("sysfs_isolated", []),
        "warnings": [],
    }
    if not cpus:
        out["warnings"].append("not pinned: the scheduler may move the measuring thread (use --cpus)")
        return out
    not_isolated = [c for c in cpus if c not in isolated]
    for key, raw in iso.get("garbled", {}).items():
        out["warnings"].append(f"{key}={raw!r} on the kernel command line is not a CPU list: isolation unknown")
    if root.read("/proc/cmdline") is None and not root.is_live:
        out["warnings"].append(f"isolation unknown: no /proc/cmdline in {root.root}")
    elif not_isolated:
        out["warnings"].append(
            f"CPU {format_cpu_list(not_isolated)} not isolated (no isolcpus/nohz_full for it on the kernel command "
            "line): other tasks may run there"
        )
    irqs = {irq: aff for irq, aff in root.irq_affinities().items() if set(aff) & set(cpus)}
    out["irqs_routed_to_cpus"] = sorted(irqs, key=int)
    if irqs:
        shown = ", ".join(sorted(irqs, key=int)[:8]) + (" ..." if len(irqs) > 8 else "")
        out["warnings"].append(f"{len(irqs)} IRQ(s) may be delivered to CPU {format_cpu_list(cpus)} ({shown})")
    return out
