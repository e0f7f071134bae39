"""The agent's state directory: models uploaded by hash, the outbox of answers kept until the host acknowledges them,
and the requests that were running when the agent stopped. Everything the agent writes is below it, and nothing a
request names can lead out of it.

    STATE/lock                      flock: one agent per state directory (and /run/lock/edge-runtime-agent-*.lock,
                                    keyed by its path, which outlives the directory: see StateDir.acquire)
    STATE/models/<sha256>/<name>    a model's files (an OpenVINO .xml and its .bin side by side), each checked by hash,
                                    held once under the names they first came with: other names are aliases
    STATE/models/<sha256>/<name>.part   an upload under way (resumed from its length)
    STATE/models/<sha256>/upload.json   the files an upload declared: its chunks may write those, up to those sizes
    STATE/models/<sha256>/model.json    written when every file is complete; its mtime is the model's last use; it
                                        lists the other names the same files were declared under (aliases)
    STATE/outbox/<id>.json          an answer not yet acknowledged by the host
    STATE/done/<id>.json            acknowledged answers, the newest DONE_KEPT (a repeated request id is answered again)
    STATE/running/<id>.json         a request being run (left behind by a kill: re-run when asked again)

Files are written to a temporary name, fsync'ed and renamed, so a kill at any moment leaves either the old or the new.
Room for a model is made against --max-store and against the free space of the disk the directory is on (a board's
small or shared disk fills before the bound): the models used longest ago go first, never one in use, and nothing is
evicted when even evicting all the others would not make the room.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from edge_runtime.errors import UserError
from edge_runtime.system import locks
from edge_runtime.system.outputs import dumps

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
SHA256 = re.compile(r"[0-9a-f]{64}")
DONE_KEPT = 1000
MANIFEST = "model.json"  # written by the agent when every file of a model is here and checked
UPLOAD = "upload.json"  # the files an upload declared (names, sizes, hashes): chunks write only these
RESERVED = {MANIFEST, UPLOAD, "lock"}
DEFAULT_MAX_STORE = 2 << 30
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
ALIASES_KEPT = 16  # other names a model's files were declared under, remembered in its model.json


class RequestError(UserError):
    """A request the agent refuses (bad name, bad hash, too large): answered with an error, the agent goes on."""

    def __init__(self, message: str, kind: str = "bad-request"):
        super().__init__(message)
        self.kind = kind


def check_name(name: object, what: str = "name") -> str:
    """A file name a request gives: one path component of safe characters, never '..', '/', a hidden file or a name
    the agent keeps for itself."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or name.endswith((".part", ".tmp")) or ".." in name:
        raise RequestError(f"{what} {str(name)[:80]!r}: not a plain file name (letters, digits, . _ + -)", "bad-path")
    if name.lower() in RESERVED:
        raise RequestError(f"{what} {name!r}: a name the agent keeps for itself", "bad-path")
    return name


def _read_files(path: str) -> list[dict] | None:
    """The `files` list of a manifest the agent wrote, or None when it is missing or not one."""
    try:
        with open(path) as f:
            doc = json.load(f)
        files = doc["files"]
        if (
            isinstance(files, list)
            and files
            and all(
                isinstance(x, dict) and isinstance(x.get("name"), str) and isinstance(x.get("size"), int) for x in files
            )
        ):
            return files
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        pass
    return None


def check_sha(sha: object, what: str = "sha256") -> str:
    if not isinstance(sha, str) or not SHA256.fullmatch(sha.lower()):
        raise RequestError(f"{what} {str(sha)[:80]!r}: not a sha256 (64 hex digits)")
    return sha.lower()


def write_atomic(path: str, data: bytes) -> None:
    """Write `path` whole or not at all; a write that fails (a full disk) leaves no temporary behind."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _rounded(n: int, block: int) -> int:
    """`n` bytes as the blocks of `block` bytes a file system gives them."""
    return -(-n // block) * block


def _names(files: list[dict]) -> list[str]:
    return [f["name"] for f in files]


def _same_bytes(a: list[dict], b: list[dict]) -> bool:
    """Two declarations of the same files, whatever their names."""
    return [(f["sha256"], f["size"]) for f in a] == [(f["sha256"], f["size"]) for f in b]


def _write_at(path: str, offset: int, data: bytes) -> None:
    """Write `data` at `offset` of `path` (made if missing), which ends there."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.lseek(fd, offset, os.SEEK_SET)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.ftruncate(fd, offset + len(data))
    finally:
        os.close(fd)


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass
class StateDir:
    root: str
    max_store: int = DEFAULT_MAX_STORE
    in_use: set = field(default_factory=set)  # models of jobs queued or running: never evicted
    log: Callable[[str], None] | None = None  # what the directory's owner should hear: evictions, leftovers swept

    def __post_init__(self) -> None:
        self.root = os.path.abspath(self.root)
        self._lock_fd: int | None = None
        self._path_lock: tuple[str, int] | None = None
        try:
            for sub in ("models", "outbox", "done", "running"):
                os.makedirs(os.path.join(self.root, sub), mode=0o700, exist_ok=True)
        except OSError as err:
            raise self._unusable(err) from None

    def _unusable(self, err: OSError) -> UserError:
        if err.errno == errno.EROFS:
            return UserError(
                f"--state-dir {self.root!r}: on a read-only file system (the agent keeps its models and results there)",
                hint="mount it read-write, or give a --state-dir on a writable disk",
            )
        return UserError(f"--state-dir {self.root!r}: cannot use it ({err.strerror or err})")

    def _say(self, text: str) -> None:
        if self.log is not None:
            self.log(text)

    def path(self, *parts: str) -> str:
        """A path below the state dir; raises when the parts would lead out of it (they are checked names anyway)."""
        p = os.path.realpath(os.path.join(self.root, *parts))
        if os.path.commonpath([p, os.path.realpath(self.root)]) != os.path.realpath(self.root):
            raise RequestError(f"{'/'.join(parts)[:100]!r} leads out of the agent's state directory", "bad-path")
        return p

    def acquire(self) -> None:
        """One agent per state directory (two would hand out each other's answers): flock, released by the kernel
        when this process ends however it ends. Two locks: `lock` inside the directory (the same directory by any
        path), and one in /run/lock keyed by the directory's path, which outlives the directory: if it is deleted
        under a running agent, a second agent started on the folder made anew is refused until the first has
        noticed (lost()) and stopped (issue 22). Then what a killed writer left behind is swept (sweep())."""
        key = hashlib.sha256(os.path.realpath(self.root).encode(errors="surrogateescape")).hexdigest()[:16]
        by_path = os.path.join(locks.lock_dir(), f"edge-runtime-agent-{key}.lock")
        try:
            self._path_lock = (by_path, self._take(by_path))
        except OSError:
            pass  # no lock there (a read-only /run): the lock inside the directory still guards it
        try:
            self._lock_fd = self._take(os.path.join(self.root, "lock"))
        except OSError as err:
            self.release()
            raise self._unusable(err) from None
        self.sweep()

    def _take(self, path: str) -> int:
        """take_lock, with this pid written in for the next one to name; a held lock is a one-line UserError."""
        try:
            fd = locks.take_lock(path)
        except BlockingIOError:
            self.release()
            raise UserError(
                f"--state-dir {self.root!r}: another agent (pid {locks.lock_holder(path) or '?'}) is using it",
                hint="stop it, or give this one its own --state-dir",
            ) from None
        with contextlib.suppress(OSError):  # the pid is for the message above: a full disk must not stop the agent
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    def release(self) -> None:
        """Let go of the locks (the kernel does at exit): the one in /run/lock is removed, `lock` inside stays."""
        if self._path_lock is not None:
            locks.drop_lock(*self._path_lock)
            self._path_lock = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def lost(self) -> str | None:
        """Why the directory this agent locked is no longer the one at its path, or None while it is: deleted or
        moved (its lock file is gone), or its lock file removed or replaced (another agent could lock the new one).
        A stat of one file: cheap enough for every request and every few ticks of the I/O loop."""
        if self._lock_fd is None or locks.same_file(os.path.join(self.root, "lock"), self._lock_fd):
            return None
        if not os.path.isdir(self.root):
            return f"--state-dir {self.root!r} was deleted or moved while the agent ran"
        return f"--state-dir {self.root!r}: its lock file was removed or replaced while the agent ran"

    def sweep(self) -> list[str]:
        """Remove what a writer that was stopped left behind: temporaries (*.tmp), and in models/ what no upload can
        use: a model folder with neither a model.json nor an upload.json (nothing could resume it), and files
        neither declares (a .part of a model already complete, a part of another upload). Only with the lock held:
        another agent's temporaries are its own. Logged; returns the paths (relative to the state dir)."""
        gone = []
        for dirpath, _dirs, files in os.walk(self.root):
            gone += [self._remove(os.path.join(dirpath, f)) for f in files if f.endswith(".tmp")]
        with os.scandir(self.path("models")) as entries:
            folders = [e for e in entries if e.is_dir(follow_symlinks=False) and SHA256.fullmatch(e.name)]
        for entry in folders:  # strays of other names are left to _make_room, which evicts them first
            held = _read_files(os.path.join(entry.path, MANIFEST))
            declared = None if held else _read_files(os.path.join(entry.path, UPLOAD))
            if held is None and declared is None:
                gone.append(self._remove(entry.path))
                continue
            if held:
                keep = {MANIFEST, *_names(held)}
            else:
                keep = {UPLOAD, *_names(declared), *(n + ".part" for n in _names(declared))}
            with os.scandir(entry.path) as files:
                gone += [self._remove(f.path) for f in files if f.name not in keep]
        gone = [g for g in gone if g]
        if gone:
            self._say(f"removed what a stopped writer left behind: {', '.join(gone)}")
        return gone

    def _remove(self, path: str) -> str:
        """Remove a file or a folder; '' when it could not be. Returns what it was, for the log: its path in the
        state dir (a model's hash shortened), the files a folder held, and their bytes."""
        folder = os.path.isdir(path) and not os.path.islink(path)
        held = []
        for dirpath, _dirs, files in os.walk(path) if folder else [("", [], [path])]:
            for f in files:
                with contextlib.suppress(OSError):
                    held.append((os.path.basename(f), os.lstat(os.path.join(dirpath, f)).st_size))
        if folder:
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if os.path.lexists(path):
            return ""
        parts = os.path.relpath(path, self.root).split(os.sep)
        rel = "/".join(p[:12] + "..." if SHA256.fullmatch(p) else p for p in parts)
        inside = ", ".join(name for name, _ in held) + "; " if folder and held else ""
        return f"{rel}{'/' if folder else ''} ({inside}{sum(n for _, n in held):,} bytes)"

    # ------------------------------------------------------------------------------------------------ models
    def model_dir(self, sha: str) -> str:
        return self.path("models", check_sha(sha))

    def model_status(self, sha: str, files: list[dict]) -> dict:
        """What the agent has of a model: per file, the bytes it holds (size when complete). Begins (or resumes) its
        upload: the files declared here are the only ones, and the only sizes, its chunks may write. Files held
        under other names are the same model (the hash says so): answered complete, never sent again. Room is made
        here, before a byte is sent; what was evicted for it is in the answer (`evicted`)."""
        sha = check_sha(sha)
        files = self._check_files(files)
        d = self.model_dir(sha)
        total = sum(f["size"] for f in files)
        if total > self.max_store:
            raise RequestError(
                f"model {sha[:12]}: {total:,} bytes is more than the agent's model store ({self.max_store:,} bytes)",
                "too-large",
            )
        held = _read_files(os.path.join(d, MANIFEST))
        if held is not None and _same_bytes(held, files):
            return self._held(sha, held, files)
        if held is not None and sha in self.in_use:  # the same hash split into other files: not while it runs
            raise RequestError(
                f"model {sha[:12]}: held as {', '.join(_names(held))} for a job queued or running; declared now as "
                f"{', '.join(_names(files))}: ask again when the job is done",
                "busy",
            )
        fresh = held is not None or self._declared(sha) != files
        if fresh:  # a new upload, or one declared differently: start it over
            gone = self._remove(d) if os.path.lexists(d) else ""
            if held is not None and gone:
                self._say(f"model {sha[:12]} declared as other files ({', '.join(_names(files))}): removed {gone}")
        have = [self._have(d, f) for f in files]
        block = self._block_size()
        need_disk = sum(_rounded(f["size"], block) - _rounded(h, block) for f, h in zip(files, have, strict=True))
        need_disk += block * (2 if fresh else 1)  # upload.json, then model.json beside it for a moment
        need_store = total - sum(have)
        evicted = self._make_room(need_store, need_disk, keep={sha, *self.in_use})
        self._check_room(f"model {sha[:12]}", need_store, need_disk)
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
            if fresh:
                write_atomic(os.path.join(d, UPLOAD), dumps({"sha256": sha, "files": files}).encode())
        except OSError as err:
            if err.errno not in NO_SPACE:
                raise
            self._discard(sha, d)
            raise self._no_space(f"model {sha[:12]}", 0) from None
        out = {"complete": False, "files": [{"name": f["name"], "have": h} for f, h in zip(files, have, strict=True)]}
        if evicted:
            out["evicted"] = evicted
        return out

    def _held(self, sha: str, held: list[dict], files: list[dict]) -> dict:
        """model_status of a model held complete: its last use is now; names other than the held ones are
        remembered as its aliases (a request may name the model by any of them)."""
        d = self.model_dir(sha)
        manifest = os.path.join(d, MANIFEST)
        names, out = _names(files), {"complete": True, "files": [{"name": f["name"], "have": f["size"]} for f in files]}
        if names == _names(held):
            os.utime(manifest)
            return out
        aliases = self._aliases(sha)
        if names not in aliases:
            self._make_room(0, self._block_size(), keep={sha, *self.in_use})
            doc = {"sha256": sha, "files": held, "aliases": [names, *aliases][:ALIASES_KEPT]}
            try:
                write_atomic(manifest, dumps(doc).encode())
            except OSError as err:
                if err.errno not in NO_SPACE:
                    raise
                raise self._no_space(f"model {sha[:12]}", 0) from None
            self._say(f"model {sha[:12]}: {', '.join(names)} is another name for {', '.join(_names(held))}, held")
        os.utime(manifest)
        return {**out, "held_as": _names(held)}

    def _aliases(self, sha: str) -> list[list[str]]:
        """The other names (one list per declaration) model.json remembers for a model's files."""
        try:
            with open(os.path.join(self.model_dir(sha), MANIFEST)) as f:
                aliases = json.load(f).get("aliases", [])
        except (OSError, ValueError, AttributeError, RecursionError):
            return []
        if not isinstance(aliases, list):
            return []
        return [a for a in aliases if isinstance(a, list) and a and all(isinstance(n, str) for n in a)]

    @staticmethod
    def _have(d: str, f: dict) -> int:
        final, part = os.path.join(d, f["name"]), os.path.join(d, f["name"] + ".part")
        if os.path.isfile(final) and os.path.getsize(final) == f["size"]:
            return f["size"]
        if os.path.isfile(part):
            return min(os.path.getsize(part), f["size"])
        return 0

    def _declared(self, sha: str) -> list[dict] | None:
        return _read_files(os.path.join(self.model_dir(sha), UPLOAD))

    def _declared_file(self, sha: str, name: str) -> dict:
        name = check_name(name, "file name")
        for f in self._declared(sha) or []:
            if f["name"] == name:
                return f
        raise RequestError(f"model {sha[:12]}: {name!r} is not a file of an upload begun (ask model_status first)")

    def write_chunk(self, sha: str, name: str, offset: int, data: bytes) -> int:
        """Write a chunk at `offset` of a declared file; one the agent already has is skipped, one after a gap is
        not written (the host resends from what is held). Returns the bytes held."""
        sha = check_sha(sha)
        f = self._declared_file(sha, name)
        d = self.model_dir(sha)
        final, part = os.path.join(d, f["name"]), os.path.join(d, f["name"] + ".part")
        if os.path.isfile(final):
            return os.path.getsize(final)
        have = os.path.getsize(part) if os.path.isfile(part) else 0
        if offset > have:
            return have
        if offset + len(data) > f["size"]:
            raise RequestError(
                f"{f['name']}: chunk at {offset:,} runs past its declared size {f['size']:,}", "too-large"
            )
        if offset + len(data) <= have:
            return have  # already here (a repeated chunk)
        if self.store_bytes() + offset + len(data) - have > self.max_store:
            raise RequestError(f"{f['name']}: the agent's model store ({self.max_store:,} bytes) is full", "too-large")
        for attempt in range(2):  # a full disk: room made once (another model evicted), then the upload given up
            try:
                _write_at(part, offset, data)
                return offset + len(data)
            except OSError as err:
                if err.errno not in NO_SPACE:
                    raise
            growth = _rounded(offset + len(data) - have, self._block_size())
            if attempt or not self._make_room(0, growth, keep={sha, *self.in_use}):
                break
        self._discard(sha, d)  # its part would only keep the disk full for every later upload (issue 22)
        raise self._no_space(f["name"], 0, discarded=True)

    def finish_file(self, sha: str, name: str, want_sha: str) -> dict:
        """Check an uploaded file against the hash declared for it and keep it; when every declared file is here and
        together they hash to the model's sha256, the model is complete (model.json)."""
        sha = check_sha(sha)
        f = self._declared_file(sha, name)
        if check_sha(want_sha) != f["sha256"]:
            raise RequestError(f"{f['name']}: sha256 {want_sha[:16]}... is not the one declared for it")
        d = self.model_dir(sha)
        final, part = os.path.join(d, f["name"]), os.path.join(d, f["name"] + ".part")
        if not os.path.isfile(final):
            got = os.path.getsize(part) if os.path.isfile(part) else 0
            if got != f["size"]:
                raise RequestError(f"{f['name']}: {got:,} of {f['size']:,} bytes uploaded", "incomplete")
            got_sha = file_sha256(part)
            if got_sha != f["sha256"]:
                shutil.rmtree(d, ignore_errors=True)  # nothing of a lying upload is kept
                raise RequestError(
                    f"{f['name']}: the bytes uploaded hash to {got_sha[:16]}..., not the declared "
                    f"{f['sha256'][:16]}...: discarded",
                    "hash-mismatch",
                )
            with open(part, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(part, final)
        files = self._declared(sha) or []
        if files and all(os.path.isfile(os.path.join(d, x["name"])) for x in files):
            whole = hashlib.sha256()  # a model's hash is of its files in order (ModelFile.sha256: the .xml, the .bin)
            for x in files:
                with open(os.path.join(d, x["name"]), "rb") as fh:
                    for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                        whole.update(block)
            if whole.hexdigest() != sha:
                shutil.rmtree(d, ignore_errors=True)
                raise RequestError(
                    f"model {sha[:12]}: its files together hash to {whole.hexdigest()[:12]}: discarded", "hash-mismatch"
                )
            write_atomic(os.path.join(d, MANIFEST), dumps({"sha256": sha, "files": files}).encode())
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(d, UPLOAD))  # the upload is over: model.json says what is here
            return {"complete": True}
        return {"complete": False}

    def model_path(self, sha: str, name: str | None = None) -> str:
        """The model's main file, for a request that runs it, which may name it by any name its files were declared
        under (the held one or an alias: the same bytes); its last use is now (eviction keeps recent ones)."""
        sha = check_sha(sha)
        manifest = os.path.join(self.model_dir(sha), MANIFEST)
        files = _read_files(manifest)
        if not files:
            raise RequestError(f"model {sha[:12]}: not on this board (upload it first)", "no-model")
        known = {files[0]["name"], *(a[0] for a in self._aliases(sha))}
        if name is not None and check_name(name, "model") not in known:
            raise RequestError(f"model {name!r} is not a name model {sha[:12]} was uploaded under")
        os.utime(manifest)
        return os.path.join(self.model_dir(sha), files[0]["name"])

    def _check_files(self, files: object) -> list[dict]:
        if not isinstance(files, list) or not files or len(files) > 8:
            raise RequestError("files: a list of 1 to 8 {name, sha256, size}")
        out, names = [], set()
        for f in files:
            if not isinstance(f, dict):
                raise RequestError("files: a list of {name, sha256, size}")
            size = f.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= self.max_store:
                raise RequestError(f"size {size!r}: must be 1 to {self.max_store:,} bytes", "too-large")
            name = check_name(f.get("name"), "file name")
            if name.lower() in names:
                raise RequestError(f"file name {name!r}: given twice")
            names.add(name.lower())
            out.append({"name": name, "sha256": check_sha(f.get("sha256")), "size": size})
        return out

    def store_bytes(self) -> int:
        total = 0
        for dirpath, _dirs, files in os.walk(self.path("models")):
            for f in files:
                try:
                    total += os.lstat(os.path.join(dirpath, f)).st_size
                except OSError:
                    pass
        return total

    def disk_free(self) -> int:
        """Bytes the disk holding the state dir still takes (statvfs f_bavail: the blocks kept for root stay for the
        system, even when the agent runs as root)."""
        st = os.statvfs(self.root)
        return st.f_bavail * st.f_frsize

    def _block_size(self) -> int:
        try:
            return os.statvfs(self.root).f_frsize or 4096
        except OSError:
            return 4096

    def _check_room(self, what: str, need_store: int, need_disk: int) -> None:
        if need_store > 0 and self.store_bytes() + need_store > self.max_store:
            raise RequestError(
                f"{what}: {need_store:,} more bytes do not fit in the agent's model store ({self.max_store:,} bytes), "
                "even with every model not in use evicted",
                "too-large",
            )
        if self.disk_free() < need_disk:
            raise self._no_space(what, need_disk)

    def _no_space(self, what: str, need: int, discarded: bool = False) -> RequestError:
        free = self.disk_free()
        if need:
            text = f"{need:,} bytes do not fit on the disk of the agent's state dir {self.root!r} ({free:,} bytes free"
        else:
            text = f"no space left on the disk of the agent's state dir {self.root!r} ({free:,} bytes free"
        text += ", even with every model not in use evicted)" + (": the upload is discarded" if discarded else "")
        return RequestError(f"{what}: {text}", "no-space")

    def _discard(self, sha: str, d: str) -> None:
        """Give up an unfinished upload (never a complete model or one in use) that the disk has no room for."""
        if sha in self.in_use or os.path.exists(os.path.join(d, MANIFEST)):
            return
        if self._remove(d):
            self._say(f"upload of model {sha[:12]} discarded: no space left for it on the disk of the state dir")

    def _make_room(self, need_store: int, need_disk: int, keep: set[str]) -> list[dict]:
        """Evict until `need_store` more bytes fit under --max-store and `need_disk` more fit on the disk: strays in
        models/ first, then models and unfinished uploads by last use; never one in `keep` (the one being uploaded,
        those queued or running). Nothing is evicted when evicting every other would not make the room (the caller
        refuses). Logs and returns what went."""
        short_store = self.store_bytes() + need_store - self.max_store
        free = self.disk_free()
        short_disk = need_disk - free
        if short_store <= 0 and short_disk <= 0:
            return []
        if short_disk > 0:
            why = f"the disk of the state dir has {free:,} bytes free, {need_disk:,} needed"
        else:
            why = f"--max-store is {self.max_store:,} bytes"
        chosen = []
        for victim in sorted(self._victims(keep), key=lambda v: v["last_used"]):
            if short_store <= 0 and short_disk <= 0:
                break
            chosen.append(victim)
            short_store -= victim["bytes"]
            short_disk -= victim["disk_bytes"]
        if short_store > 0 or short_disk > 0:
            return []
        evicted = []
        for v in chosen:
            if not self._remove(v["path"]):
                continue
            if "stray" in v:
                self._say(f"evicted {v['stray']!r} from models/ ({v['bytes']:,} bytes, not a model): {why}")
                evicted.append({"stray": v["stray"], "bytes": v["bytes"]})
                continue
            what = ", ".join(v["files"]) + ("" if v["complete"] else ", an unfinished upload")
            self._say(f"evicted model {v['sha256'][:12]} ({what}, {v['bytes']:,} bytes): {why}")
            evicted.append({k: v[k] for k in ("sha256", "files", "bytes", "complete")})
        return evicted

    def _victims(self, keep: set[str]) -> list[dict]:
        """Everything in models/ but `keep`, with its size, its blocks on the disk and its last use (the newest
        mtime in it: model.json is touched at each use, a part at each chunk; a stray file counts as oldest)."""
        out = []
        with os.scandir(self.path("models")) as entries:
            for entry in entries:
                if entry.name in keep:
                    continue
                try:
                    if not entry.is_dir(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        out.append({"path": entry.path, "stray": entry.name, "last_used": 0.0, "bytes": st.st_size,
                                    "disk_bytes": st.st_blocks * 512})  # fmt: skip
                        continue
                    inside = [os.lstat(os.path.join(entry.path, f)) for f in os.listdir(entry.path)]
                    last_used = max([entry.stat(follow_symlinks=False).st_mtime, *(st.st_mtime for st in inside)])
                except OSError:
                    continue
                held = _read_files(os.path.join(entry.path, MANIFEST))
                declared = held or _read_files(os.path.join(entry.path, UPLOAD)) or []
                out.append({
                    "path": entry.path, "sha256": entry.name, "files": _names(declared), "complete": held is not None,
                    "last_used": last_used, "bytes": sum(st.st_size for st in inside),
                    "disk_bytes": sum(st.st_blocks * 512 for st in inside),
                })  # fmt: skip
        return out

    # ------------------------------------------------------------------------------------------------ outbox
    def answer(self, rid: str) -> dict | None:
        """The stored answer of request `rid` (outbox or acknowledged), or None."""
        for sub in ("outbox", "done"):
            try:
                with open(self.path(sub, rid + ".json")) as f:
                    return json.load(f)
            except (OSError, ValueError):
                continue
        return None

    def put_answer(self, rid: str, op: str, answer: dict) -> None:
        """Keep an answer until the host acknowledges it; never in a directory other than the one locked (deleted
        under the agent: the answer would land in a folder made anew, perhaps by another agent)."""
        why = self.lost()
        if why is not None:
            raise OSError(errno.ENOENT, why)
        doc = {"id": rid, "op": op, "at": time.time(), **answer}
        write_atomic(self.path("outbox", rid + ".json"), dumps(doc).encode())
        self.clear_running(rid)

    def pending(self) -> list[dict]:
        """Answers not yet acknowledged, oldest first."""
        out = []
        for f in os.listdir(self.path("outbox")):
            if f.endswith(".json"):
                try:
                    with open(self.path("outbox", f)) as fh:
                        doc = json.load(fh)
                    out.append({"id": doc["id"], "op": doc["op"], "at": doc["at"]})
                except (OSError, ValueError, KeyError):
                    continue
        return sorted(out, key=lambda d: d["at"])

    def ack(self, rid: str) -> bool:
        src = self.path("outbox", rid + ".json")
        if not os.path.exists(src):
            return False
        os.replace(src, self.path("done", rid + ".json"))
        done = sorted(os.scandir(self.path("done")), key=lambda e: e.stat().st_mtime)
        for e in done[: max(0, len(done) - DONE_KEPT)]:
            os.unlink(e.path)
        return True

    def mark_running(self, rid: str, op: str, args: dict) -> None:
        write_atomic(self.path("running", rid + ".json"), dumps({"id": rid, "op": op, "args": args}).encode())

    def clear_running(self, rid: str) -> None:
        try:
            os.unlink(self.path("running", rid + ".json"))
        except FileNotFoundError:
            pass

    def interrupted(self) -> list[str]:
        """Requests that were running when the agent last stopped (killed): re-run when the host asks again."""
        return sorted(f[:-5] for f in os.listdir(self.path("running")) if f.endswith(".json"))
