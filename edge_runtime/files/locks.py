"""Lock files in /run/lock: the tune lock of a tree and the claim on an output file. flock, so the kernel lets go
when a holder dies; each file removed by its holder as it lets go, so they do not pile up on a bench station that
runs thousands of commands.

Never: follow a link when creating a lock file (the lock dir is world-writable), or wait for a lock.
"""

from __future__ import annotations

import atexit
import errno
import hashlib
import os
import stat

from edge_runtime.errors import UserError


def lock_dir() -> str:
    """/run/lock where it can be written, else /var/lock, else the temporary directory."""
    import tempfile  # here: it brings random, shutil, bz2 and lzma, and most commands never take a lock

    for d in ("/run/lock", "/var/lock", tempfile.gettempdir()):
        if os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK):
            return d
    return tempfile.gettempdir()


def lock_file(path: str) -> int:
    """Open (creating) a lock file safely in a world-writable directory: never through a link, only a regular file."""
    flags = os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        fd = os.open(path, os.O_RDWR | flags, 0o644)
    except PermissionError:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)  # another user's lock: flock works read-only
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return fd


def take_lock(path: str) -> int:
    """Open the lock file `path` and hold it (flock, exclusive, not waiting); BlockingIOError while another process
    holds it, OSError when it cannot be used. The kernel lets go if we die.

    A holder removes its lock file as it lets go (`drop_lock`), so lock files do not pile up in /run/lock. The price
    is one check: the file locked must still be the one at `path`, since a holder letting go may have removed it
    between our open and our lock; if it was, lock the new one."""
    import fcntl

    for _ in range(64):  # each retry means another process took and dropped the lock meanwhile: bounded
        fd = lock_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
        if same_file(path, fd):
            return fd
        os.close(fd)
    raise OSError(errno.EAGAIN, "the lock file keeps being replaced")


def drop_lock(path: str, fd: int) -> None:
    """Remove the lock file while still holding it, then let go (see take_lock). Another user's lock file, which we
    may not remove, stays."""
    try:
        if same_file(path, fd):
            os.unlink(path)
    except OSError:
        pass
    os.close(fd)


def same_file(path: str, fd: int) -> bool:
    try:
        st, held = os.stat(path, follow_symlinks=False), os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)


# ----------------------------------------------------------------------------------------------- output claims
_CLAIMS: dict[str, tuple[str, int]] = {}


def claim_output(flag: str, dest: str, target: str) -> None:
    """Hold a lock on `target` for the life of this process: two commands writing one result file at once would
    silently lose one result; the second is refused before it runs. The lock lives in /run/lock (keyed by the real
    path), so nothing is left beside the user's files, and the kernel releases it if we die."""
    if target in _CLAIMS:
        return
    key = hashlib.sha256(target.encode(errors="surrogateescape")).hexdigest()[:16]
    path = os.path.join(lock_dir(), f"edge-runtime-out-{key}.lock")
    try:
        fd = take_lock(path)
    except BlockingIOError:
        holder = lock_holder(path)
        raise UserError(
            f"{flag} {dest!r}: another edge-runtime is writing this file"
            + (f" (pid {holder})" if holder.isdecimal() else ""),
            hint="give each run its own output file",
        ) from None
    except OSError:
        return  # cannot lock here (read-only /run, odd file): write without the guard rather than refuse
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass
    if not _CLAIMS:
        atexit.register(_drop_claims, os.getpid())
    _CLAIMS[target] = (path, fd)


def lock_holder(path: str) -> str:
    """The pid the holder of a claim wrote into it ("" when unknown)."""
    try:
        with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW | os.O_NONBLOCK)) as f:
            return f.read(16).decode(errors="replace").strip() if stat.S_ISREG(os.fstat(f.fileno()).st_mode) else ""
    except OSError:
        return ""


def _drop_claims(owner: int) -> None:
    """At exit: each claim's lock file removed as it is let go (a process killed outright leaves its few behind).
    Only by the process that took them: a forked child that exits normally must not drop its parent's claims."""
    if os.getpid() != owner:
        return
    for path, fd in _CLAIMS.values():
        drop_lock(path, fd)
    _CLAIMS.clear()
