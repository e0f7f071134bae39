"""A throwaway PostgreSQL cluster for the store's tests: Debian's binaries, `initdb` in a temporary directory, started
with `pg_ctl` on 127.0.0.1 (a free port, its socket in that directory), password auth over TCP, fsync off; one per
test process, stopped when it ends. As root it runs as an unprivileged user (PostgreSQL refuses root), from `/` (a
checkout in a mode-700 directory is not theirs to enter). Where it cannot run, `cluster()` skips with one line saying
why and how to enable it. Never: touch the system's own clusters (Debian's `main` stays as it is).
"""

from __future__ import annotations

import atexit
import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

USER = "postgres"  # the cluster's superuser (a role in it, not the system user)
_cluster: Cluster | None = None
_failed: str | None = None


def bin_dir() -> str | None:
    """The newest /usr/lib/postgresql/N/bin with initdb and pg_ctl (Debian's layout), else PATH's."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb and shutil.which("pg_ctl") else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, bins: str):
        self.bins, self.password = bins, "pw-" + secrets.token_hex(8)
        self.dir = tempfile.mkdtemp(prefix="edge-pg.")
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root: the directory and the server go to `nobody`
            import pwd

            who = pwd.getpwnam("nobody")
            os.chown(self.dir, who.pw_uid, who.pw_gid)
            self.as_user = ["runuser", "-u", "nobody", "--"]
        os.chmod(self.dir, 0o700)
        pwfile = os.path.join(self.dir, "pw")
        with open(pwfile, "w") as f:
            f.write(self.password + "\n")
        if self.as_user:
            os.chown(pwfile, who.pw_uid, who.pw_gid)
        self._run("initdb", "-D", self.data, "-U", USER, "--auth-host=scram-sha-256", "--auth-local=trust",
                  f"--pwfile={pwfile}", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")  # fmt: skip
        os.unlink(pwfile)
        for _ in range(3):  # a port taken between choosing it and binding it: another one
            self.port = _free_port()
            self.opts = f"-k {self.dir} -h 127.0.0.1 -p {self.port} -c fsync=off -c max_connections=50"
            if self.start(check=False).returncode == 0:
                break
        else:
            raise RuntimeError(f"PostgreSQL did not start: {self.log()[-500:]}")
        self.made = 0

    def start(self, check: bool = True) -> subprocess.CompletedProcess:
        # -l: the server's output to the log, not to our pipe (a pipe it held would never end the read)
        return self._run("pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "log"), "-w", "-t", "30", "-o",
                         self.opts, "start", check=check)  # fmt: skip

    def restart(self, down_s: float = 0.0) -> None:
        """The server stopped as a restart or a failover stops it (fast: every session ended), started again after
        `down_s`."""
        self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")
        time.sleep(down_s)
        self.start()

    @property
    def data(self) -> str:
        return os.path.join(self.dir, "data")

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([*self.as_user, os.path.join(self.bins, tool), *args], cwd="/", capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        if check and proc.returncode != 0:
            raise RuntimeError(f"{tool}: {(proc.stderr or proc.stdout).strip()[-500:]}")
        return proc

    def log(self) -> str:
        try:
            with open(os.path.join(self.dir, "log")) as f:
                return f.read()
        except OSError:
            return ""

    def url(self, database: str = "postgres", password: str | None = None) -> str:
        return f"postgresql://{USER}:{password or self.password}@127.0.0.1:{self.port}/{database}"

    def admin(self):
        import psycopg

        return psycopg.connect(self.url(), autocommit=True, connect_timeout=10)

    def new_database(self, prefix: str = "t") -> str:
        """A new empty database; its URL (with the password)."""
        self.made += 1
        name = f"{prefix}_{os.getpid()}_{self.made}"
        with self.admin() as db:
            db.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def why_not() -> str | None:
    """Why no cluster can be started here, in one line; None when it can."""
    import importlib.util

    if importlib.util.find_spec("psycopg") is None:
        return "psycopg not installed: pip install 'edge-runtime[farm]' (make test does)"
    if bin_dir() is None:
        return "PostgreSQL not installed (no initdb/pg_ctl): apt-get install postgresql (make test does, as root)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: PostgreSQL refuses to run as root"
    return None


def cluster() -> Cluster:
    """The test process's cluster (started on first use); skips, saying why, where it cannot be."""
    global _cluster, _failed
    reason = why_not() or _failed
    if reason:
        pytest.skip(reason)
    if _cluster is None:
        try:
            _cluster = Cluster(bin_dir())
        except (OSError, RuntimeError, subprocess.SubprocessError) as err:
            _failed = f"PostgreSQL could not be started here: {' '.join(str(err).split())[:300]}"
            pytest.skip(_failed)
        atexit.register(_cluster.stop)
    return _cluster
