"""The PostgreSQL store when things go wrong (rev28's findings), on a real throwaway cluster (tests/pgkit.py): a server
restarted, down for seconds or for good, or stopped (SIGSTOP) under a statement; passwords holding the characters
that urlsplit and libpq read differently; a database scheme without its `//`; a NUL in a name; a schema or a right
missing. Each either keeps the run (once) or is one line naming the store, never the password."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from urllib.parse import quote

import pgkit
import pytest
from conftest import ROOT

from bench.store import Store
from bench.store import postgres as pgstore
from edge_runtime.errors import UserError

PLUGINS = ROOT / "tests" / "plugins"  # the echo target's entry point
RESULT = {"schema": "edge-runtime/bench/1"}


@pytest.fixture
def pg() -> pgkit.Cluster:
    return pgkit.cluster()  # skips, saying why, where PostgreSQL or psycopg is missing


def edge_bench(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(PLUGINS)])}
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300, env=env)  # fmt: skip


def test_a_restart_or_a_server_down_for_seconds_between_opening_and_writing_keeps_the_run_once(pg):
    url = pg.new_database("restart")
    with Store(url) as st:
        pg.restart()  # every session ended, as a restart or a failover ends them
        first = st.add_run(RESULT, target="t", request_id="r-1")
        down = threading.Thread(target=pg.restart, args=(3.0,))  # down for 3 s while the next run is written
        down.start()
        time.sleep(0.5)
        started = time.monotonic()
        second = st.add_run(RESULT, target="t", request_id="r-2")
        down.join()
        assert time.monotonic() - started >= 2.0  # it waited for the server, and went on
        pg.restart()
        assert st.add_run(RESULT, target="t", request_id="r-2") == second  # delivered again: the run kept
        assert sorted((r.id, r.request_id) for r in st.runs()) == [(first, "r-1"), (second, "r-2")]


def test_a_server_that_stays_down_is_one_line_after_the_bounded_retries(pg, monkeypatch):
    monkeypatch.setattr(pgstore, "RECONNECT_S", 2.0)
    st = Store(pg.new_database("gone"))
    pg._run("pg_ctl", "-D", pg.data, "-m", "fast", "-w", "stop")
    try:
        started = time.monotonic()
        with pytest.raises(UserError, match=r"^--store 'postgresql://postgres@[^']*': the connection was lost \(") as e:
            st.add_run(RESULT, target="t", request_id="g-1")
        assert time.monotonic() - started < 10
        assert "could not be made again in 2 s" in str(e.value) and pg.password not in str(e.value)
        assert "\n" not in str(e.value)
    finally:
        pg.start()
        st.close()


def test_a_campaign_goes_on_through_a_restart_and_keeps_every_run_once(pg, tmp_path):
    """rev28 #2: `pg_ctl restart` in the middle of a campaign lost the run in flight and stopped the campaign."""
    url = pg.new_database("camp")
    camp = tmp_path / "c.toml"
    camp.write_text(f"""
[campaign]
name = "through-restart"
repetitions = 60
[[target]]
name = "e1"
url = "echo://e1?latency_us=2000"
[[model]]
path = "{ROOT / "models" / "digits_cnn" / "digits_cnn_int8.onnx"}"
[[scenario]]
iterations = 40
""")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(PLUGINS)])}
    proc = subprocess.Popen([sys.executable, "-m", "bench.cli", "run", str(camp), "--store", url, "--json", "-"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    import psycopg

    deadline = time.monotonic() + 120
    while True:  # a few runs in: the server goes, and comes back a second later
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        with psycopg.connect(url, autocommit=True) as db:
            if db.execute("SELECT to_regclass('runs')").fetchone()[0] and db.execute(
                    "SELECT count(*) FROM runs").fetchone()[0] >= 3:  # fmt: skip
                break
        time.sleep(0.2)
    pg.restart(1.0)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and pg.password not in out + err, err
    with Store(url) as st:
        runs = st.runs()
    assert sorted(r.repetition for r in runs) == list(range(60)) and len({r.request_id for r in runs}) == 60
    assert len(json.loads(out)["runs"]) == 60


def test_a_server_stopped_under_a_statement_is_one_line_within_the_bound(pg, monkeypatch):
    """rev28 #3: a backend stopped (SIGSTOP) hung edge-bench until it was continued. The bound here: 1 s of lock wait
    and 1 s of answer."""
    monkeypatch.setattr(pgstore, "LOCK_WAIT_S", 1.0)
    monkeypatch.setattr(pgstore, "ANSWER_S", 1.0)
    url = pg.new_database("stop")
    st = Store(url)
    pid = st.conn.info.backend_pid
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(UserError, match=r"^--store '[^']*': the server did not answer in 2 s") as e:
            st.add_run(RESULT, target="t", request_id="s-1")
        assert 1.5 < time.monotonic() - started < 10
        assert "\n" not in str(e.value) and pg.password not in str(e.value)
    finally:
        os.kill(pid, signal.SIGCONT)
        st.close()
    with Store(url) as st:  # the server is whole; nothing half written
        assert st.add_run(RESULT, target="t", request_id="s-1") == 1 and len(st.runs()) == 1


def test_the_bound_is_longer_when_the_urls_own_options_let_the_server_wait_longer():
    assert pgstore.waits_s("") == pgstore.LOCK_WAIT_S
    assert pgstore.waits_s("-c lock_timeout=2min") == 120.0
    assert pgstore.waits_s("-cstatement_timeout=90000 -c lock_timeout=5s") == 90.0
    assert pgstore.waits_s("-c statement_timeout=1h") == 3600.0


LIBPQ_SPLITS = [
    "postgresql://alice:ab#cd@h:5/db",
    "postgresql://alice:ab?cd@h:5/db",
    "postgresql://alice:a:b:c@h/db",
    "postgresql://alice:pw@h/db#x",
    "postgresql://alice@h/db?sslmode=disable",
    "postgresql://:pw@h/db",
    "postgresql://h:5432/db?options=-c%20x%3Dy@z",
    "postgresql://[::1]:5432/db",
    "postgresql://",
]


@pytest.mark.parametrize("url", LIBPQ_SPLITS)
def test_the_url_is_split_where_libpq_splits_it(url, pg):
    from psycopg.conninfo import conninfo_to_dict

    parsed = conninfo_to_dict(url)
    _, user, password, _ = pgstore.split_url(url)
    assert (user or None, password) == (parsed.get("user"), parsed.get("password"))
    assert not password or password not in pgstore.redact(url)
    assert pgstore.redact(url) == (url.replace(f":{password}@", "@") if password else url)  # as typed, less it


def test_a_password_parameter_is_not_shown():
    assert (
        pgstore.redact("postgresql://h/db?sslmode=disable&password=x#y&user=u")
        == "postgresql://h/db?sslmode=disable&user=u"
    )
    assert pgstore.redact("postgresql://h/db?PassWord=x") == "postgresql://h/db"


@pytest.mark.parametrize("mark", ["#", "?", ":", "%40", "%2F"])
def test_a_password_with_any_character_is_never_said(pg, mark):
    """rev28 #4: `#` and `?` ended urlsplit's netloc and the password was printed (`stored as run N in ...`, --json's
    store, errors); `@` and `/` percent-encoded as a URL must have them."""
    url = pg.new_database("pw")
    password = f"ab{mark}cdSECRET".replace("%40", "@").replace("%2F", "/")
    role = f"r{abs(hash(mark)) % 10**8}"
    with pg.admin() as db:
        db.execute(f"DROP ROLE IF EXISTS {role}")
        db.execute(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{password}'")
    typed = f"ab{mark}cdSECRET"
    store = url.replace(f"{pgkit.USER}:{pg.password}@", f"{role}:{typed}@")
    shown = store.replace(f":{typed}@", "@")
    proc = edge_bench("run", "--target", "echo://one?latency_us=40", "--iterations", "20", "--store", store, "--json",
                      "-")  # fmt: skip
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0 and json.loads(proc.stdout)["store"] == shown, proc.stderr
    assert f"in {shown}" in proc.stderr
    proc = edge_bench("report", "999", "--store", store)
    said += proc.stdout + proc.stderr
    assert proc.returncode == 2 and f"no such run in {shown} (" in proc.stderr
    proc = edge_bench("report", "1", "--store", store.replace(f"@127.0.0.1:{pg.port}", f"@127.0.0.1:{pg.port}9"))
    said += proc.stdout + proc.stderr
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "cdSECRET" not in said and quote(password) not in said


@pytest.mark.parametrize("mark", ["@", "/"])
def test_a_password_with_an_unencoded_at_or_slash_is_refused_unsaid(pg, mark):
    """libpq ends the user part at the first `@` before any `/`: the rest of such a password would be taken for the
    host (and said in its errors)."""
    store = f"postgresql://alice:ab{mark}cdSECRET@127.0.0.1:{pg.port}/db"
    proc = edge_bench("baseline", "list", "--store", store)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "unencoded @ or /" in proc.stderr and "%40" in proc.stderr and "cdSECRET" not in proc.stderr


@pytest.mark.parametrize("store", ["postgresql:postgres:{pw}@127.0.0.1:{port}", "postgresql:/postgres:{pw}@h/r1",
                                   "PostgreSQL:postgres:{pw}@h", "postgres:u:{pw}@h", "sqlite:x{pw}", "MySQL:u:{pw}@h",
                                   "mariadb:u:{pw}@h"])  # fmt: skip
def test_a_database_scheme_without_its_slashes_is_refused_and_no_file_is_written(pg, tmp_path, store):
    """rev28 #5: `postgresql:USER:PW@HOST` wrote a local SQLite file named after the URL, password and all."""
    store = store.format(pw=pg.password, port=pg.port)
    for args in (("run", "--target", "echo://one?latency_us=40", "--iterations", "20"), ("baseline", "list")):
        proc = edge_bench(*args, "--store", store, cwd=tmp_path)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert "not a store URL" in proc.stderr and pg.password not in proc.stdout + proc.stderr
        assert ("did you mean postgresql://" in proc.stderr) == store.lower().startswith("postgres")
    assert list(tmp_path.iterdir()) == []


def test_a_nul_in_a_name_is_kept_as_u_fffd_and_the_run_is_not_lost(pg, tmp_path):
    """rev28 #11: PostgreSQL's text holds no NUL; the run was lost with "internal error: DataError"."""
    camp = tmp_path / "nul.toml"
    camp.write_text('[campaign]\nname = "c\\u0000x"\n[[target]]\nname = "e\\u00001"\nurl = "echo://e1?latency_us=50"\n'
                    f'[[model]]\npath = "{ROOT / "models" / "digits_cnn" / "digits_cnn_int8.onnx"}"\n'
                    "[[scenario]]\niterations = 20\n")  # fmt: skip
    url = pg.new_database("nul")
    proc = edge_bench("run", str(camp), "--store", url)
    assert proc.returncode == 0, proc.stderr
    with Store(url) as st:
        (run,) = st.runs()
        assert (run.campaign, run.target) == ("c\ufffdx", "e\ufffd1")
        assert st.add_run(RESULT, target="t\x00", campaign="c\x00x", request_id="n\x00") == 2  # the API too
        found = st.db.execute("SELECT count(*) FROM runs WHERE campaign = ?", ("c\x00x",)).fetchone()[0]
        assert found == 2  # looked up as it was written


def test_a_missing_schema_or_right_is_one_line_with_what_to_do(pg):
    url = pg.new_database("schema")
    with pytest.raises(UserError, match="no schema has been selected to create in") as e:
        Store(url + "?options=-csearch_path%3Dbench")
    assert e.value.hint == "make the schema first: CREATE SCHEMA bench AUTHORIZATION postgres"
    with pg.admin() as db:
        db.execute("DROP ROLE IF EXISTS notowner")
        db.execute(f"CREATE ROLE notowner LOGIN PASSWORD '{pg.password}'")
    database = url.rsplit("/", 1)[1]
    mine = url.replace(f"{pgkit.USER}:", "notowner:")
    with pytest.raises(UserError, match=r"^--store '[^']*': permission denied for schema public") as e:
        Store(mine)
    assert e.value.hint.startswith(f"make notowner the database's owner: ALTER DATABASE {database} OWNER TO notowner")
    assert pg.password not in str(e.value)
    with pg.admin() as db:
        db.execute(f"ALTER DATABASE {database} OWNER TO notowner")
    with Store(mine) as st:  # as the hint said
        assert st.schema_version == 2


@pytest.mark.parametrize(("typed", "shown"), [("postgresql://", "'postgresql://'"),
                                              ("postgresql://?connect_timeout=1", "'postgresql://?connect_timeout=1'"),
                                              ("sqlite:///x", "'sqlite:///x'")])  # fmt: skip
def test_a_malformed_or_foreign_url_is_shown_as_typed(pg, typed, shown):
    proc = edge_bench("baseline", "list", "--store", typed)
    assert proc.returncode == 2 and proc.stderr.startswith(f"edge-bench: error: --store {shown}:"), proc.stderr
