"""A farm's shared store: PostgreSQL (psycopg 3, the `farm` extra), the same schema and MIGRATIONS as SQLite's.

- The URL: `postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAM=VALUE...]` (or `postgres://`), as libpq reads it;
  the password is better left to `PGPASSWORD` or `~/.pgpass` (a command line is visible to `ps`). The password is
  never shown: `path`, every message and every error name the URL without it (`redact`, which splits the URL where
  libpq does: the user part ends at the first `@` before any `/`, so `#`, `?` and `:` are the password's), and a
  message from the server or the driver has it replaced by `***` before it is said (`scrub`); a password holding an
  unencoded `@` or `/` (which libpq would split into a host) is refused unsaid; nothing writes the URL into the store.
- The schema version: a one-row table `edge_bench_schema` (`PRAGMA user_version` is SQLite's). MIGRATIONS are
  SQLite's text, translated (`ddl`): `INTEGER PRIMARY KEY` becomes an identity column (BY DEFAULT, so runs copied
  with their ids keep them), `REAL` double precision, `TEXT` stays (a result stays the text SQLite keeps, not jsonb:
  what is read back is what was written). A migration is one transaction (PostgreSQL's DDL is transactional), taken
  under an advisory lock with the version read again there: two hosts creating one store at once, the second finds
  it made. Whatever the command, the first newer edge-bench to open a store takes it forward.
- Writes: each run one transaction (a client killed mid-write leaves nothing: the server rolls it back). The
  request id is the key under concurrency: `INSERT ... ON CONFLICT (request_id) DO NOTHING RETURNING id`, and
  when nothing came back the id of the run already kept (the unique index makes a second inserter wait for the
  first to commit; READ COMMITTED's next statement then sees its row). A baseline is set under the advisory lock.
  PostgreSQL's text holds no NUL: a NUL in a text field (a campaign's name) is stored as U+FFFD, on writing and on
  looking up alike (JSON columns keep it, as `\\u0000`).
- A connection lost (a server restarted, a failover, an idle session ended) is made again, for up to RECONNECT_S,
  and the statement or the whole transaction it was in is done again (a run's request id makes its insert safe to
  repeat: a commit that got through before the loss gives the run kept).
- Bounds: connect_timeout (10 s unless the URL says), TCP keepalives (an idle link to a server gone is found in
  about 25 s, not the kernel's two hours), tcp_user_timeout (data unacknowledged for 30 s ends the link),
  lock_timeout LOCK_WAIT_S on every wait for a lock, and a watchdog on every statement: a server that does not
  answer in `bound_s` (ANSWER_S past the longest wait the server may take: the lock wait, or the URL's own
  `options=-c lock_timeout=...` / `statement_timeout`) has the connection's socket shut, and the blocked call ends
  in one line ("did not answer in N s"), rather than a hang until the server wakes.
Never: import psycopg at module level (`import bench.store` stays light), or show a password.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from contextlib import contextmanager
from urllib.parse import parse_qsl, unquote

from bench.store.base import INSERTED, MIGRATIONS, SCHEMA_VERSION, RunStore, check_version
from edge_runtime.errors import UserError

SCHEMES = ("postgresql://", "postgres://")
VERSION_TABLE = "edge_bench_schema"
# pg_advisory_xact_lock's key for edge-bench's serial writes (migrations, baselines): "edgebenc" as a bigint.
LOCK_KEY = int.from_bytes(b"edgebenc", "big")
# What libpq would otherwise leave unbounded; a URL's own value wins.
BOUNDS = {"connect_timeout": "10", "keepalives_idle": "10", "keepalives_interval": "5", "keepalives_count": "3",
          "tcp_user_timeout": "30000"}  # fmt: skip
LOCK_WAIT_S = 60.0  # lock_timeout: the longest a statement waits for a lock
ANSWER_S = 15.0  # a statement's answer, past the longest wait the server may take (the watchdog's margin)
RECONNECT_S = 30.0  # how long a lost connection is tried again before the store gives up, in one line
_PORTS = re.compile(r"[0-9]*")


def is_url(where: object) -> bool:
    return str(where).lower().startswith(SCHEMES)


def split_url(url: str) -> tuple[str, str | None, str | None, str]:
    """(scheme, user, password, the rest) as libpq splits a URL (conninfo_uri_parse_options): the user part ends at
    the first `@` met before any `/`, the user at its first `:`; None where there is none. Everything as typed."""
    scheme, _, rest = url.partition("://")
    end = re.search(r"[@/]", rest)
    if end is None or end.group() == "/":
        return scheme, None, None, rest
    user, colon, password = rest[: end.start()].partition(":")
    return scheme, user, password if colon else None, rest[end.end() :]


def misread(url: str) -> bool:
    """Whether libpq would take part of a password for the host: one holding an unencoded `@` (after the user part,
    an `@` before the path) or `/` (a `user:pass/word@host`, which libpq reads as host `user`, port `pass`)."""
    _, user, _, rest = split_url(url)
    host = re.split(r"[/?]", rest, maxsplit=1)[0]
    if user is not None:
        return "@" in host
    head, slash, tail = rest.partition("/")
    port = head.rsplit("]", 1)[-1].rpartition(":")[2] if ":" in head.rsplit("]", 1)[-1] else ""
    return bool(slash) and "@" in tail and not _PORTS.fullmatch(port.split(",")[0])


def redact(url: str) -> str:
    """The URL as it is shown: as typed, without the password of its user part or of a `password=` parameter."""
    if misread(url):
        return url.partition("://")[0] + "://(a URL whose password holds an unencoded @ or /)"
    scheme, user, _, rest = split_url(url)
    where, mark, query = rest.partition("?")
    query = "&".join(p for p in query.split("&") if p and unquote(p.split("=", 1)[0]).lower() != "password")
    return f"{scheme}://{'' if user is None else user + '@'}{where}{mark if query else ''}{query}"


def secrets_of(url: str) -> list[str]:
    """Every form the URL's password takes (as typed and percent-decoded), longest first."""
    _, _, password, rest = split_url(url)
    found = {password} if password else set()
    query = rest.partition("?")[2]
    found |= {v for k, v in parse_qsl(query, keep_blank_values=True) if k.lower() == "password"}
    found |= {p.split("=", 1)[1] for p in query.split("&") if unquote(p.split("=", 1)[0]).lower() == "password"
              and "=" in p}  # fmt: skip
    found |= {unquote(s) for s in found}
    return sorted((s for s in found if s), key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """`text` (a server's or the driver's message) in one line, the URL's password replaced by ***."""
    for secret in secrets_of(url):
        text = text.replace(secret, "***")
    return " ".join(text.split())[:300]


def ddl(sql: str) -> str:
    """A migration's SQLite statement as PostgreSQL's."""
    sql = re.sub(r"\bINTEGER PRIMARY KEY\b", "INTEGER GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", sql)
    return re.sub(r"\bREAL\b", "DOUBLE PRECISION", sql)


def waits_s(options: str) -> float:
    """The longest wait the server may take on a statement: LOCK_WAIT_S, or what the URL's `options` set longer
    (`-c lock_timeout=2min`, `-c statement_timeout=90000`; PostgreSQL's units, milliseconds without one)."""
    units = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "": 1e-3}
    longest = LOCK_WAIT_S
    for value, unit in re.findall(r"(?:lock|statement)_timeout\s*=\s*'?([0-9.]+)\s*(us|ms|s|min|h|d|)\b", options):
        longest = max(longest, float(value) * units[unit])
    return longest


class _Lost(UserError):
    """The connection was lost inside a transaction: the transaction is done again on a new one (`_retrying`)."""

    def __init__(self, message: str, said: str, committing: bool):
        super().__init__(message)
        self.said, self.committing = said, committing  # lost at COMMIT: it may have been kept


class _Db:
    """The connection as the shared SQL uses it: sqlite3's `?` placeholders, psycopg's `%s` underneath; each statement
    under the watchdog; a NUL in a text parameter as U+FFFD (PostgreSQL's text holds none); an error of the server
    or the driver as one line naming the store; a connection lost outside a transaction made again and the statement
    done again."""

    def __init__(self, store: PostgresStore):
        self.store = store

    def execute(self, sql: str, params=()):
        from psycopg import Error

        store = self.store
        try:
            return self._execute(sql, params)
        except Error as err:
            if not store.broken(err) or store.in_transaction:
                raise store.failed(err, committing=sql == "COMMIT") from None
            store.reconnect(err)
        try:
            return self._execute(sql, params)
        except Error as err:
            raise store.failed(err) from None

    def _execute(self, sql: str, params):
        params = tuple(p.replace("\x00", "\ufffd") if isinstance(p, str) else p for p in params)
        with self.store.watchdog():
            if not params:  # no parameters: psycopg sends the text as it is (no % to escape)
                return self.store.conn.execute(sql)
            return self.store.conn.execute(sql.replace("%", "%%").replace("?", "%s"), params)


class PostgresStore(RunStore):
    """`PostgresStore(url)` connects, and makes the store in that database when it has none (unless not `create`:
    then a database without one is "no such store"); a database that is not reachable, one that holds other tables
    named as ours, or a store written by a newer edge-bench, is a one-line error."""

    def __init__(self, url: str, *, create: bool = True):
        scheme, _, rest = url.partition("://")
        url = f"{scheme.lower()}://{rest}"  # libpq reads the scheme in lower case only
        self.path, self._url, self.conn = redact(url), url, None
        self._where = where = f"--store {self.path!r}"
        if misread(url):
            raise UserError(f"{where}: its password holds an unencoded @ or / (libpq would read part of it as the "
                            "host)", hint="percent-encode them in the URL: @ as %40, / as %2F")  # fmt: skip
        try:
            import psycopg
        except ImportError:
            raise UserError(f"{where}: a PostgreSQL store needs psycopg 3",
                            hint="pip install 'edge-runtime[farm]'") from None  # fmt: skip
        try:
            self.info = info = psycopg.conninfo.conninfo_to_dict(url)
        except psycopg.Error as err:
            raise UserError(f"{where}: not a PostgreSQL URL ({scrub(str(err), url)})") from None
        self.database = str(info.get("dbname") or info.get("user") or "(the user's)")
        self.bound_s = waits_s(str(info.get("options") or "")) + ANSWER_S
        self.in_transaction, self._fired, self.db = False, False, _Db(self)
        host = info.get("host") or info.get("hostaddr") or "the local socket"
        at = f"{host}:{info.get('port') or 5432}" if not str(host).startswith("/") else str(host)
        try:
            self.conn = self._connect()
        except psycopg.Error as err:
            raise UserError(f"{where}: cannot connect to PostgreSQL at {at}, database {self.database!r}: "
                            f"{scrub(str(err), url)}") from None  # fmt: skip
        try:
            self._open(where, create)
        except BaseException:
            self.conn.close()
            raise

    def _connect(self):
        import psycopg

        conn = psycopg.connect(self._url, autocommit=True, application_name="edge-bench",
                               **{k: v for k, v in BOUNDS.items() if k not in self.info})  # fmt: skip
        try:
            if "lock_timeout" not in str(self.info.get("options") or ""):  # the URL's own wins
                with self.watchdog(conn):
                    conn.execute(f"SET lock_timeout = '{int(LOCK_WAIT_S * 1000)}ms'")
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def watchdog(self, conn=None):
        """Within: a statement on `conn` (the store's) that gets no answer in `bound_s` has its socket shut down, so
        the call blocked on it fails (`failed` then says the server did not answer)."""
        from psycopg import Error

        conn = conn or self.conn

        def cut() -> None:
            self._fired = True
            try:
                with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:  # a duplicate: conn's own stays
                    sock.shutdown(socket.SHUT_RDWR)
            except (OSError, Error):  # closed meanwhile: nothing is blocked on it
                pass

        self._fired = False
        timer = threading.Timer(self.bound_s, cut)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def broken(self, err: Exception) -> bool:
        """Whether `err` lost the connection (made again, then) rather than said something about the statement."""
        return not self._fired and (self.conn.broken or self.conn.closed)

    def failed(self, err: Exception, committing: bool = False) -> UserError:
        """`err` as one line naming the store: a server that did not answer, a connection lost (`_Lost`), or what
        the server or the driver said, with a hint where one helps."""
        said = scrub(str(err), self._url)
        if self._fired:
            return UserError(f"{self._where}: the server did not answer in {self.bound_s:g} s (connection closed)",
                             hint="a stopped server or a link that drops all: see the server's log")  # fmt: skip
        if self.conn.broken or self.conn.closed:
            return _Lost(f"{self._where}: the connection failed ({said})", said, committing)
        return UserError(f"{self._where}: {said}", hint=self._hint(getattr(err, "sqlstate", None)))

    def _hint(self, state: str | None) -> str | None:
        user = self.info.get("user") or "USER"
        if state == "3F000":  # invalid_schema_name: options=-csearch_path=NAME names a schema that is not there
            schema = re.search(r"search_path\s*=\s*'?([\w$]+)", str(self.info.get("options") or ""))
            return f"make the schema first: CREATE SCHEMA {schema.group(1) if schema else 'NAME'} AUTHORIZATION {user}"
        if state == "42501":  # insufficient_privilege: PostgreSQL 15 lets only the owner create in schema public
            return (f"make {user} the database's owner: ALTER DATABASE {self.database} OWNER TO {user} "
                    f"(or GRANT CREATE ON SCHEMA public TO {user})")  # fmt: skip
        return None

    def reconnect(self, err: Exception, said: str | None = None) -> None:
        """A new connection for the one `err` lost, tried for up to RECONNECT_S (a server restarting), else one line."""
        import psycopg

        said = said or scrub(str(err), self._url)
        deadline, pause = time.monotonic() + RECONNECT_S, 0.5
        self.conn.close()
        while True:
            try:
                self.conn = self._connect()
                return
            except psycopg.Error as again:
                last = again
            if time.monotonic() + pause > deadline:
                again = scrub(str(last), self._url)
                raise UserError(f"{self._where}: the connection was lost ({said}) and could not be made again in "
                                f"{RECONNECT_S:g} s ({again})") from None  # fmt: skip
            time.sleep(pause)
            pause = min(pause * 2, 5.0)

    @property
    def schema_version(self) -> int:
        if self.db.execute("SELECT to_regclass(?)", (VERSION_TABLE,)).fetchone()[0] is None:
            return 0
        return int(self.db.execute(f"SELECT coalesce(max(version), 0) FROM {VERSION_TABLE}").fetchone()[0])

    def _open(self, where: str, create: bool) -> None:
        version = self.schema_version
        check_version(where, version)
        if version == SCHEMA_VERSION:
            return
        if version == 0 and not create:  # report, compare, baseline: never a store made by reading one
            raise UserError(f"{where}: no such store (database {self.database!r} holds no edge-bench store)",
                            hint="edge-bench run makes one there")  # fmt: skip
        with self._transaction(serial=True):  # read again under the lock: another host may have made it meanwhile
            self.db.execute(f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (version INTEGER NOT NULL)")
            version = self.schema_version
            check_version(where, version)
            theirs = [t for t in ("runs", "baselines")
                      if self.db.execute("SELECT to_regclass(?)", (t,)).fetchone()[0] is not None]  # fmt: skip
            if version == 0 and theirs:
                raise UserError(
                    f"{where}: database {self.database!r} has a table {theirs[0]} that is not an edge-bench store's",
                    hint="name another database, or a schema (options=-csearch_path)",
                )
            for v in range(version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[v]:
                    self.db.execute(ddl(statement))
            self.db.execute(f"DELETE FROM {VERSION_TABLE}")
            self.db.execute(f"INSERT INTO {VERSION_TABLE} (version) VALUES (?)", (SCHEMA_VERSION,))

    @contextmanager
    def _transaction(self, serial: bool = False):
        """BEGIN and COMMIT as statements (each under the watchdog); a connection lost within is `_Lost`."""
        from psycopg import Error

        self.db.execute("BEGIN")  # outside a transaction yet: a connection lost here is made again
        self.in_transaction = True
        try:
            if serial:
                self.db.execute("SELECT pg_advisory_xact_lock(?)", (LOCK_KEY,))
            yield
            self.db.execute("COMMIT")
        except BaseException:
            if not (self._fired or self.conn.broken or self.conn.closed):
                try:
                    with self.watchdog():
                        self.conn.execute("ROLLBACK")
                except Error:
                    pass  # the connection went with it: the server rolls the transaction back itself
            raise
        finally:
            self.in_transaction = False

    def _atomically(self, work, *, repeatable: bool = True):
        """`work()` in one transaction, done again on a new connection when the connection was lost (up to 3 times;
        not `repeatable`: not when the loss came at COMMIT, which may have kept it)."""
        for attempt in range(3):
            try:
                with self._transaction():
                    return work()
            except _Lost as lost:
                if attempt == 2 or (lost.committing and not repeatable):
                    raise
                self.reconnect(lost, lost.said)

    def _insert_run(self, row: tuple, request_id: str | None) -> int:
        marks = ", ".join("?" * len(row))
        got = self.db.execute(f"INSERT INTO runs ({INSERTED}) VALUES ({marks}) ON CONFLICT (request_id) DO NOTHING "
                              "RETURNING id", row).fetchone()  # fmt: skip
        if got is not None:
            return int(got[0])
        # Delivered before (this run waited on the unique index until that one committed): the run already kept.
        return int(self.db.execute("SELECT id FROM runs WHERE request_id = ?", (request_id,)).fetchone()[0])

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
