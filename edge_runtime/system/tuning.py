"""`edge-runtime tune apply|reset`: the shell scripts in system_tuning/ make the changes (there is no second
implementation of them here); this module runs them with one save file, exclusive per root, and keeps the pointer
that `reset` follows. The audit (`tune show`) is in audit.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import subprocess
import time
from pathlib import Path

from edge_runtime.errors import CheckFailedError, UserError
from edge_runtime.files.inputs import check_input, open_input, reason
from edge_runtime.files.locks import drop_lock, lock_dir, take_lock
from edge_runtime.system.cpulist import format_cpu_list
from edge_runtime.system.data import data_dir
from edge_runtime.system.root import SystemRoot


def scripts_dir() -> Path:
    """The scripts the package carries (system/data.py), or EDGE_RUNTIME_SCRIPTS."""
    return data_dir("system_tuning")


def state_dir(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    if os.geteuid() == 0:
        return Path("/var/lib/edge-runtime")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "edge-runtime"


SCRIPTS = ("isolate_cpus.sh", "irq_affinity.sh", "cpufreq.sh", "kernel_cmdline.sh", "lib.sh")
SCRIPT_TIMEOUT_S = 300.0


def check_scripts() -> None:
    """Every script a regular file before anything changes (a fifo would hang, a missing one fail half-way)."""
    for name in SCRIPTS:
        path = scripts_dir() / name
        if not os.path.lexists(path):
            raise UserError(f"tuning script {str(path)!r} not found", hint="set EDGE_RUNTIME_SCRIPTS to system_tuning/")
        check_input(path, "tuning script", max_bytes=1 << 20)


def run_script(name: str, args: list[str]) -> subprocess.CompletedProcess:
    script = scripts_dir() / name
    check_input(script, "tuning script", max_bytes=1 << 20)
    try:
        return subprocess.run(["sh", str(script), *args], capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        raise UserError(f"tuning script {name} did not finish within {SCRIPT_TIMEOUT_S:g} s") from err


def _real_root(root: str) -> str:
    """One spelling per root (relative, through a link, with a trailing /.): the scripts' save files record it."""
    return os.path.realpath(root or "/")


def root_key(root: str) -> str:
    """One key per tree, whatever path reaches it: the root directory's device and inode (a bind mount of a tree is
    the same tree), else its real path."""
    real = _real_root(root)
    try:
        st = os.stat(real)
        ident = f"{st.st_dev}:{st.st_ino}"
    except OSError:
        ident = real
    return hashlib.sha256(ident.encode(errors="surrogateescape")).hexdigest()[:12]


def _latest(state: Path, root: str) -> Path:
    """The pointer to the save file of the tuning applied to `root` (one per root: a tree is not the live system)."""
    return state / f"latest-{root_key(root)}"


@contextlib.contextmanager
def exclusive(root: str):
    """Hold the tuning lock of `root` (flock: released by the kernel if we die, so it never goes stale) and yield its
    descriptor. The lock file lives in one place for every --state-dir and also records which save file holds the
    original values while tuning is applied, so a second apply through another state dir is refused too."""
    path = lock_path(root)
    try:
        fd = take_lock(path)
    except BlockingIOError:
        raise UserError(
            f"another `edge-runtime tune` is applying or resetting tuning on {_real_root(root)}",
            hint="wait for it to finish; one change at a time keeps the save file exact",
        ) from None
    except OSError as err:
        raise UserError(f"cannot use the tuning lock {path!r}: {reason(err)}") from err
    try:
        yield fd
    finally:
        if _applied(fd) is None:
            drop_lock(path, fd)  # nothing recorded: the file has no more use
        else:
            os.close(fd)  # it records the applied tuning until the reset


def lock_path(root: str) -> str:
    """The lock file of `root` (one per tree, in the lock dir): held while tuning changes, and the record of it."""
    return os.path.join(lock_dir(), f"edge-runtime-tune-{root_key(root)}.lock")


def _applied(fd: int) -> tuple[str, str] | None:
    """(save file, state dir) recorded in the lock file while tuning is applied, or None. A record whose save file
    is gone (its state dir removed by hand) is stale: nothing could restore from it, and it must not block every
    later apply."""
    raw = os.pread(fd, 8192, 0).decode(errors="replace").splitlines()
    if len(raw) < 2 or not raw[0] or not os.path.lexists(raw[0]):
        return None
    return raw[0], raw[1]


def _peek_applied(root: str) -> tuple[str, str] | None:
    """The record, read without taking the lock (for a dry run, which changes nothing)."""
    try:
        fd = os.open(lock_path(root), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return _applied(fd) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    finally:
        os.close(fd)


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
    check_scripts()
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
    # A dry run passes only where a real run would: an applied root is refused in both.
    recorded = _applied(lock) if lock is not None else _peek_applied(root)
    if os.path.lexists(latest) or recorded:
        where = f"save file {recorded[0]}, --state-dir {recorded[1]}" if recorded else f"pointer {latest}"
        raise UserError(
            f"tuning is already applied to {real} ({where})",
            hint="edge-runtime tune reset first (with that --state-dir), so the save keeps the original values",
        )
    if dry_run:
        common.append("--dry-run")
    else:
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

    def changed_nothing() -> bool:
        return save is not None and not (save.exists() and save.read_text(errors="replace").count("\n") > 1)

    def undo_pointer() -> None:  # nothing was changed: nothing to reset, and nothing may block the next apply
        latest.unlink(missing_ok=True)
        save.unlink(missing_ok=True)  # type: ignore[union-attr]
        _record_applied(lock, None, None)  # type: ignore[arg-type]

    out: list[str] = []
    try:
        for script, extra in (("isolate_cpus.sh", []), ("cpufreq.sh", ["--governor", governor])):
            proc = run_script(script, ["--cpus", L, *extra, *common])
            out += proc.stdout.splitlines()
            if proc.returncode != 0:
                if changed_nothing():
                    undo_pointer()
                msg = (proc.stderr.strip().splitlines() or [f"{script} failed"])[-1]
                hint = "edge-runtime tune reset puts back what was changed" if latest.exists() else None
                raise UserError(msg, hint=hint)
    except BaseException:  # a signal, a timeout: the same rule, the save file decides
        if changed_nothing():
            undo_pointer()
        raise
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
        recorded = _applied(lock) if lock is not None else _peek_applied(root)
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
    done = "would restore" if dry_run else "restored"
    return [*proc.stdout.splitlines(), f"{done} what {save.name} recorded"]
