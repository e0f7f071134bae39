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

    def irq_affinities(self) -> dict[str, list[int]]:
        """IRQ number -> CPUs it may be delivered to (/proc/irq/N/smp_affinity_list, else the smp_affinity mask)."""
        from edge_runtime.cpulist import parse_cpu_mask

        out: dict[str, list[int]] = {}
        base = self.path("/proc/irq")
        try:
            entries = sorted((e for e in base.iterdir() if e.name.isdigit()), key=lambda e: int(e.name))
        except OSError:
            return out
        for e in entries:
            text = self.read(f"/proc/irq/{e.name}/smp_affinity_list")
            try:
                if text is not None:
                    out[e.name] = parse_cpu_list(text)
                    continue
                mask = self.read(f"/proc/irq/{e.name}/smp_affinity")
                if mask is not None:
                    out[e.name] = parse_cpu_mask(mask)
            except ValueError:
                continue  # garbled: unknown rather than guessed
        return out

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
    """Every thread of this process with the CPUs it may run on, as /proc/self/task/TID/status says (live)."""
    out = []
    for entry in sorted(Path("/proc/self/task").iterdir(), key=lambda p: int(p.name)):
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue  # the thread ended while we looked
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        try:
            cpus = tuple(parse_cpu_list(fields.get("Cpus_allowed_list", "")))
        except ValueError:
            cpus = ()
        out.append(ThreadAffinity(int(entry.name), fields.get("Name", "").strip(), cpus))
    return out


def task_status(tid: int) -> dict[str, str]:
    """Fields of /proc/self/task/TID/status (live), e.g. Cpus_allowed_list, nonvoluntary_ctxt_switches."""
    out = {}
    try:
        with open(f"/proc/self/task/{tid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                out[key] = value.strip()
    except OSError:
        pass
    return out


def task_migrations(tid: int) -> int | None:
    """se.nr_migrations of a thread (/proc/self/task/TID/sched, needs CONFIG_SCHED_DEBUG); None if not there."""
    try:
        with open(f"/proc/self/task/{tid}/sched") as f:
            for line in f:
                if line.startswith("se.nr_migrations"):
                    return int(line.split(":")[1])
    except (OSError, ValueError):
        pass
    return None


def major_faults() -> int:
    """Major page faults of this process so far (field 12 of /proc/self/stat)."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        return int(stat.rsplit(")", 1)[1].split()[9])
    except (OSError, ValueError, IndexError):
        return 0


def set_fifo(priority: int, tids: list[int] | None = None) -> dict[int, tuple[int, int]]:
    """SCHED_FIFO at `priority` for these threads (default: all of this process). Returns what to restore."""
    tids = tids or [t.tid for t in own_threads()]
    saved = {}
    try:
        for tid in tids:
            try:
                saved[tid] = (os.sched_getscheduler(tid), os.sched_getparam(tid).sched_priority)
                os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))
            except ProcessLookupError:
                continue  # that thread ended meanwhile; the others still get SCHED_FIFO
    except PermissionError as err:
        restore_scheduling(saved)
        raise PinningError(
            f"--rt-priority {priority}: SCHED_FIFO not permitted for this user",
            hint="run as root, grant CAP_SYS_NICE (setcap cap_sys_nice+ep), or raise RLIMIT_RTPRIO (ulimit -r 99)",
        ) from err
    except OSError as err:
        restore_scheduling(saved)
        raise PinningError(f"--rt-priority {priority}: {err.strerror or err} (valid: 1-99)") from err
    return saved


def restore_scheduling(saved: dict[int, tuple[int, int]]) -> None:
    for tid, (policy, prio) in saved.items():
        try:
            os.sched_setscheduler(tid, policy, os.sched_param(prio))
        except OSError:
            continue  # the thread is gone


MCL_CURRENT, MCL_FUTURE = 1, 2


def mlock_all() -> None:
    """Lock all current and future pages of this process in RAM (mlockall(2))."""
    import ctypes
    import errno

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mlockall(MCL_CURRENT | MCL_FUTURE) != 0:
        code = ctypes.get_errno()
        raise PinningError(
            f"--mlock: mlockall failed: {os.strerror(code)}",
            hint="run as root, grant CAP_IPC_LOCK, or raise RLIMIT_MEMLOCK (ulimit -l unlimited)"
            if code in (errno.EPERM, errno.ENOMEM)
            else None,
        )


def munlock_all() -> None:
    import ctypes

    ctypes.CDLL(None).munlockall()


def restore_affinity(cpus: set[int]) -> None:
    """Give every thread of this process the CPU set `cpus` again (after a pinned run)."""
    for entry in Path("/proc/self/task").iterdir():
        try:
            os.sched_setaffinity(int(entry.name), cpus)
        except OSError:
            continue  # the thread ended, or the set is no longer allowed: nothing better to do


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
