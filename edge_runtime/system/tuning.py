"""`edge-runtime tune`: audit how well CPUs are set apart (Python reads), and apply or reset it (the shell scripts
in system_tuning/ write). There is no second implementation of what the scripts change: `apply` and `reset` run them.

Each knob is one `Check` with what was seen and what to do, in the spirit of pyperf's `system show`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from edge_runtime.errors import CheckFailedError, UserError
from edge_runtime.system.cpulist import format_cpu_list, is_number, parse_cpu_list, parse_cpu_mask
from edge_runtime.system.files import check_input, lock_dir, lock_file, open_input, reason
from edge_runtime.system.root import SystemRoot


@dataclass(frozen=True)
class Check:
    knob: str
    status: str  # "ok" | "fail" (not tuned: exit 1) | "warn" (worth knowing) | "n/a" (knob not on this system)
    seen: str
    advice: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def scripts_dir() -> Path:
    env = os.environ.get("EDGE_RUNTIME_SCRIPTS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "system_tuning"


def _cpus_of_mask(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return parse_cpu_mask(text)
    except ValueError:
        return None


def _mask_check(knob: str, mask_text: str | None, want: set[int], seen: str, fix: str) -> Check:
    """A knob that is a CPU mask: fails when it reaches any CPU of `want`."""
    mask = _cpus_of_mask(mask_text)
    if mask is None:
        return Check(knob, "n/a", f"no {knob} knob here")
    hit = set(mask) & want
    return Check(knob, "fail" if hit else "ok", f"{seen} {format_cpu_list(mask)}", fix if hit else "")


def audit(root: SystemRoot, cpus: list[int]) -> list[Check]:
    """One Check per knob for the CPUs meant to be quiet."""
    L = format_cpu_list(cpus)
    want = set(cpus)
    checks: list[Check] = []

    iso = root.isolation()
    missing = {k: sorted(want - set(iso.get(k, []))) for k in ("isolcpus", "nohz_full", "rcu_nocbs")}
    if root.read("/proc/cmdline") is None:
        checks.append(Check("kernel command line", "warn", "unknown: no /proc/cmdline to read"))
    elif iso.get("garbled"):
        bad = "; ".join(f"{k}={v!r} is not a CPU list" for k, v in iso["garbled"].items())
        checks.append(
            Check(
                "kernel command line",
                "fail",
                bad,
                f"fix the boot arguments; `kernel_cmdline.sh --cpus {L}` prints them",
            )
        )
    elif not any(missing.values()):
        checks.append(Check("kernel command line", "ok", f"isolcpus, nohz_full and rcu_nocbs cover CPU {L}"))
    else:
        gaps = "; ".join(f"{k} lacks {format_cpu_list(v)}" for k, v in missing.items() if v)
        checks.append(
            Check(
                "kernel command line",
                "fail",
                gaps,
                f"boot with the arguments `system_tuning/kernel_cmdline.sh --cpus {L}` prints",
            )
        )

    affinities = root.irq_affinities()
    if not affinities:
        checks.append(Check("IRQ affinity", "n/a", "no /proc/irq here"))
    else:
        movable = sorted((irq for irq, aff in affinities.items() if set(aff) & want and not set(aff) <= want), key=int)
        bound = sorted((irq for irq, aff in affinities.items() if aff and set(aff) <= want), key=int)
        if movable:
            shown = ", ".join(movable[:10]) + (" ..." if len(movable) > 10 else "")
            checks.append(
                Check(
                    "IRQ affinity",
                    "fail",
                    f"{len(movable)} IRQ(s) may land on CPU {L} ({shown})",
                    f"system_tuning/irq_affinity.sh --cpus {L}",
                )
            )
        else:
            checks.append(Check("IRQ affinity", "ok", f"no movable IRQ may land on CPU {L}"))
        if bound:
            checks.append(
                Check(
                    "per-CPU IRQs",
                    "warn",
                    f"IRQ {', '.join(bound)} bound to CPU {L} only",
                    "per-CPU or managed interrupts cannot be moved; isolcpus=managed_irq keeps new managed ones off",
                )
            )
    default = _mask_check(
        "default IRQ affinity",
        root.read("/proc/irq/default_smp_affinity"),
        want,
        "new IRQs may go to CPU",
        f"system_tuning/irq_affinity.sh --cpus {L}",
    )
    if default.status != "n/a":
        checks.append(default)

    running = False
    try:
        procs = any(True for _ in root.path("/proc").glob("[0-9]*"))
    except OSError:
        procs = False
    try:
        for comm in root.path("/proc").glob("[0-9]*/comm"):
            if (root.read(str(comm.relative_to(root.root))) or "") == "irqbalance":
                running = True
                break
    except OSError:
        pass
    banned = None
    for conf in ("/etc/default/irqbalance", "/etc/sysconfig/irqbalance"):
        for line in (root.read(conf, "") or "").splitlines():
            if line.startswith("IRQBALANCE_BANNED_CPULIST="):
                try:
                    banned = parse_cpu_list(line.split("=", 1)[1].strip().strip('"'))
                except ValueError:
                    banned = []
    if not running and not procs:
        checks.append(Check("irqbalance", "warn", "unknown: no process list to look in (a captured tree)"))
    elif not running:
        checks.append(Check("irqbalance", "ok", "not running"))
    elif banned is not None and want <= set(banned):
        checks.append(Check("irqbalance", "ok", f"running, banned from CPU {format_cpu_list(banned)}"))
    else:
        checks.append(
            Check(
                "irqbalance",
                "fail",
                "running and free to move IRQs onto CPU " + L,
                f"system_tuning/irq_affinity.sh --cpus {L} sets IRQBALANCE_BANNED_CPULIST; then restart irqbalance",
            )
        )

    govs = {c: root.read(f"/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor") for c in cpus}
    govs = {c: g for c, g in govs.items() if g}
    if not govs:
        checks.append(Check("cpufreq governor", "n/a", "no cpufreq for these CPUs"))
    else:
        slow = {c: g for c, g in govs.items() if g != "performance"}
        seen = ", ".join(f"CPU{c} {g}" for c, g in govs.items())
        checks.append(
            Check(
                "cpufreq governor",
                "fail" if slow else "ok",
                seen,
                f"system_tuning/cpufreq.sh --cpus {L} --governor performance" if slow else "",
            )
        )
        low, unknown = [], []
        for c, gov in govs.items():
            d = f"/sys/devices/system/cpu/cpu{c}/cpufreq"
            top = root.read(f"{d}/scaling_max_freq") or root.read(f"{d}/cpuinfo_max_freq")
            # Without scaling_min_freq the floor is the hardware minimum: the clock moves unless the governor pins it.
            floor = root.read(f"{d}/scaling_min_freq") or (
                root.read(f"{d}/cpuinfo_min_freq") if gov not in ("performance", "powersave") else None
            )
            if not (top and is_number(top)) or not (floor and is_number(floor)):
                if gov not in ("performance", "powersave"):
                    unknown.append(f"CPU{c} {gov}")
                continue
            if int(floor) < int(top):
                low.append(f"CPU{c} {gov} {int(floor) // 1000}-{int(top) // 1000} MHz")
        if low:
            checks.append(
                Check(
                    "frequency range",
                    "warn",
                    ", ".join(low),
                    f"system_tuning/cpufreq.sh --cpus {L} raises the minimum",
                )
            )
        elif unknown:
            checks.append(
                Check(
                    "frequency range",
                    "warn",
                    f"{', '.join(unknown)}: no minimum or maximum frequency readable, so the range is unknown",
                    f"system_tuning/cpufreq.sh --cpus {L} --governor performance",
                )
            )
        else:
            checks.append(Check("frequency range", "ok", "minimum = maximum: the clock cannot move"))

    no_turbo = root.read("/sys/devices/system/cpu/intel_pstate/no_turbo")
    boost = root.read("/sys/devices/system/cpu/cpufreq/boost")
    if no_turbo is None and boost is None:
        checks.append(Check("turbo/boost", "n/a", "no turbo or boost knob"))
    else:
        on = no_turbo == "0" or boost == "1"
        seen = f"intel_pstate/no_turbo={no_turbo}" if no_turbo is not None else f"cpufreq/boost={boost}"
        checks.append(
            Check(
                "turbo/boost",
                "fail" if on else "ok",
                seen,
                f"system_tuning/cpufreq.sh --cpus {L} turns it off" if on else "",
            )
        )

    rt = root.read("/proc/sys/kernel/sched_rt_runtime_us")
    period = root.read("/proc/sys/kernel/sched_rt_period_us") or "1000000"
    if rt is None:
        checks.append(Check("RT throttling", "n/a", "no sched_rt_runtime_us"))
    elif rt.strip() == "-1":
        checks.append(Check("RT throttling", "ok", "off (sched_rt_runtime_us=-1)"))
    elif not is_number(rt.strip().lstrip("-")) or not is_number(period.strip()) or int(period) <= 0:
        checks.append(Check("RT throttling", "n/a", f"unreadable: sched_rt_runtime_us={rt!r}, period={period!r}"))
    else:
        share = int(rt) / int(period)
        checks.append(
            Check(
                "RT throttling",
                "warn",
                f"SCHED_FIFO tasks get at most {share:.0%} of each period",
                "fine for most runs; sysctl kernel.sched_rt_runtime_us=-1 lifts it on a dedicated core",
            )
        )

    checks.append(
        _mask_check(
            "workqueues",
            root.read("/sys/devices/virtual/workqueue/cpumask"),
            want,
            "unbound workqueues on CPU",
            f"system_tuning/isolate_cpus.sh --cpus {L}",
        )
    )

    tm = root.read("/proc/sys/kernel/timer_migration")
    if tm is None:
        checks.append(Check("timer migration", "n/a", "no kernel.timer_migration"))
    else:
        checks.append(
            Check(
                "timer migration",
                "fail" if tm.strip() != "0" else "ok",
                f"kernel.timer_migration={tm}",
                f"system_tuning/isolate_cpus.sh --cpus {L}" if tm.strip() != "0" else "",
            )
        )
    return checks


def state_dir(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    if os.geteuid() == 0:
        return Path("/var/lib/edge-runtime")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "edge-runtime"


def run_script(name: str, args: list[str]) -> subprocess.CompletedProcess:
    script = scripts_dir() / name
    if not script.exists():
        raise UserError(f"tuning script {str(script)!r} not found", hint="set EDGE_RUNTIME_SCRIPTS to system_tuning/")
    return subprocess.run(["sh", str(script), *args], capture_output=True, text=True, timeout=300)


def _real_root(root: str) -> str:
    """One spelling per root (relative, through a link, with a trailing /.): the scripts' save files record it."""
    return os.path.realpath(root or "/")


def _root_key(root: str) -> str:
    return hashlib.sha256(_real_root(root).encode(errors="surrogateescape")).hexdigest()[:12]


def _latest(state: Path, root: str) -> Path:
    """The pointer to the save file of the tuning applied to `root` (one per root: a tree is not the live system)."""
    return state / f"latest-{_root_key(root)}"


@contextlib.contextmanager
def exclusive(root: str):
    """Hold the tuning lock of `root` (flock: released by the kernel if we die, so it never goes stale) and yield its
    descriptor. The lock file lives in one place for every --state-dir and also records which save file holds the
    original values while tuning is applied, so a second apply through another state dir is refused too."""
    import fcntl

    path = os.path.join(lock_dir(), f"edge-runtime-tune-{_root_key(root)}.lock")
    try:
        fd = lock_file(path)
    except OSError as err:
        raise UserError(f"cannot use the tuning lock {path!r}: {reason(err)}") from err
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(
                f"another `edge-runtime tune` is applying or resetting tuning on {_real_root(root)}",
                hint="wait for it to finish; one change at a time keeps the save file exact",
            ) from None
        yield fd
    finally:
        os.close(fd)


def _applied(fd: int) -> tuple[str, str] | None:
    """(save file, state dir) recorded in the lock file while tuning is applied, or None."""
    raw = os.pread(fd, 8192, 0).decode(errors="replace").splitlines()
    return (raw[0], raw[1]) if len(raw) >= 2 and raw[0] else None


def _record_applied(fd: int, save: Path | None, state: Path | None) -> None:
    try:
        os.ftruncate(fd, 0)
        if save is not None:
            os.pwrite(fd, f"{save}\n{state}\n".encode(errors="surrogateescape"), 0)
    except OSError:
        pass  # another user's read-only lock file: the state dir's pointer still guards its own resets


def _read_pointer(latest: Path) -> Path:
    """The save file a pointer names, read as an input: a regular file of one line holding an absolute path."""
    with open_input(latest, "tune state pointer", max_bytes=4096) as f:
        raw = f.read()
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        text = None
    lines = (text or "").splitlines()
    if text is None or "\x00" in text or len(lines) != 1 or not lines[0].startswith("/"):
        raise UserError(
            f"tune state pointer {str(latest)!r}: garbled (expected the path of a save file)",
            hint="remove it; a save file it named is still in the state dir",
        )
    return Path(lines[0])


GOVERNOR = re.compile(r"[a-z][a-z0-9_-]{0,31}")


def check_governor(governor: str, cpus: list[int], root: SystemRoot) -> None:
    """Before anything changes: a governor name, and one these CPUs offer (where the tree says which they offer)."""
    if not GOVERNOR.fullmatch(governor):
        raise UserError(f"--governor {governor!r}: not a cpufreq governor name", hint="e.g. performance, schedutil")
    for c in cpus:
        offered = root.read(f"/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_available_governors")
        if offered and governor not in offered.split():
            raise UserError(f"--governor {governor!r}: CPU {c} offers only {offered}")


def check_state_dir(state: Path) -> None:
    """The state dir is a directory, or can be made: checked in a dry run too, so a dry run passes only where a real
    run would."""
    if os.path.lexists(state):
        check_input(state, "--state-dir", directory=True)
        if not os.access(state, os.W_OK | os.X_OK):
            raise UserError(f"--state-dir {str(state)!r}: not writable by this user")
        return
    parent = state.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    check_input(parent, "--state-dir", directory=True)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"--state-dir {str(state)!r}: cannot be created in {str(parent)!r} (permission denied)")


def apply(cpus: list[int], governor: str, root: str, dry_run: bool, state: Path) -> tuple[list[str], Path | None]:
    """Run isolate_cpus.sh and cpufreq.sh with one save file; return their messages and the save file.

    Exclusive per root. The pointer to the save file is written before the scripts run, so a run that fails half-way
    can still be reset; a second apply on the same root is refused (whatever its --state-dir), since its save would
    hold the first apply's values, not the original.
    """
    check_governor(governor, cpus, SystemRoot(root or "/"))
    check_state_dir(state)
    if dry_run:
        return _apply(cpus, governor, root, dry_run, state, None)
    with exclusive(root) as fd:
        return _apply(cpus, governor, root, dry_run, state, fd)


def _apply(
    cpus: list[int], governor: str, root: str, dry_run: bool, state: Path, lock: int | None
) -> tuple[list[str], Path | None]:
    L = format_cpu_list(cpus)
    real = _real_root(root)
    rootargs = ["--root", real] if real != "/" else []
    common = list(rootargs)
    save = None
    latest = _latest(state, root)
    if dry_run:
        common.append("--dry-run")
    else:
        recorded = _applied(lock) if lock is not None else None
        if os.path.lexists(latest) or recorded:
            where = f"save file {recorded[0]}, --state-dir {recorded[1]}" if recorded else f"pointer {latest}"
            raise UserError(
                f"tuning is already applied to {real} ({where})",
                hint="edge-runtime tune reset first (with that --state-dir), so the save keeps the original values",
            )
        try:
            state.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(f"--state-dir {str(state)!r}: cannot create: {reason(err)}") from err
        save = state.resolve() / f"tuning-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.save"
        common += ["--save", str(save)]
        try:
            fd = os.open(latest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            raise UserError(f"tuning is already applied to {real}", hint="edge-runtime tune reset first") from None
        except OSError as err:
            raise UserError(f"--state-dir {str(state)!r}: cannot write: {reason(err)}") from err
        with os.fdopen(fd, "w") as f:
            f.write(str(save) + "\n")
        _record_applied(lock, save, state.resolve())  # type: ignore[arg-type]
    out: list[str] = []
    for script, extra in (("isolate_cpus.sh", []), ("cpufreq.sh", ["--governor", governor])):
        proc = run_script(script, ["--cpus", L, *extra, *common])
        out += proc.stdout.splitlines()
        if proc.returncode != 0:
            if save is not None and not (save.exists() and save.read_text().count("\n") > 1):
                latest.unlink(missing_ok=True)  # nothing was changed: nothing to reset
                save.unlink(missing_ok=True)
                _record_applied(lock, None, None)  # type: ignore[arg-type]
            msg = (proc.stderr.strip().splitlines() or [f"{script} failed"])[-1]
            raise UserError(msg, hint="edge-runtime tune reset puts back what was changed" if latest.exists() else None)
    proc = run_script("kernel_cmdline.sh", ["--cpus", L, *rootargs])
    out += [f"boot arguments: {line}" for line in proc.stdout.splitlines()] + proc.stderr.splitlines()
    return out, save


def reset(root: str, dry_run: bool, state: Path) -> list[str]:
    """Put back what the last apply on `root` saved. A save line that cannot be restored fails the reset (exit 1,
    naming the lines); the save file is then kept, so the reset can be run again once the cause is fixed."""
    if dry_run:
        return _reset(root, dry_run, state, None)
    with exclusive(root) as fd:
        return _reset(root, dry_run, state, fd)


def _reset(root: str, dry_run: bool, state: Path, lock: int | None) -> list[str]:
    real = _real_root(root)
    latest = _latest(state, root)
    if not os.path.lexists(latest):
        recorded = _applied(lock) if lock is not None else None
        if recorded:
            raise UserError(
                f"nothing to reset for {real} in {str(state)!r}: it was applied with --state-dir {recorded[1]}",
                hint=f"edge-runtime tune reset --state-dir {recorded[1]}",
            )
        raise UserError(
            f"nothing to reset for {real}: no saved tuning in {str(state)!r}", hint="tune apply records one"
        )
    save = _read_pointer(latest)
    check_input(save, "tune save file", max_bytes=64 << 20)
    args = ["--restore", str(save)] + (["--root", real] if real != "/" else [])
    if dry_run:
        args.append("--dry-run")
    proc = run_script("isolate_cpus.sh", args)
    if proc.returncode == 1:
        failed = [ln for ln in proc.stdout.splitlines() if "save line" in ln]
        last = (proc.stderr.strip().splitlines() or ["restore failed"])[-1]
        raise CheckFailedError(
            f"{last.split(': error: ', 1)[-1]}: " + "; ".join(ln.split(": ", 1)[-1] for ln in failed[:5]),
            hint=f"the rest was put back; {save} is kept for another `tune reset`",
        )
    if proc.returncode != 0:
        raise UserError((proc.stderr.strip().splitlines() or ["restore failed"])[-1])
    if not dry_run:
        latest.unlink()
        save.rename(save.with_suffix(".restored"))
        _record_applied(lock, None, None)  # type: ignore[arg-type]
    return [*proc.stdout.splitlines(), f"restored what {save.name} recorded"]
