"""The one place edge_runtime touches the system: reads of /proc and /sys, and actions on this process.

Reads go through `SystemRoot(root)`, so a board's captured tree can be inspected anywhere and tests use fake trees
(`--sysroot DIR`). Every read is tolerant: a missing or unreadable file gives the fallback, never an exception.
What the process does to itself (pinning its threads) always acts on the live system: `/proc/self` is never
redirected, as DESIGN.md says.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from edge_runtime.cpulist import format_cpu_list, is_number, parse_cpu_list, parse_isolcpus
from edge_runtime.errors import PinningError

# /proc/interrupts of a 256-CPU machine is about 1 MB; nothing we read from /proc or /sys comes near this.
MAX_READ_BYTES = 16 << 20


class SystemRoot:
    """Observed system state, read below `root` (default `/`)."""

    def __init__(self, root: str | os.PathLike[str] = "/"):
        self.root = Path(root)

    @property
    def is_live(self) -> bool:
        """True when this root is the running system itself (`/`), not a captured tree."""
        try:
            return self.root.resolve() == Path("/")
        except OSError:
            return False

    def path(self, rel: str) -> Path:
        return self.root / rel.lstrip("/")

    def read(self, rel: str, fallback: str | None = None) -> str | None:
        """Text of a file with trailing whitespace stripped, or `fallback` when it is missing or unreadable."""
        raw = self.read_bytes(rel)
        return fallback if raw is None else raw.decode(errors="replace").rstrip("\n\x00 ")

    def read_bytes(self, rel: str) -> bytes | None:
        """Bytes of a regular file (procfs, sysfs and device-tree files are), or None. A fifo, a device or a link to
        /dev/zero in a hostile tree is not read: opened non-blocking and checked first, and reads are bounded."""
        try:
            fd = os.open(self.path(rel), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, ValueError):
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            chunks, size = [], 0
            while size <= MAX_READ_BYTES:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
                size += len(chunk)
            return None  # larger than any file the kernel gives us: garbled
        except OSError:
            return None
        finally:
            os.close(fd)

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
        return list(range(os.cpu_count() or 1)) if self.is_live else []

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
        out: dict = {}
        garbled: dict[str, str] = {}
        for key in ("isolcpus", "nohz_full", "rcu_nocbs", "irqaffinity"):
            if key in args:
                try:
                    out[key] = parse_isolcpus(args[key])[0] if key == "isolcpus" else parse_cpu_list(args[key])
                except ValueError:
                    garbled[key] = args[key]  # not a CPU list: unknown, said so, not an empty list
        out["sysfs_isolated"] = self.cpus("isolated") or []
        if garbled:
            out["garbled"] = garbled
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
            if fields.get(key) and not is_number(fields[key]):
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
            entries = sorted((e for e in base.iterdir() if is_number(e.name)), key=lambda e: int(e.name))
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


# --------------------------------------------------------------------------------------------------- child processes
# Runs first in every helper process we start (co-runners, cyclictest, tegrastats): die with the parent
# (PR_SET_PDEATHSIG survives exec), then exec the tool. Done in the child itself rather than in a preexec_fn, which is
# unsafe in a process that has threads. The parent check covers a parent that died before prctl.
_LAUNCH = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"
    "if os.getppid() != int(sys.argv[1]): sys.exit(0)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def dies_with_parent(cmd: list[str]) -> list[str]:
    """`cmd` wrapped so the process is killed when this one dies, even by SIGKILL (a SCHED_FIFO cyclictest or a CPU
    hog must never outlive the bench that started it)."""
    return [sys.executable, "-c", _LAUNCH, str(os.getpid()), *cmd]


def set_parent_death_signal() -> None:
    """For a Python child of ours (the crash-check child): die with the parent."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# -------------------------------------------------------------------------------------------- who else ran there
def schedstat(tid: int) -> tuple[int, int] | None:
    """(ns on the CPU, ns waiting on a run queue) of one of our threads (/proc/self/task/TID/schedstat), or None.

    Time spent waiting while runnable is time another task held the CPU: the direct measure of a competitor."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            run_ns, wait_ns, *_ = f.read().split()
        return int(run_ns), int(wait_ns)
    except (OSError, ValueError):
        return None


def cpu_times_by_task(exclude_pid: int | None = None) -> dict[tuple[int, int], tuple[str, int, int, str]]:
    """(pid, tid) -> (comm, CPU ticks used, CPU last run on, state) for every task on this machine (live /proc).

    Read before and after a run to find the tasks that used the measured CPUs meanwhile. Tasks that end while we look
    are skipped."""
    out: dict[tuple[int, int], tuple[str, int, int, str]] = {}
    try:
        pids = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return out
    for pid in pids:
        if pid == exclude_pid:
            continue
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    text = f.read()
            except OSError:
                continue
            head, _, rest = text.rpartition(")")
            comm = head.partition("(")[2]
            fields = rest.split()
            try:  # fields after the comm: state is [0]; utime [11], stime [12]; processor [36] (proc(5))
                out[(pid, tid)] = (comm, int(fields[11]) + int(fields[12]), int(fields[36]), fields[0])
            except (IndexError, ValueError):
                continue
    return out
