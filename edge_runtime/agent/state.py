"""The agent's state directory: models uploaded by hash, the outbox of answers kept until the host acknowledges them,
and the requests that were running when the agent stopped. Everything the agent writes is below it, and nothing a
request names can lead out of it.

    STATE/lock                      flock: one agent per state directory
    STATE/models/<sha256>/<name>    a model's files (an OpenVINO .xml and its .bin side by side), each checked by hash
    STATE/models/<sha256>/<name>.part   an upload under way (resumed from its length)
    STATE/models/<sha256>/upload.json   the files an upload declared: its chunks may write those, up to those sizes
    STATE/models/<sha256>/model.json    written when every file is complete; its mtime is the model's last use
    STATE/outbox/<id>.json          an answer not yet acknowledged by the host
    STATE/done/<id>.json            acknowledged answers, the newest DONE_KEPT (a repeated request id is answered again)
    STATE/running/<id>.json         a request being run (left behind by a kill: re-run when asked again)

Files are written to a temporary name, fsync'ed and renamed, so a kill at any moment leaves either the old or the new.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field

from edge_runtime.errors import UserError
from edge_runtime.system.outputs import dumps

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
SHA256 = re.compile(r"[0-9a-f]{64}")
DONE_KEPT = 1000
MANIFEST = "model.json"  # written by the agent when every file of a model is here and checked
UPLOAD = "upload.json"  # the files an upload declared (names, sizes, hashes): chunks write only these
RESERVED = {MANIFEST, UPLOAD, "lock"}
DEFAULT_MAX_STORE = 2 << 30


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
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


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

    def __post_init__(self) -> None:
        self.root = os.path.abspath(self.root)
        try:
            for sub in ("models", "outbox", "done", "running"):
                os.makedirs(os.path.join(self.root, sub), mode=0o700, exist_ok=True)
        except OSError as err:
            raise UserError(f"--state-dir {self.root!r}: cannot use it ({err.strerror})") from None
        for dirpath, _dirs, files in os.walk(self.root):  # temporaries of a writer that was killed
            for f in files:
                if f.endswith(".tmp"):
                    os.unlink(os.path.join(dirpath, f))

    def path(self, *parts: str) -> str:
        """A path below the state dir; raises when the parts would lead out of it (they are checked names anyway)."""
        p = os.path.realpath(os.path.join(self.root, *parts))
        if os.path.commonpath([p, os.path.realpath(self.root)]) != os.path.realpath(self.root):
            raise RequestError(f"{'/'.join(parts)[:100]!r} leads out of the agent's state directory", "bad-path")
        return p

    def acquire(self) -> None:
        """One agent per state directory (two would hand out each other's answers): flock, released by the kernel
        when this process ends however it ends."""
        import fcntl

        path = os.path.join(self.root, "lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise UserError(
                f"--state-dir {self.root!r}: another agent (pid {holder}) is using it",
                hint="stop it, or give this one its own --state-dir",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    # ------------------------------------------------------------------------------------------------ models
    def model_dir(self, sha: str) -> str:
        return self.path("models", check_sha(sha))

    def model_status(self, sha: str, files: list[dict]) -> dict:
        """What the agent has of a model: per file, the bytes it holds (size when complete). Begins (or resumes) its
        upload: the files declared here are the only ones, and the only sizes, its chunks may write."""
        sha = check_sha(sha)
        files = self._check_files(files)
        d = self.model_dir(sha)
        total = sum(f["size"] for f in files)
        if total > self.max_store:
            raise RequestError(
                f"model {sha[:12]}: {total:,} bytes is more than the agent's model store ({self.max_store:,} bytes)",
                "too-large",
            )
        if self.complete(sha, files):
            os.utime(os.path.join(d, "model.json"))
            return {"complete": True, "files": [{"name": f["name"], "have": f["size"]} for f in files]}
        declared = self._declared(sha)
        if declared != files:  # a new upload, or one declared differently: start it over
            shutil.rmtree(d, ignore_errors=True)
        self._make_room(total, keep={sha, *self.in_use})
        os.makedirs(d, mode=0o700, exist_ok=True)
        if declared != files:
            write_atomic(os.path.join(d, UPLOAD), dumps({"sha256": sha, "files": files}).encode())
        out = []
        for f in files:
            final, part = os.path.join(d, f["name"]), os.path.join(d, f["name"] + ".part")
            if os.path.isfile(final) and os.path.getsize(final) == f["size"]:
                have = f["size"]
            elif os.path.isfile(part):
                have = min(os.path.getsize(part), f["size"])
            else:
                have = 0
            out.append({"name": f["name"], "have": have})
        return {"complete": False, "files": out}

    def _declared(self, sha: str) -> list[dict] | None:
        return _read_files(os.path.join(self.model_dir(sha), UPLOAD))

    def _declared_file(self, sha: str, name: str) -> dict:
        name = check_name(name, "file name")
        for f in self._declared(sha) or []:
            if f["name"] == name:
                return f
        raise RequestError(f"model {sha[:12]}: {name!r} is not a file of an upload begun (ask model_status first)")

    def complete(self, sha: str, files: list[dict] | None = None) -> bool:
        have = _read_files(os.path.join(self.model_dir(sha), MANIFEST))
        if have is None:
            return False
        if files is None:
            return True
        return {(f["name"], f["sha256"]) for f in files} <= {(f["name"], f["sha256"]) for f in have}

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
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.lseek(fd, offset, os.SEEK_SET)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.ftruncate(fd, offset + len(data))
        finally:
            os.close(fd)
        return offset + len(data)

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

    def model_path(self, sha: str) -> str:
        """The model's main file, for a request that runs it; its last use is now (eviction keeps recent ones)."""
        sha = check_sha(sha)
        manifest = os.path.join(self.model_dir(sha), MANIFEST)
        files = _read_files(manifest)
        if not files:
            raise RequestError(f"model {sha[:12]}: not on this board (upload it first)", "no-model")
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

    def _make_room(self, need: int, keep: set[str]) -> None:
        """Evict the models used longest ago (and abandoned uploads) until `need` more bytes fit; never one in
        `keep` (the one being uploaded, those queued or running). Stray files in models/ are removed first."""
        models = self.path("models")
        while self.store_bytes() + need > self.max_store:
            victims = []
            for entry in os.scandir(models):
                if entry.name in keep:
                    continue
                if not entry.is_dir(follow_symlinks=False):
                    victims.append((0.0, entry.path))
                    continue
                m = os.path.join(entry.path, MANIFEST)
                try:
                    victims.append((os.path.getmtime(m if os.path.exists(m) else entry.path), entry.path))
                except OSError:
                    continue
            if not victims:
                return
            path = min(victims)[1]
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            if os.path.lexists(path):  # could not be removed: stop rather than spin
                return

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
