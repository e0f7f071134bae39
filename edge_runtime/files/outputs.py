"""The one writer every command's outputs go through. An `Output` is planned (checked) before the work that
produces it, so a bad path never costs a result. A regular file, or a link to one, is replaced atomically (temporary
file beside the real target, fsync, rename), so a crash never leaves half a file and the link stays a link. A
character device or a fifo is opened when planned and written through, never replaced; `-`, /dev/stdout (any
spelling), /dev/fd/N and a file that is the redirected standard output write to that descriptor. Block devices,
sockets, directories, dangling links, files under /proc and /sys are refused. All outputs of one command differ from
each other and from its inputs, and two commands never write one file at once.

Never: replace anything but a regular file, write NaN or Infinity into JSON.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from edge_runtime.errors import UserError
from edge_runtime.files.inputs import kind_of, reason
from edge_runtime.files.locks import claim_output

# ------------------------------------------------------------------------------------------------------- outputs
_FD_PATH = re.compile(r"/(?:dev/fd|proc/(?:self|thread-self|\d+(?:/task/\d+)?)/fd)/([0-9]+)")
_STD_NAMES = {0: "standard input", 1: "standard output", 2: "standard error"}
# Standard descriptors that were closed when the process started (the CLI reopens them on /dev/null): writing to
# one of them would lose the output.
CLOSED_STD_FDS: set[int] = set()


def _fd_alias(dest: str) -> int | None:
    """`-`, /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N (any spelling): the descriptor meant, not a file."""
    if dest == "-":
        return 1
    norm = "/" + os.path.normpath(dest).lstrip("/") if dest.startswith("/") else None
    if norm in ("/dev/stdin", "/dev/stdout", "/dev/stderr"):
        return {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}[norm]
    m = _FD_PATH.fullmatch(norm or "")
    if m and (norm.startswith(("/dev/fd", "/proc/self", "/proc/thread-self")) or _is_own(norm)):
        return int(m.group(1))
    return None


def _is_own(norm: str) -> bool:
    parts = norm.split("/")
    return len(parts) > 2 and parts[2] == str(os.getpid())


def _std_fd_of(st: os.stat_result) -> int | None:
    """Which of standard input/output/error `st` is the very file of (a name for a redirected stream)."""
    for fd in (1, 2, 0):
        if fd in CLOSED_STD_FDS:
            continue
        try:
            o = os.fstat(fd)
        except OSError:
            continue
        if (o.st_dev, o.st_ino) == (st.st_dev, st.st_ino) and stat.S_ISREG(o.st_mode):
            return fd
    return None


@dataclass(frozen=True)
class Output:
    """A checked destination. `kind`: fd (write to a descriptor), file (atomic replace of `target`), through (an
    existing character device or fifo, opened now and written in place at the end)."""

    flag: str
    dest: str
    kind: str
    target: str | None = None  # file/through: the real path (links resolved)
    fd: int | None = None  # fd: the descriptor; through: the descriptor opened when planned
    identity: tuple[int, int] | None = None  # (st_dev, st_ino) when it exists

    @property
    def is_stdout(self) -> bool:
        return self.kind == "fd" and self.fd == 1

    def shown(self) -> str:
        return f"{self.flag} {self.dest!r}"


def plan_output(flag: str, dest: str, *, regular_only: bool = False, follow_links: bool = True) -> Output:
    """Check `dest` for writing now, before the work that produces it. `regular_only` refuses devices, fifos and
    descriptors (for outputs that must be files, like a quantized model with a manifest beside it); without
    `follow_links` a link is refused too (for files written beside the one the user named: a manifest, an IR's .bin,
    which the user never chose to write through a link)."""
    shown = f"{flag} {dest!r}"
    if dest == "":
        raise UserError(f"{flag} '': empty path", hint="give a file name, or '-' for standard output")
    if "\x00" in dest:
        raise UserError(f"{flag} {dest!r}: not a valid path (NUL byte)")
    fd = _fd_alias(dest)
    if fd is None:
        try:
            st0 = os.stat(dest)
        except (OSError, ValueError):
            st0 = None
        if st0 is not None and stat.S_ISREG(st0.st_mode):
            fd = _std_fd_of(st0)  # `--json F > F`: F is standard output, redirected; write it as such
    if fd is not None:
        return _plan_fd(flag, dest, fd, regular_only)
    try:
        lst = os.lstat(dest)
    except FileNotFoundError:
        lst = None
    except OSError as err:
        raise UserError(f"{shown}: {reason(err)}") from err
    if lst is not None and stat.S_ISLNK(lst.st_mode) and not follow_links:
        raise UserError(f"{shown}: is a link (to {os.readlink(dest)!r}); refusing to write through a link not named")
    try:
        st = os.stat(dest)
    except FileNotFoundError as err:
        if lst is not None:  # a link whose target does not exist
            raise UserError(f"{shown}: is a link to {os.readlink(dest)!r}, which does not exist") from err
        st = None
    except OSError as err:
        raise UserError(f"{shown}: {reason(err)}") from err
    target = os.path.realpath(dest)
    if target == "/proc" or target.startswith(("/proc/", "/sys/")) or target == "/sys":
        raise UserError(f"{shown}: is a kernel file under /proc or /sys; a result is never written there")
    if st is not None and not stat.S_ISREG(st.st_mode):
        mode = st.st_mode
        if (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)) and not regular_only:
            return _plan_through(flag, dest, st)
        what = kind_of(mode)
        raise UserError(
            f"{shown}: is {what}; refusing to replace it"
            + ("" if regular_only or stat.S_ISDIR(mode) else " (only files, character devices and fifos are written)")
        )
    parent = os.path.dirname(target) or "."
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as err:
        raise UserError(f"{shown}: cannot create {parent!r}: {reason(err)}") from err
    if not os.access(parent, os.W_OK | os.X_OK):
        # The result is replaced atomically: a temporary file beside it, then a rename. That needs the directory.
        raise UserError(f"{shown}: cannot create files in {parent!r} (permission denied)")
    if st is not None and not os.access(target, os.W_OK):
        raise UserError(f"{shown}: cannot write: permission denied")
    claim_output(flag, dest, target)
    _sweep_stale_temporaries(target)
    return Output(flag, dest, "file", target=target, identity=(st.st_dev, st.st_ino) if st else None)


def _plan_fd(flag: str, dest: str, fd: int, regular_only: bool) -> Output:
    shown = f"{flag} {dest!r}"
    name = _STD_NAMES.get(fd, f"descriptor {fd}")
    if regular_only:
        raise UserError(f"{shown}: must be a file (this output is written as a regular file)")
    if fd in CLOSED_STD_FDS:
        raise UserError(f"{shown}: {name} is closed: the output would be lost")
    try:
        st = os.fstat(fd)
        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError as err:
        raise UserError(f"{shown}: {name} is not open") from err
    if fd == 0 or mode == os.O_RDONLY:
        raise UserError(f"{shown}: {name} is open for reading, not writing")
    return Output(flag, dest, "fd", fd=fd, identity=(st.st_dev, st.st_ino))


def _plan_through(flag: str, dest: str, st: os.stat_result) -> Output:
    """A character device or fifo: opened now (a fifo needs its reader now, not after an hour of measuring) and kept
    open until the result is written; never created, truncated or replaced."""
    shown = f"{flag} {dest!r}"
    try:
        fd = os.open(dest, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as err:
        raise UserError(f"{shown}: {kind_of(st.st_mode)} that cannot be written: {reason(err)}") from err
    got = os.fstat(fd)
    if not (stat.S_ISCHR(got.st_mode) or stat.S_ISFIFO(got.st_mode)):  # swapped since the stat: not ours to write
        os.close(fd)
        raise UserError(f"{shown}: changed while it was checked; refused")
    os.set_blocking(fd, True)
    _OPEN_THROUGH.append(fd)
    return Output(flag, dest, "through", target=os.path.realpath(dest), fd=fd, identity=(got.st_dev, got.st_ino))


_OPEN_THROUGH: list[int] = []


def _temp_name(target: str) -> str:
    return os.path.join(os.path.dirname(target) or ".", f".{os.path.basename(target)}.er-{os.getpid()}.tmp")


def _sweep_stale_temporaries(target: str) -> None:
    """Temporary files a killed writer left beside `target` (named after its pid, which is gone): removed."""
    directory, base = os.path.dirname(target) or ".", os.path.basename(target)
    prefix = f".{base}.er-"
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix) and n.endswith(".tmp")]
    except OSError:
        return
    for n in names:
        pid = n[len(prefix) : -len(".tmp")]
        if not pid.isdecimal() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # its writer is alive
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError, ValueError):
            continue
        try:
            os.unlink(os.path.join(directory, n))
        except OSError:
            pass


def check_distinct(outputs: Iterable[Output], inputs: Iterable[tuple[str, str | os.PathLike[str] | None]] = ()) -> None:
    """Refuse two outputs that are the same file (or both standard output), and an output that is an input.

    Character devices and fifos may be named twice (writing /dev/null twice loses nothing)."""
    outs = list(outputs)
    seen: dict[object, Output] = {}
    for o in outs:
        if o.kind == "through":
            continue
        keys = [("fd", o.fd)] if o.kind == "fd" else [("path", o.target)]
        if o.identity is not None:
            keys.append(("ino", o.identity))
        for key in keys:
            other = seen.get(key)
            if other is not None:
                raise UserError(
                    f"{o.shown()} and {other.shown()} are the same destination: one would overwrite the other"
                )
        for key in keys:
            seen[key] = o
    for flag, path in inputs:
        if path is None or str(path) == "":
            continue
        try:
            real = os.path.realpath(path)
            st = os.stat(path)
            ident = (st.st_dev, st.st_ino)
        except (OSError, ValueError):
            ident = None
        for o in outs:
            if o.kind == "file" and (o.target == real or (ident is not None and o.identity == ident)):
                raise UserError(
                    f"{o.shown()}: is {flag} ({str(path)!r}), an input of this command; refusing to overwrite it"
                )


def check_outside(outputs: Iterable[Output], trees: Iterable[tuple[str | os.PathLike[str], str]]) -> None:
    """Refuse an output that lands inside a tree the command reads (a --sysroot capture, a state dir): every file
    there is an input, whether or not this run happens to read it."""
    for tree, what in trees:
        top = os.path.realpath(tree)
        for o in outputs:
            if o.kind == "file" and o.target and (o.target == top or o.target.startswith(top.rstrip("/") + "/")):
                raise UserError(
                    f"{o.shown()}: is inside {what} ({str(tree)!r}), which this command reads; write it elsewhere"
                )


def write_output(out: Output, data: bytes | str) -> None:
    """Write `data` where `out` says: atomically for a file, in place for a device or fifo, to a descriptor for `-`."""
    raw = data.encode() if isinstance(data, str) else data
    try:
        if out.kind == "fd":
            if out.fd in (1, 2):
                stream = sys.stdout if out.fd == 1 else sys.stderr
                if stream is not None:
                    stream.flush()
            _write_all(out.fd, raw)  # type: ignore[arg-type]
        elif out.kind == "through":
            try:
                _write_all(out.fd, raw)  # type: ignore[arg-type]
            finally:
                if out.fd in _OPEN_THROUGH:
                    _OPEN_THROUGH.remove(out.fd)
                    os.close(out.fd)  # type: ignore[arg-type]  # EOF for a fifo's reader
        else:
            _replace_file(out, raw)
    except OSError as err:
        raise UserError(f"{out.shown()}: cannot write: {reason(err)}") from err


def _write_all(fd: int, raw: bytes) -> None:
    view = memoryview(raw)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _replace_file(out: Output, raw: bytes) -> None:
    """Temporary file beside the real target, fsync, rename: a crash leaves the old file or the new one, whole. A hard
    link to the old file keeps the old content (writing in place could leave both names empty)."""
    target = out.target or out.dest
    try:
        existing = os.stat(target)
    except FileNotFoundError:
        existing = None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        raise UserError(
            f"{out.shown()}: became {kind_of(existing.st_mode)} since it was checked; refusing to replace it"
        )
    tmp = _temp_name(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        if existing is not None:
            os.fchmod(fd, stat.S_IMODE(existing.st_mode))
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)  # a result is as readable as any other file the user makes
        _write_all(fd, raw)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, target)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# ---------------------------------------------------------------------------------------------------------- JSON
def finite(o):
    """The same structure with every NaN or infinite float replaced by None (JSON has neither)."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [finite(v) for v in o]
    return o


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return finite(o.item())
    if isinstance(o, np.ndarray):
        return finite(o.tolist())
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def dumps(doc) -> str:
    """JSON text, indented, without NaN or Infinity (they become null), numpy scalars and paths converted."""
    return json.dumps(finite(doc), indent=2, default=_json_default, allow_nan=False) + "\n"


def write_json(doc, out: Output) -> None:
    write_output(out, dumps(doc))
