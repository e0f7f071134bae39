"""The agent's model store (STATE/models, laid out in state.py): models uploaded by hash, their files checked one by one
and together, resumed from what is held; one model declared under other names (aliases) is the same bytes, held once.
What a request may name is checked here (check_name, check_sha), and every file is written whole or not at all
(write_atomic). Room for an upload (--max-store, the disk's free space) is made by room.py before a byte is sent.

Never: write a file an upload did not declare, or past its declared size; keep a file whose bytes do not hash to
what was declared.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil

from edge_runtime.agent.room import MANIFEST, NO_SPACE, SHA256, UPLOAD, StoreRoom, _names, _read_files
from edge_runtime.errors import RequestError
from edge_runtime.files.outputs import dumps
from edge_runtime.runtime.model import file_sha256, sha256_of_files

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
RESERVED = {MANIFEST, UPLOAD, "lock"}
ALIASES_KEPT = 16  # other names a model's files were declared under, remembered in its model.json


def check_name(name: object, what: str = "name") -> str:
    """A file name a request gives: one path component of safe characters, never '..', '/', a hidden file or a name
    the agent keeps for itself."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or name.endswith((".part", ".tmp")) or ".." in name:
        raise RequestError(f"{what} {str(name)[:80]!r}: not a plain file name (letters, digits, . _ + -)", "bad-path")
    if name.lower() in RESERVED:
        raise RequestError(f"{what} {name!r}: a name the agent keeps for itself", "bad-path")
    return name


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


class ModelStore(StoreRoom):
    """The uploads half of the model store, a mixin of StateDir (state.py), which gives it `root`, `max_store`,
    `in_use`, `path()` and `_say()`."""

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
            got_sha = file_sha256(part, what="upload")
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
            whole = sha256_of_files(os.path.join(d, x["name"]) for x in files)  # in order, as ModelFile.sha256
            if whole != sha:
                shutil.rmtree(d, ignore_errors=True)
                raise RequestError(
                    f"model {sha[:12]}: its files together hash to {whole[:12]}: discarded", "hash-mismatch"
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
