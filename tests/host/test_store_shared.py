"""A farm's shared store (issue 28): one PostgreSQL database (a throwaway cluster, tests/pgkit.py) written by two
processes at once, through real `edge-bench run` campaigns (the echo target: no board, no model run) and through the
store's API: every run there once, a run delivered by both hosts kept once under one id, a writer killed mid-write
leaving nothing half-written while the other goes on; `report`, `compare` and `baseline` on the same store by URL;
the URL's password never said, and never in the store; its mistakes in one line. The suite both backends share is in
test_store.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pgkit
import pytest
from conftest import ROOT

from bench.store import Store
from edge_runtime.errors import UserError

PLUGINS = ROOT / "tests" / "plugins"  # the echo target's entry point


@pytest.fixture
def pg() -> pgkit.Cluster:
    return pgkit.cluster()  # skips, saying why, where PostgreSQL or psycopg is missing


def edge_bench(*args: str, cluster: pgkit.Cluster, env: dict | None = None) -> subprocess.CompletedProcess:
    """edge-bench with the echo target on its path; never the cluster's password in what it says."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(PLUGINS)]), **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, env=env)  # fmt: skip
    assert cluster.password not in proc.stdout + proc.stderr, (args, proc.stdout, proc.stderr)
    return proc


def campaign(tmp_path, name: str, repetitions: int) -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(f"""
[campaign]
name = "{name}"
repetitions = {repetitions}
[[target]]
name = "e1"
url = "echo://e1?latency_us=50"
[[target]]
name = "e2"
url = "echo://e2?latency_us=80"
[[model]]
path = "{ROOT / "models" / "digits_cnn" / "digits_cnn_int8.onnx"}"
[[scenario]]
iterations = 40
""")
    return str(path)


def stored_text(url: str) -> str:
    """Everything the store's tables hold, as text."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        rows = [db.execute(f"SELECT t::text FROM {t} AS t").fetchall() for t in ("runs", "baselines",
                                                                                 "edge_bench_schema")]  # fmt: skip
    return "\n".join(r[0] for table in rows for r in table)


def test_two_campaigns_from_two_processes_write_one_store_at_once(pg, tmp_path):
    """Two hosts' campaigns (20 runs each) started together on a database with no store yet: both make it (one
    migration, the other finds it made) and every run of both is there once, under its own request id."""
    url = pg.new_database("farm")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(PLUGINS)])}
    procs = [subprocess.Popen([sys.executable, "-m", "bench.cli", "run", campaign(tmp_path, name, 10), "--store", url],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name in ("host-a", "host-b")]  # fmt: skip
    said = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    assert all(rc == 0 for rc, _, _ in said), said
    assert all(pg.password not in out + err for _, out, err in said)
    with Store(url) as st:
        runs = st.runs()
    assert len(runs) == 40 and len({r.request_id for r in runs}) == 40 and None not in {r.request_id for r in runs}
    keys = sorted((r.campaign, r.target, r.repetition) for r in runs)
    assert keys == sorted((c, t, k) for c in ("host-a", "host-b") for t in ("e1", "e2") for k in range(10))


SAME_RUNS = """
import json, sys
from bench.store import Store
from edge_runtime.errors import UserError
url, me, order = sys.argv[1], sys.argv[2], sys.argv[3]
shared = [f"shared-{i}" for i in range(150)]
mine = [f"{me}-{i}" for i in range(50)]
ids = {}
with Store(url) as st:
    print("ready", flush=True)
    sys.stdin.readline()
    for rid in (shared if order == "up" else shared[::-1]) + mine:
        ids[rid] = st.add_run({"schema": "edge-runtime/bench/1", "model": {"sha256": "d" * 64}}, target=me,
                              request_id=rid)
print(json.dumps(ids))
"""


def test_a_run_delivered_by_two_hosts_at_once_is_kept_once_under_one_id(pg):
    """Two writers deliver the same 150 request ids at once (in opposite orders, so they meet in the middle) and 50
    each of their own: 250 runs, and both were given the same id for each shared one (ON CONFLICT, then the id
    kept)."""
    url = pg.new_database("same")
    Store(url).close()  # made; what is measured is the writing
    procs = [subprocess.Popen([sys.executable, "-c", SAME_RUNS, url, me, order], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
             for me, order in (("a", "up"), ("b", "down"))]  # fmt: skip
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    for p in procs:  # both go at once
        p.stdin.write("go\n")
        p.stdin.flush()
    got = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    shared = [f"shared-{i}" for i in range(150)]
    assert [got[0][r] for r in shared] == [got[1][r] for r in shared]  # one id for one run, whoever delivered it
    with Store(url) as st:
        rows = st.db.execute("SELECT request_id, id FROM runs").fetchall()
    assert len(rows) == 250 and len({r for r, _ in rows}) == 250
    assert dict(rows) == {**got[0], **got[1]}


KILLED = """
import sys
from bench.store import Store
from edge_runtime.errors import UserError
st = Store(sys.argv[1])
big = {"schema": "edge-runtime/bench/1", "model": {"sha256": "b" * 64}, "pad": "x" * 2_000_000}
print("ready", flush=True)
for i in range(100000):
    st.add_run(big, target="killed", request_id=f"k{i}")
    print(f"kept {i}", flush=True)
"""


def test_a_writer_killed_mid_write_leaves_nothing_half_written_and_the_other_goes_on(pg):
    url = pg.new_database("kill")
    Store(url).close()
    killed = subprocess.Popen([sys.executable, "-c", KILLED, url], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert killed.stdout.readline().strip() == "ready"
    other = subprocess.Popen([sys.executable, "-c", SAME_RUNS, url, "other", "up"], cwd=ROOT, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert other.stdout.readline().strip() == "ready"
    other.stdin.write("go\n")
    other.stdin.flush()
    deadline = time.monotonic() + 60
    while killed.stdout.readline().strip() != "kept 3":  # runs are in; the kill falls in a later transaction
        assert killed.poll() is None and time.monotonic() < deadline
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert json.loads(other.communicate(timeout=120)[0]) and other.returncode == 0  # it went on
    with Store(url) as st:
        rows = st.db.execute("SELECT request_id, length(result) FROM runs WHERE target = 'killed'").fetchall()
        assert len(rows) >= 4 and all(n > 2_000_000 for _, n in rows)  # each run whole, or not there at all
        assert {r for r, _ in rows} == {f"k{i}" for i in range(len(rows))}
        assert st.db.execute("SELECT count(*) FROM runs WHERE target = 'other'").fetchone()[0] == 200


def test_report_compare_and_baseline_read_the_shared_store_and_never_say_its_password(pg, tmp_path):
    url = pg.new_database("cli")
    shown = url.replace(f":{pg.password}@", "@")
    proc = edge_bench("run", campaign(tmp_path, "night-1", 3), "--store", url, "--json", "-", cluster=pg)
    assert proc.returncode == 0 and json.loads(proc.stdout)["store"] == shown, proc.stderr
    proc = edge_bench("run", campaign(tmp_path, "night-2", 3), "--store", url, cluster=pg)
    assert proc.returncode == 0 and f"; stored in {shown}\n" in proc.stdout, proc.stderr
    proc = edge_bench("run", "--target", "echo://one?latency_us=40", "--iterations", "60", "--store", url, cluster=pg)
    assert proc.returncode == 0 and f"in {shown}" in proc.stderr, proc.stderr
    one = int(proc.stderr.split("stored as run ")[1].split()[0])
    assert edge_bench("baseline", "set", "nightly", "1", "--store", url, cluster=pg).returncode == 0
    proc = edge_bench("baseline", "list", "--json", "-", cluster=pg, env={"EDGE_BENCH_STORE": url})  # by variable
    assert proc.returncode == 0 and json.loads(proc.stdout)["baselines"][0]["run"] == 1, proc.stderr
    proc = edge_bench("baseline", "show", "nightly", "--store", url, cluster=pg)
    assert proc.returncode == 0 and "nightly" in proc.stdout, proc.stderr
    proc = edge_bench("compare", "--a", "campaign:night-1/e1", "--b", "campaign:night-2/e1", "--json", "-",
                      "--store", url, cluster=pg)  # fmt: skip
    assert proc.returncode in (0, 1) and len(json.loads(proc.stdout)["b"]["runs"]) == 3, proc.stderr
    proc = edge_bench("compare", "--baseline", "nightly", "1", "--json", "-", "--store", url, cluster=pg)
    assert proc.returncode == 0 and json.loads(proc.stdout)["verdict"] == "no significant change", proc.stderr
    proc = edge_bench("report", "--last", "5", "--md", "-", "--store", url, cluster=pg)
    assert proc.returncode == 0 and proc.stdout.count("| e2 |") + proc.stdout.count("| e1 |") >= 4, proc.stdout
    proc = edge_bench("report", str(one), "--csv", "-", "--store", url, cluster=pg)
    assert proc.returncode == 0 and f"\n{one}," in proc.stdout, proc.stderr
    proc = edge_bench("report", "999", "--store", url, cluster=pg)
    assert proc.returncode == 2 and proc.stderr.startswith(f"edge-bench: error: run 999: no such run in {shown} (")
    assert pg.password not in stored_text(url)


def test_a_store_url_that_cannot_be_used_is_one_line_naming_where_and_never_the_password(pg):
    """Each refused in one line, exit 2, naming the host, the port and the database (or what is wrong), within
    seconds (the URL's connect_timeout is used)."""
    import psycopg

    url = pg.new_database("odd")
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("CREATE TABLE runs (x int)")
    newer = pg.new_database("newer")
    Store(newer).close()
    with psycopg.connect(newer, autocommit=True) as db:
        db.execute("UPDATE edge_bench_schema SET version = version + 1")
    port = pgkit._free_port()
    cases = [
        (pg.url("postgres", password="not-" + pg.password), f"127.0.0.1:{pg.port}, database 'postgres'",
         "password authentication failed"),
        (f"postgresql://bench:{pg.password}@127.0.0.1:{port}/farm?connect_timeout=2", f"127.0.0.1:{port}",
         "database 'farm'"),
        (pg.url("missing"), f"127.0.0.1:{pg.port}, database 'missing'", "does not exist"),
        (url, "no such store", url.rsplit("/", 1)[1]),  # reading it: never made a store (by `run`: below)
        (newer, "written by a newer edge-bench", "upgrade edge-bench"),
        (f"postgress://u:{pg.password}@127.0.0.1/x", "not a store this edge-bench opens", "postgress://u@127.0.0.1/x"),
        (f"POSTGRES://postgres:{pg.password}@127.0.0.1:{pg.port}/missing?password={pg.password}", "does not exist",
         "'postgres://postgres@127.0.0.1"),
    ]  # fmt: skip
    for where, *needles in cases:
        started = time.monotonic()
        proc = edge_bench("baseline", "list", "--store", where, cluster=pg)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and all(n in lines[0] for n in needles), (where, proc.stderr)
        assert time.monotonic() - started < 20
    with pytest.raises(UserError, match=r"^--store '[^']*/odd_\d+_\d+': database 'odd_\d+_\d+' has a table runs that"):
        Store(url)  # as `run` opens it
    with Store(pg.new_database("lost")) as st:
        with pg.admin() as db:  # the server ends the session (an administrator, an idle timeout): made again
            db.execute("SELECT pg_terminate_backend(%s)", (st.conn.info.backend_pid,))
        kept = st.add_run({"schema": "edge-runtime/bench/1"}, target="t", request_id="lost-1")
        assert [r.id for r in st.runs()] == [kept]
