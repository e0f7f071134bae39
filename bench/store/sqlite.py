"""The embedded store: one SQLite file in WAL mode, its schema versioned with `PRAGMA user_version`.

A process killed mid-write leaves the file as it was (each run is one transaction). Never: a URL here (the URL and
path dispatch is bench.store's), or a run read other than through RunStore.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time

from bench.store.base import INSERTED, MIGRATIONS, SCHEMA_VERSION, RunStore, check_version
from edge_runtime.errors import UserError


def _wal(db: sqlite3.Connection, within_s: float = 30.0) -> None:
    """WAL mode. Switching a new file to it takes a lock that SQLite's busy timeout does not wait for: copies opening
    one new store at once saw "database is locked" at once, so this waits for it, as long as the busy timeout."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class SQLiteStore(RunStore):
    """`SQLiteStore(path)` opens or creates the file; a file that is not SQLite, or one written by a newer edge-bench,
    is a one-line error."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = str(path)
        where = f"--store {self.path!r}"
        try:
            st = os.stat(self.path)
            if not stat.S_ISREG(st.st_mode):
                raise UserError(f"{where}: not a regular file")
        except FileNotFoundError:
            parent = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(parent):
                raise UserError(f"{where}: no directory {parent!r} to create it in") from None
        try:
            self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            _wal(self.db)
            self.db.execute("PRAGMA foreign_keys=ON")
            version = self.schema_version
        except sqlite3.DatabaseError as err:
            if "locked" in str(err):  # another process held it past the busy timeout: a store, but busy
                raise UserError(f"{where}: locked by another process for 30 s ({err})") from None
            raise UserError(f"{where}: not an edge-bench store ({err})") from None
        if version < SCHEMA_VERSION:
            self._migrate(where)  # checked there, under the write lock
        else:
            self._check(where, version)

    @property
    def schema_version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _check(self, where: str, version: int) -> None:
        check_version(where, version)
        if version == 0 and self._tables() - {"sqlite_sequence"}:
            raise UserError(f"{where}: an SQLite file, but not an edge-bench store (it has other tables)")

    def _tables(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def _migrate(self, where: str) -> None:
        """Under the write lock, from the version read again there: two edge-bench processes creating (or
        upgrading) one store at once each wait for the other, and the second finds the work done (it read version 0
        before the first committed: "table runs already exists" was its exit 3)."""
        with self._transaction():
            version = self.schema_version
            self._check(where, version)
            for v in range(version + 1, SCHEMA_VERSION + 1):
                for ddl in MIGRATIONS[v]:
                    self.db.execute(ddl)
                self.db.execute(f"PRAGMA user_version={v}")

    def _transaction(self, serial: bool = False):
        """BEGIN IMMEDIATE: SQLite has one writer at a time anyway, so every transaction here is `serial`."""
        db = self.db

        class _Tx:
            def __enter__(self):
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self, exc_type, *rest):
                db.execute("ROLLBACK" if exc_type else "COMMIT")
                return False

        return _Tx()

    def _atomically(self, work, *, repeatable: bool = True):
        """The base's one transaction; a write the file cannot take (a full disk, a file made read-only, I/O errors)
        is one line naming the store, and nothing of the run is kept (the transaction is rolled back)."""
        try:
            return super()._atomically(work, repeatable=repeatable)
        except sqlite3.DatabaseError as err:
            raise UserError(f"store {self.path!r}: the run could not be written ({' '.join(str(err).split())})",
                            hint="free space or name another store (--store)") from None  # fmt: skip

    def _insert_run(self, row: tuple, request_id: str | None) -> int:
        if request_id is not None:  # under the write lock: nobody else can insert it between the two statements
            found = self.db.execute("SELECT id FROM runs WHERE request_id = ?", (request_id,)).fetchone()
            if found:
                return int(found[0])
        marks = ", ".join("?" * len(row))
        return int(self.db.execute(f"INSERT INTO runs ({INSERTED}) VALUES ({marks})", row).lastrowid)

    def close(self) -> None:
        self.db.close()
