"""Files the user names as inputs: a path is stat'ed (links followed) and must be a regular file, or a directory
where one is asked for, no larger than its cap or what this machine could hold; it is opened non-blocking and checked
again on the open descriptor, so a fifo, a device or `/dev/zero` behind a link is refused instead of hanging or reading
without end. .npy and .npz files are checked before numpy allocates. The one writer of outputs is in outputs.py;
lock files in locks.py.

Never: open a user's path blocking, or believe a header's size.
"""

from __future__ import annotations

import errno
import os
import stat

from edge_runtime.errors import UserError

# Why an OSError happened, in words a user can act on; strerror where it is clear enough.
_REASONS = {
    errno.ENOENT: "no such file",
    errno.ELOOP: "is a symbolic link loop (too many levels of links)",
    errno.ENAMETOOLONG: "file name too long",
    errno.ENOTDIR: "a component of the path is not a directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EISDIR: "is a directory",
    errno.ENOSPC: "no space left on the device",
    errno.EROFS: "read-only file system",
    errno.ENXIO: "no process is reading from it",
}


def reason(err: OSError) -> str:
    """An OSError as a short phrase ("no such file", "is a symbolic link loop ...")."""
    return _REASONS.get(err.errno or 0) or (err.strerror or str(err)).lower()


def memory_bytes() -> int:
    """Physical memory of this machine: no input this process must hold can be larger."""
    try:  # what psutil.virtual_memory().total reads, without importing psutil for it
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (OSError, ValueError):  # not known here: a generous bound rather than none
        return 1 << 40


def kind_of(mode: int) -> str:
    """What a file that is not a regular one is, in words for a message ("a fifo", "a character device")."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a fifo"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _binary_size(n: int) -> str:
    """A cap as it is set (16 << 20 is "16 MiB", not "16.8 MB"), and a size beside it in the same unit."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}" if n % scale == 0 else f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def check_input(
    path: str | os.PathLike[str],
    what: str,
    *,
    error: type[UserError] = UserError,
    directory: bool | None = False,
    max_bytes: int | None = None,
) -> os.stat_result:
    """Stat `path` (links followed) and refuse what cannot be read as asked: `directory=False` wants a regular file,
    True a directory, None either. A file over `max_bytes` (the input's cap, said as such) or this machine's memory is
    refused too."""
    shown = str(path)
    if shown == "":
        raise error(f"{what} '': empty path")
    try:
        st = os.stat(path)
    except OSError as err:
        raise error(f"{what} {shown!r}: {reason(err)}") from err
    except ValueError as err:  # embedded NUL byte
        raise error(f"{what} {shown!r}: not a valid path ({err})") from err
    if stat.S_ISDIR(st.st_mode):
        if directory is False:
            raise error(f"{what} {shown!r}: is a directory, not a file")
        return st
    if directory is True:
        raise error(
            f"{what} {shown!r}: is {kind_of(st.st_mode) if not stat.S_ISREG(st.st_mode) else 'a file'}, not a directory"
        )
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{what} {shown!r}: is {kind_of(st.st_mode)}, not a regular file")
    if max_bytes is not None and st.st_size > max_bytes:  # the input's own cap, not the machine's memory
        raise error(f"{what} {shown!r}: {st.st_size:,} bytes ({_binary_size(st.st_size)}) is over the "
                    f"{_binary_size(max_bytes)} cap")  # fmt: skip
    bound = memory_bytes()
    if st.st_size > bound:
        raise error(f"{what} {shown!r}: {_size(st.st_size)} is more than this machine can hold ({_size(bound)})")
    return st


def open_input(
    path: str | os.PathLike[str], what: str, *, error: type[UserError] = UserError, max_bytes: int | None = None
):
    """Open a regular file for reading, checked on the descriptor itself (no race with a file swapped for a fifo)."""
    check_input(path, what, error=error, max_bytes=max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise error(f"{what} {str(path)!r}: {reason(err)}") from err
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise error(f"{what} {str(path)!r}: is {kind_of(st.st_mode)}, not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


# ----------------------------------------------------------------------------------------------------- .npy/.npz
def _npy_header(f, shown: str, what: str, error: type[UserError], available: int):
    """Read and check a .npy header from `f`; returns (shape, dtype, data bytes). `available`: bytes after the start."""
    import numpy as np
    from numpy.lib import format as npf

    start = f.tell()
    try:
        version = npf.read_magic(f)
    except ValueError as err:
        f.seek(start)
        if f.read(4) == b"PK\x03\x04":
            raise error(f"{what} {shown}: a .npz archive, where one .npy array is expected (numpy.save)") from err
        raise error(f"{what} {shown}: not a .npy array (no NUMPY header)") from err
    try:
        if version == (1, 0):
            shape, _, dtype = npf.read_array_header_1_0(f)
        else:
            shape, _, dtype = npf.read_array_header_2_0(f)
    except (ValueError, SyntaxError, TypeError) as err:
        raise error(f"{what} {shown}: not a .npy array (garbled header: {' '.join(str(err).split())[:120]})") from err
    if dtype.hasobject:
        raise error(f"{what} {shown}: holds Python objects (pickled data), not numbers; refused")
    if any(d < 0 for d in shape):
        raise error(f"{what} {shown}: garbled header (negative dimension in {shape})")
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    have = available - (f.tell() - start)
    if nbytes > have:
        raise error(
            f"{what} {shown}: header says shape {tuple(shape)} {dtype} ({_size(nbytes)}), but the file holds only "
            f"{_size(max(have, 0))} of data (truncated or garbled)"
        )
    return shape, dtype, nbytes


def load_npy(path: str | os.PathLike[str], what: str, *, error: type[UserError] = UserError):
    """A .npy array, checked before numpy reads it: a regular file, a real NUMPY header, no pickled objects, and no
    more elements than the file holds (a header claiming 10^12 elements is refused, not allocated)."""
    import numpy as np

    shown = repr(str(path))
    with open_input(path, what, error=error) as f:
        size = os.fstat(f.fileno()).st_size
        _npy_header(f, shown, what, error, size)
        f.seek(0)
        try:
            return np.load(f, allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:
            raise error(f"{what} {shown}: not a readable .npy array ({' '.join(str(err).split())[:160]})") from err


def load_npz(path: str | os.PathLike[str], what: str, *, error: type[UserError] = UserError) -> dict:
    """Every array of a .npz, each member checked as `load_npy` checks a file; the total bounded by memory."""
    import zipfile

    import numpy as np

    shown = repr(str(path))
    out = {}
    with open_input(path, what, error=error) as f:
        try:
            z = zipfile.ZipFile(f)
        except (zipfile.BadZipFile, OSError, ValueError) as err:
            raise error(f"{what} {shown}: not a .npz archive (not a zip file)") from err
        with z:
            infos = z.infolist()
            total = sum(i.file_size for i in infos)
            if total > memory_bytes():
                raise error(f"{what} {shown}: unpacks to {_size(total)}, more than this machine can hold")
            for info in infos:
                name = info.filename.removesuffix(".npy")
                member = f"{shown}[{name!r}]"
                try:
                    with z.open(info) as m:
                        _npy_header(m, member, what, error, info.file_size)
                    with z.open(info) as m:
                        data = m.read(info.file_size + 1)
                except (zipfile.BadZipFile, OSError, EOFError, RuntimeError, NotImplementedError) as err:
                    raise error(f"{what} {member}: cannot unpack ({' '.join(str(err).split())[:120]})") from err
                import io

                try:
                    out[name] = np.load(io.BytesIO(data), allow_pickle=False)
                except (ValueError, OSError, EOFError) as err:
                    raise error(f"{what} {member}: not a readable array ({' '.join(str(err).split())[:160]})") from err
    return out
