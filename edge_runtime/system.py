"""The one place edge_runtime touches the system: reads of /proc and /sys, and actions on this process.

Reads go through `SystemRoot(root)`, so a board's captured tree can be inspected anywhere and tests use fake trees
(`--sysroot DIR`). Every read is tolerant: a missing or unreadable file gives the fallback, never an exception.
What the process does to itself (pinning its threads) always acts on the live system: `/proc/self` is never
redirected, as DESIGN.md says.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from edge_runtime.cpulist import format_cpu_list, parse_cpu_list, parse_isolcpus
from edge_runtime.errors import PinningError


class SystemRoot:
    """Observed system state, read below `root` (default `/`)."""

    def __init__(self, root: str | os.PathLike[str] = "/"):
        self.root = Path(root)

    def path(self, rel: str) -> Path:
        return self.root / rel.lstrip("/")

    def read(self, rel: str, fallback: str | None = None) -> str | None:
        """Text of a file with trailing whitespace stripped, or `fallback` when it is missing or unreadable."""
        try:
            return self.path(rel).read_text(errors="replace").rstrip("\n\x00 ")
        except (OSError, ValueError):
            return fallback

    def read_bytes(self, rel: str) -> bytes | None:
        try:
            return self.path(rel).read_bytes()
        except OSError:
            return None

    def cpus(self, which: str) -> list[int] | None:
        """`online`, `possible`, `present`, `isolated`, `offline` from /sys/devices/system/cpu; None if unreadable."""
        text = self.read(f"/sys/devices/system/cpu/{which}")
        if text is None:
            return None
        try:
            return parse_cpu_list(text)
        except ValueError:
            return None  # garbled: treat as unknown rather than guess

    def online_cpus(self) -> list[int]:
        online = self.cpus("online")
        if online is not None:
            return online
        return list(range(os.cpu_count() or 1)) if self.root == Path("/") else []

    def cmdline(self) -> str:
        return self.read("/proc/cmdline", "") or ""

    def cmdline_args(self) -> dict[str, str]:
        args: dict[str, str] = {}
        for word in self.cmdline().split():
            key, _, value = word.partition("=")
            args[key] = value
        return args

    def isolation(self) -> dict[str, list[int]]:
        """CPUs set apart on the kernel command line and in sysfs (kernel-parameters.txt: isolcpus, nohz_full...)."""
        args = self.cmdline_args()
        out: dict[str, list[int]] = {}
        for key in ("isolcpus", "nohz_full", "rcu_nocbs", "irqaffinity"):
            if key in args:
                try:
                    out[key] = parse_isolcpus(args[key])[0] if key == "isolcpus" else parse_cpu_list(args[key])
                except ValueError:
                    out[key] = []
        out["sysfs_isolated"] = self.cpus("isolated") or []
        return out

    def kernel(self) -> str:
        return self.read("/proc/sys/kernel/osrelease", "") or ""

    def cpu_model(self) -> str:
        text = self.read("/proc/cpuinfo", "") or ""
        fields: dict[str, str] = {}
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields.setdefault(key.strip().lower(), value.strip())
        for key in ("model name", "hardware", "model", "cpu model", "processor"):
            if fields.get(key) and not fields[key].isdigit():
                return fields[key]
        return ""

    def board_model(self) -> str:
        """Device-tree `model` on ARM boards, DMI vendor and product on x86; "" when neither is there."""
        raw = self.read_bytes("/proc/device-tree/model") or self.read_bytes("/sys/firmware/devicetree/base/model")
        if raw:
            return raw.split(b"\x00")[0].decode(errors="replace").strip()
        vendor = self.read("/sys/class/dmi/id/sys_vendor", "") or ""
        product = self.read("/sys/class/dmi/id/product_name", "") or ""
        return " ".join(p for p in (vendor.strip(), product.strip()) if p)

    def governors(self) -> dict[int, str]:
        out = {}
        for cpu in self.online_cpus():
            gov = self.read(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor")
            if gov:
                out[cpu] = gov
        return out


@dataclass(frozen=True)
class ThreadAffinity:
    tid: int
    name: str
    cpus: tuple[int, ...]


def own_threads() -> list[ThreadAffinity]:
    """Every thread of this process with its current CPU affinity, read live from /proc/self/task."""
    out = []
    for entry in sorted(Path("/proc/self/task").iterdir(), key=lambda p: int(p.name)):
        tid = int(entry.name)
        try:
            name = (entry / "comm").read_text().strip()
            cpus = tuple(sorted(os.sched_getaffinity(tid)))
        except OSError:
            continue  # the thread ended while we looked
        out.append(ThreadAffinity(tid, name, cpus))
    return out


def pin_all_threads(cpus: list[int]) -> list[ThreadAffinity]:
    """Pin this process and every thread it already has to `cpus`; new threads inherit the mask.

    All tasks, not only the caller: `import numpy` starts OpenBLAS threads before anyone can pin.
    """
    allowed = set(range(os.cpu_count() or 1))
    bad = sorted(set(cpus) - allowed)
    if not cpus or bad:
        raise PinningError(
            f"--cpus {format_cpu_list(cpus)!r}: CPU(s) {format_cpu_list(bad) or 'none'} do not exist here",
            hint=f"this machine has CPUs {format_cpu_list(sorted(allowed))}",
        )
    for entry in Path("/proc/self/task").iterdir():
        try:
            os.sched_setaffinity(int(entry.name), cpus)
        except ProcessLookupError:
            continue
        except OSError as err:
            raise PinningError(f"cannot pin thread {entry.name} to CPUs {format_cpu_list(cpus)!r}: {err}") from err
    return own_threads()
