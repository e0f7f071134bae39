"""The agent's state directory: models uploaded by hash, the outbox of answers kept until the host acknowledges them,
and the requests that were running when the agent stopped. Everything the agent writes is below it, and nothing a
request names can lead out of it. This module holds the directory, its lock and the outbox; the model store is
models.py (uploads by hash, aliases) and room.py (--max-store, the disk's free space, eviction), mixed into StateDir.

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

Files are written to a temporary name, fsync'ed and renamed, so a kill at any moment leaves either the old or the new;
what a stopped writer left behind is swept when the lock is taken.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from edge_runtime.agent.models import ModelStore, write_atomic
from edge_runtime.agent.room import DEFAULT_MAX_STORE
from edge_runtime.errors import RequestError, UserError
from edge_runtime.files import locks
from edge_runtime.files.outputs import dumps

DONE_KEPT = 1000


@dataclass
class StateDir(ModelStore):
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
        use (room.py, _leftovers). Only with the lock held: another agent's temporaries are its own. Logged; returns
        the paths (relative to the state dir)."""
        gone = []
        for dirpath, _dirs, files in os.walk(self.root):
            gone += [self._remove(os.path.join(dirpath, f)) for f in files if f.endswith(".tmp")]
        gone = [g for g in gone + self._leftovers() if g]
        if gone:
            self._say(f"removed what a stopped writer left behind: {', '.join(gone)}")
        return gone

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
