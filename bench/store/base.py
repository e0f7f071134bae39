"""What every store is, whichever database holds it: the schema and its MIGRATIONS, a stored Run, and RunStore, the
interface with everything that is the same on SQLite and PostgreSQL (add_run, run, runs, baselines).

A backend (sqlite.py, postgres.py) opens its database, keeps the schema version its own way and takes it forward
with the same MIGRATIONS, and gives three things: a transaction (`_transaction(serial)`), the insert of one run
(`_insert_run`), and `db`, a connection whose `execute(sql, params)` takes `?` placeholders on both (the SQL here is
written once). Never: import a backend here, or open a connection.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from edge_runtime import results
from edge_runtime.errors import UserError

SCHEMA_VERSION = 2
# One run written at a time in this process: a campaign fanned out over a farm's places keeps each place's result from
# that place's worker thread (a store's connection is one; SQLite's is opened for use from any thread).
_WRITING = threading.Lock()
MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            created_at REAL NOT NULL,
            campaign TEXT,
            target TEXT NOT NULL,
            target_url TEXT,
            scenario TEXT NOT NULL,
            model_name TEXT,
            model_sha256 TEXT,
            repetition INTEGER NOT NULL DEFAULT 0,
            request_id TEXT UNIQUE,
            board TEXT,
            result TEXT NOT NULL,
            environment TEXT,
            hdr TEXT,
            timeline TEXT
        )""",
        "CREATE INDEX runs_model ON runs (model_sha256)",
        """CREATE TABLE baselines (
            name TEXT PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs (id),
            created_at REAL NOT NULL
        )""",
    ],
    # 2: the verdict a run was given when it ran (its SLOs and the checks, the run rules), so a report of stored
    # runs shows them; runs kept before have none (NULL: "not checked", never "passed").
    2: ["ALTER TABLE runs ADD COLUMN verdict TEXT"],
}
_COLUMNS = (
    "id, created_at, campaign, target, target_url, scenario, model_name, model_sha256, repetition, request_id, "
    "board, result, environment, hdr, timeline, verdict"
)
# The columns add_run writes (all but id), in the order of its row.
INSERTED = _COLUMNS.removeprefix("id, ")


@dataclass(frozen=True)
class Run:
    id: int
    created_at: float
    campaign: str | None
    target: str
    target_url: str | None
    scenario: str
    model_name: str | None
    model_sha256: str | None
    repetition: int
    request_id: str | None
    board: str | None
    result: dict
    environment: dict | None
    hdr: str | None
    timeline: list | None
    verdict: dict | None = None  # {"slo": bench.slo.evaluate(...) or None, "rules": bench.slo.run_rules(...) or None}
    # `result` read through edge_runtime.results (the store reads every run so); `result` stays the stored dict.
    record: results.BenchResult | None = field(default=None, repr=False, compare=False)

    def summary(self) -> dict:
        lat = self.result.get("latency_us") or {}
        return {
            "id": self.id,
            "campaign": self.campaign,
            "target": self.target,
            "scenario": self.scenario,
            "model": self.model_name,
            "repetition": self.repetition,
            "p50_us": lat.get("p50"),
            "p99_us": lat.get("p99"),
            "count": lat.get("count"),
        }


def check_version(where: str, version: int) -> None:
    """A store written by a newer edge-bench is refused, on either database."""
    if version > SCHEMA_VERSION:
        raise UserError(
            f"{where}: written by a newer edge-bench (store schema {version}; this one reads up to {SCHEMA_VERSION})",
            hint="upgrade edge-bench",
        )


class RunStore:
    """The store's interface. `path` is what names it in every message: the file, or the URL without its password."""

    path: str
    db: Any  # execute(sql with ? placeholders, params) -> a cursor (fetchone, fetchall, iteration)

    # ------------------------------------------------------------------------------------------ what a backend gives
    def _transaction(self, serial: bool = False) -> AbstractContextManager:
        """One transaction: committed on leaving, rolled back on an exception. `serial`: also one writer at a time
        (what reads a row and then writes it by what it read: the baselines, the migrations)."""
        raise NotImplementedError

    def _insert_run(self, row: tuple, request_id: str | None) -> int:
        """Within a transaction: insert `row` (the INSERTED columns) and give its id; the run already kept under
        `request_id` gives that run's id, and nothing is inserted."""
        raise NotImplementedError

    def _atomically(self, work, *, repeatable: bool = True):
        """`work()` in one transaction, its value; a backend whose connection can be lost does it again on a new
        one (`repeatable`: also when the loss came at COMMIT, which may have kept it)."""
        with self._transaction():
            return work()

    @property
    def schema_version(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------------ runs
    def add_run(
        self,
        result: Mapping[str, Any] | results.BenchResult,
        *,
        target: str,
        scenario: str = "single-stream",
        campaign: str | None = None,
        target_url: str | None = None,
        model_name: str | None = None,
        repetition: int = 0,
        request_id: str | None = None,
        verdict: dict | None = None,
    ) -> int:
        """Keep one run, with the verdict it was given (`{"slo": ..., "rules": ...}`, bench.slo), in one transaction;
        its id. The same request id twice (a result delivered again) gives the first run's id. What is written is read
        back through edge_runtime.results first: a record this version cannot read is refused, and nothing is kept."""
        if isinstance(result, results.BenchResult):
            result = result.to_dict()
        text = _dumps(result)  # NaN and Infinity as null, numpy scalars as numbers: what the store will hold
        results.load(json.loads(text), where=f"the result to store in {self.path}")
        model = result.get("model") or {}
        env = result.get("environment") or None
        timeline = (result.get("thermal") or {}).get("timeline")
        row = (
            time.time(),
            campaign,
            target,
            target_url,
            scenario,
            model_name or os.path.basename(str(model.get("path") or "")) or None,
            model.get("sha256"),
            repetition,
            request_id,
            (env or {}).get("board"),
            text,
            _dumps(env) if env is not None else None,
            encode_histogram(result.get("histogram_us") or []),
            _dumps(timeline) if timeline is not None else None,
            _dumps(verdict) if verdict is not None else None,
        )
        with _WRITING:  # a campaign's places finish at once, each in its own thread
            # a request id makes the insert safe to do again: a run kept before the loss is found, not kept twice
            return self._atomically(lambda: self._insert_run(row, request_id), repeatable=request_id is not None)

    def run(self, ref: str | int) -> Run:
        """A run by id (`17`) or by baseline name (`baseline:NAME` or a name that is not a number)."""
        text = str(ref)
        if text.isdigit():
            found = None
            if int(text) < 2**31:  # past any id (PostgreSQL's are 32-bit): no such run, not a database error
                found = self.db.execute(f"SELECT {_COLUMNS} FROM runs WHERE id = ?", (int(text),)).fetchone()
            if found is None:
                raise UserError(f"run {text}: no such run in {self.path}", hint="edge-bench report lists them")
            return _run(found, self.path)
        return self.baseline(text.removeprefix("baseline:"))

    def runs(self, limit: int | None = None) -> list[Run]:
        """The latest runs first (all of them without `limit`), each read as `run()` reads one."""
        q = f"SELECT {_COLUMNS} FROM runs ORDER BY id DESC" + (" LIMIT ?" if limit else "")
        return [_run(r, self.path) for r in self.db.execute(q, (limit,) if limit else ()).fetchall()]

    # ------------------------------------------------------------------------------------------------ baselines
    def set_baseline(self, name: str, run_ref: str | int, *, replace: bool = False) -> tuple[Run, int | None]:
        """Name run `run_ref` as baseline `name`; (the run, the run the name held before or None). A name that holds
        another run is refused, naming that run, unless `replace` (issue 25: a baseline was silently overwritten,
        and every later compare against it changed meaning)."""
        if not name or not all(c.isalnum() or c in "._-" for c in name) or name.isdigit() or len(name) > 64:
            raise UserError(f"baseline name {name!r}: letters, digits, . _ - (not a number: runs are numbers)")
        run = self.run(run_ref)
        with self._transaction(serial=True):  # read and written by one writer: two setters cannot both see it free
            row = self.db.execute("SELECT run_id FROM baselines WHERE name = ?", (name,)).fetchone()
            before = int(row[0]) if row else None
            if before is not None and before != run.id and not replace:
                held = self.run(before)
                raise UserError(f"baseline {name} is run {before} ({held.target}, {held.model_name}, {held.scenario}): "
                                f"not replaced by run {run.id}", hint=f"--replace to make it run {run.id}")  # fmt: skip
            self.db.execute(
                "INSERT INTO baselines (name, run_id, created_at) VALUES (?, ?, ?) "
                "ON CONFLICT(name) DO UPDATE SET run_id = excluded.run_id, created_at = excluded.created_at",
                (name, run.id, time.time()),
            )
        return run, before

    def baselines(self) -> list[dict]:
        rows = self.db.execute("SELECT name, run_id, created_at FROM baselines ORDER BY name").fetchall()
        return [{"name": n, "run": r, "created_at": t} for n, r, t in rows]

    def baseline(self, name: str) -> Run:
        row = self.db.execute("SELECT run_id FROM baselines WHERE name = ?", (name,)).fetchone()
        if row is None:
            known = ", ".join(b["name"] for b in self.baselines()) or "none yet"
            raise UserError(f"baseline {name!r}: no such baseline in {self.path} (there are: {known})")
        return self.run(int(row[0]))


def _run(row, path: str) -> Run:
    """A stored run, its record read through edge_runtime.results: a schema this version does not read (unknown, or a
    newer major version) or a value of the wrong kind is one line naming the run and the store."""
    (rid, created, campaign, target, url, scenario, name, sha, rep, req, board, result, env, hdr, timeline) = row[:15]
    verdict, where = row[15], f"run {rid} in {path}"
    doc = _loads(result, where)
    return Run(rid, created, campaign, target, url, scenario, name, sha, rep, req, board, doc,
               json.loads(env) if env else None, hdr, json.loads(timeline) if timeline else None,
               json.loads(verdict) if verdict else None, record=results.load(doc, where=where))  # fmt: skip


def _loads(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as err:  # written into the file by other means
        raise UserError(f"{where}: its result is not JSON ({' '.join(str(err).split())[:120]})") from None


def _dumps(doc: Any) -> str:
    from edge_runtime.files.outputs import dumps

    return dumps(doc)


def encode_histogram(histogram_us: list) -> str | None:
    """The run's latency distribution as an HdrHistogram (1 us to 1 h, 3 significant digits), base64-encoded as
    HdrHistogram's own tools read it; None without the hdr extra or without a histogram."""
    if not histogram_us:
        return None
    try:
        from hdrh.histogram import HdrHistogram
    except ImportError:
        return None
    h = HdrHistogram(1, 3_600_000_000, 3)
    for us, count in histogram_us:
        h.record_value(max(1, int(us)), int(count))
    return h.encode().decode("ascii")
