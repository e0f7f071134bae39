"""Room in the agent's model store (STATE/models, laid out in state.py): its bytes against --max-store and against the
free space of the disk the state dir is on (a board's small or shared disk fills before the bound). Room is made by
evicting what was used longest ago (strays first, then models and unfinished uploads), never a model in use, and
nothing is evicted when even evicting all the others would not make the room. Also: removing a file or a folder with
a line for the log (what it held), and finding what a stopped upload left behind (_leftovers, for StateDir.sweep).

Never: evict a model in use or the one being uploaded, or evict anything for room that still would not be made.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil

from edge_runtime.errors import RequestError

SHA256 = re.compile(r"[0-9a-f]{64}")
MANIFEST = "model.json"  # written by the agent when every file of a model is here and checked
UPLOAD = "upload.json"  # the files an upload declared (names, sizes, hashes): chunks write only these
DEFAULT_MAX_STORE = 2 << 30
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


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


def _names(files: list[dict]) -> list[str]:
    return [f["name"] for f in files]


class StoreRoom:
    """The room half of the model store, a mixin of StateDir (state.py), which gives it `root`, `max_store`, `in_use`,
    `path()` and `_say()`."""

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

    def _leftovers(self) -> list[str]:
        """What a stopped upload left in models/ that no upload can use, removed: a model folder with neither a
        model.json nor an upload.json (nothing could resume it), and files neither declares (a .part of a model
        already complete, a part of another upload). Returns what _remove said of each ('' when it could not be)."""
        gone = []
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
        return gone

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
