"""The results store: every run kept with what explains it, and the baselines, in one SQLite file (the embedded
default, sqlite.py) or in a PostgreSQL database a farm shares (postgres.py), behind one interface (base.RunStore).

A run is one result record (`edge-runtime/bench/1`, a board's or a host's) with where it came from: campaign,
target, scenario, model (name and sha256), repetition, the host's request id (a result delivered twice is stored once,
and two hosts delivering at once store it once), the environment snapshot, the latency histogram (HdrHistogram,
encoded, when the hdr extra is installed), the thermal timeline and the verdict it was given (SLO checks, run rules).
Each run is written in one transaction: a process killed mid-write leaves the store as it was. The schema is the same
on both, with the same MIGRATIONS: a store is taken forward when it is opened, a newer one is refused.
Records go in and come out through `edge_runtime.results`, the reader the board's own files go through: a record of
an unknown schema or a newer major version is refused when it is stored, and when it is read (one written into the
store by other means), in one line naming the run and the store.

Which store `--store` names: `postgresql://...` or `postgres://...` (any case) is PostgreSQL; another `SCHEME://` is
refused (a typo of the scheme would otherwise become a file name), and so is a database's scheme with its `//`
missing (`postgresql:USER:PW@HOST/DB`, `sqlite:x`), which would write a file named after the URL, password and all;
everything else is an SQLite file's path.
Never: show a store URL's password (`path` is the URL without it).
"""

from __future__ import annotations

import os
import re

from bench.store.base import MIGRATIONS, SCHEMA_VERSION, Run, RunStore, encode_histogram
from bench.store.postgres import is_url, redact
from bench.store.sqlite import SQLiteStore
from edge_runtime.errors import UserError

__all__ = ["DEFAULT_STORE", "ENV", "MIGRATIONS", "SCHEMA_VERSION", "Run", "RunStore", "SQLiteStore", "Store",
           "default_path", "encode_histogram", "is_url", "names_url"]  # fmt: skip

DEFAULT_STORE = "edge-bench.sqlite"
ENV = "EDGE_BENCH_STORE"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# A database's scheme without its `//`: never a file's name (any case: `PostgreSQL:...`).
_NO_SLASHES = re.compile(r"^(postgres|postgresql|sqlite|mysql|mariadb):(?!//)", re.IGNORECASE)


def default_path() -> str:
    return os.environ.get(ENV) or DEFAULT_STORE


def names_url(where: str | os.PathLike[str]) -> bool:
    """`SCHEME://...` (or a database's scheme without `//`): a URL (a store's, or refused by Store), never a file to
    look for."""
    return bool(_SCHEME.match(os.fspath(where)) or _NO_SLASHES.match(os.fspath(where)))


def Store(where: str | os.PathLike[str], *, create: bool = True) -> RunStore:  # named as the class it was
    """The store `where` names, opened (and made, or taken forward to this schema): a PostgreSQL URL or an SQLite
    file. Not `create`: a PostgreSQL database without a store is "no such store" (the CLI checks a file itself)."""
    text = os.fspath(where)
    missing = _NO_SLASHES.match(text)
    if missing:  # nothing after the scheme is shown: it may hold a password
        scheme = missing.group(1).lower()
        meant = "did you mean postgresql://...?" if scheme.startswith("postgres") else "an SQLite store is a file path"
        raise UserError(f"--store '{missing.group(0)}...': not a store URL ({scheme}: without //)", hint=meant)
    if is_url(text):
        from bench.store.postgres import PostgresStore

        return PostgresStore(text, create=create)
    if names_url(text):
        raise UserError(f"--store {redact(text)!r}: not a store this edge-bench opens (postgresql://... or a file)")
    return SQLiteStore(text)
