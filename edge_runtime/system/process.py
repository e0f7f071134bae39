"""What this process does to itself and the processes it starts, always on the live system (never --sysroot):
its threads and where they may run, SCHED_FIFO and mlockall and putting them back, helper processes that die with
it, and who else ran on its CPUs. Reads of the observed system live in `root.SystemRoot`.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from edge_runtime.errors import MemoryLockError, PinningError, SchedulingError
from edge_runtime.system.cpulist import format_cpu_list, parse_cpu_list


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
        raise SchedulingError(
            f"--rt-priority {priority}: SCHED_FIFO not permitted for this user",
            hint="run as root, grant CAP_SYS_NICE (setcap cap_sys_nice+ep), or raise RLIMIT_RTPRIO (ulimit -r 99)",
        ) from err
    except OSError as err:
        restore_scheduling(saved)
        raise SchedulingError(f"--rt-priority {priority}: {err.strerror or err} (valid: 1-99)") from err
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
        raise MemoryLockError(
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


def signal_name(signum: int) -> str:
    """SIGTERM for 15; "signal 77" for a number that names no signal here."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


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
    hog must never outlive the bench that started it). The kernel ties the signal to the *thread* that starts the
    child: start it from a thread that lives as long as the child should (every caller here waits for its child)."""
    return [sys.executable, "-c", _LAUNCH, str(os.getpid()), *cmd]


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
