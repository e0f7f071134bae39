"""A labgrid farm on loopback for the labgrid:// target's tests, with real parts: `labgrid-coordinator` on 127.0.0.1
(in a temporary folder: it writes places.yaml there), a `labgrid-exporter` exporting each board's pseudo-terminal as a
RawSerialPort (labgrid wants a port under /dev: the null-modem cable's /dev/pts/N) with `edge-runtime agent` on the
cable's other end, and a tiny HTTP relay as each board's NetworkPowerPort (model simplerest). The exporter runs
ser2net through a wrapper first on its PATH that makes it listen on 127.0.0.1 only (labgrid asks for every interface).

Everything is stopped by its process id at the end. The tests skip, saying how to build it, without labgrid
(`make .venv-labgrid/.done`) or ser2net (`apt-get install ser2net`)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import http.server
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from agentkit import AgentProcess, Cable, free_port
from conftest import ROOT

# labgrid's ser2net start asks for `accepter: telnet(rfc2217,mode=server),tcp,PORT` (every interface); this puts
# 127.0.0.1 before the port (ser2net 4's tcp,HOST,PORT form).
SER2NET_WRAPPER = """#!/bin/sh
for a in "$@"; do
  case "$a" in *"accepter: "*",tcp,"*) a=$(printf '%s' "$a" | sed -E 's/,tcp,([0-9]+)$/,tcp,127.0.0.1,\\1/');; esac
  set -- "$@" "$a"; shift
done
exec {ser2net} "$@"
"""


def labgrid_bin() -> Path:
    """The folder holding labgrid-client, -coordinator and -exporter (the repository's .venv-labgrid); skips without."""
    given = os.environ.get("EDGE_BENCH_LABGRID_CLIENT")
    where = Path(given).parent if given else ROOT / ".venv-labgrid" / "bin"
    if not (where / "labgrid-exporter").is_file():
        pytest.skip(f"labgrid is not installed in {where}: make .venv-labgrid/.done (make test builds it)")
    return where


def ser2net() -> str:
    found = shutil.which("ser2net") or ("/usr/sbin/ser2net" if os.path.exists("/usr/sbin/ser2net") else None)
    if found is None:
        pytest.skip("ser2net is not installed: apt-get install ser2net (make sys-tools does, as root)")
    return found


class PowerRelay:
    """An HTTP relay at 127.0.0.1 that labgrid's simplerest power driver switches: GET /relay/INDEX/0|1. `seen` holds
    each (index, value) in order; `on_power_on[index]()` runs when a board is switched on."""

    def __init__(self):
        self.seen: list[tuple[int, int]] = []
        self.on_power_on: dict = {}
        relay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                parts = self.path.strip("/").split("/")
                if len(parts) == 3 and parts[0] == "relay":
                    index, value = int(parts[1]), int(parts[2])
                    relay.seen.append((index, value))
                    if value == 1 and index in relay.on_power_on:
                        relay.on_power_on[index]()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Farm:
    """A coordinator, one exporter, boards on null-modem cables (each with an agent unless told not), places."""

    def __init__(self, tmp: Path):
        self.bin, self.ser2net = labgrid_bin(), ser2net()
        self.tmp = tmp
        self.port = free_port()
        self.coordinator = f"127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.cables: dict[str, Cable] = {}
        self.agents: dict[str, AgentProcess] = {}
        self.power = PowerRelay()
        self.exporters: dict[str, subprocess.Popen] = {}
        wrap = tmp / "wrap"
        wrap.mkdir(parents=True)
        (wrap / "ser2net").write_text(SER2NET_WRAPPER.format(ser2net=self.ser2net))
        (wrap / "ser2net").chmod(0o755)
        self.env = {**os.environ, "PATH": f"{wrap}{os.pathsep}{os.environ.get('PATH', '')}",
                    "LG_COORDINATOR": self.coordinator}  # fmt: skip
        (tmp / "coordinator").mkdir()
        self.coordinator_proc = self._start([self.bin / "labgrid-coordinator", "-l", self.coordinator],
                                            cwd=tmp / "coordinator")  # fmt: skip
        self._wait(lambda: self.client("places").returncode == 0, "the coordinator to answer")

    def _start(self, argv, cwd=None) -> subprocess.Popen:
        proc = subprocess.Popen([str(a) for a in argv], cwd=cwd or self.tmp, env=self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=open(self.tmp / f"{Path(argv[0]).name}.log", "ab"),
                                start_new_session=True)  # fmt: skip
        self.procs.append(proc)
        return proc

    def _wait(self, ready, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                logs = {p.name: p.read_text()[-2000:] for p in self.tmp.glob("*.log")}
                raise AssertionError(f"waited {timeout:g} s for {what}: {logs}")
            time.sleep(0.3)

    def client(self, *args: str, user: str | None = None) -> subprocess.CompletedProcess:
        env = {**self.env, **({"LG_USERNAME": user} if user else {})}
        return subprocess.run([str(self.bin / "labgrid-client"), *args], capture_output=True, text=True, env=env,
                              timeout=60)  # fmt: skip

    def board(self, name: str, power_index: int | None = None, agent: bool = True, exporter: str = "exp1") -> None:
        """A board: a cable, the agent on its far end (unless `agent` is False), and a relay channel if asked; on
        `exporter` (start_exporter starts each)."""
        cable = self.cables[name] = Cable()
        if agent:  # started now, waited for by start_exporter: the boards' agents start side by side
            self.agents[name] = AgentProcess(cable.agent_url, self.tmp / f"state-{name}", wait=False)
        self._boards = [*getattr(self, "_boards", []), (name, cable.host_path, power_index, exporter)]

    def start_agent(self, name: str) -> None:
        self.agents[name] = AgentProcess(self.cables[name].agent_url, self.tmp / f"state-{name}")

    def start_exporter(self, exporter: str = "exp1") -> None:
        lines = []
        for name, path, index, on in self._boards:
            if on != exporter:
                continue
            lines.append(f"{name}:\n  RawSerialPort: {{port: {path}, speed: 115200}}\n")
            if index is not None:
                url = f"http://127.0.0.1:{self.power.port}/relay/{{index}}/{{value}}"
                power = f"{{model: simplerest, host: '{url}', index: {index}}}"
                lines.append(f"{name}-power:\n  NetworkPowerPort: {power}\n")
        (self.tmp / f"{exporter}.yaml").write_text("".join(lines))
        self.exporters[exporter] = self._start([self.bin / "labgrid-exporter", "-c", self.coordinator, "-n", exporter,
                                                "--hostname", "127.0.0.1", self.tmp / f"{exporter}.yaml"])  # fmt: skip
        want = {f"{exporter}/{n}/NetworkSerialPort" for n, _p, _i, on in self._boards if on == exporter}
        self._wait(lambda: want <= set(self.client("resources").stdout.split()), "the exporter's resources")
        for name, _p, _i, on in self._boards:
            if on == exporter and name in self.agents:
                self.agents[name].wait_for("listening on")

    def stop_exporter(self, exporter: str = "exp1") -> None:
        """The exporter goes away (its ser2net with it), as a lab PC that is switched off does."""
        self._stop(self.exporters.get(exporter))

    def place(self, name: str, group: str, tags: dict[str, str]) -> None:
        """A place matching the board `group`'s serial port (and its power port), with `tags`."""
        exp = next(on for n, _p, _i, on in self._boards if n == group)
        for args in (["create"], ["add-match", f"{exp}/{group}/NetworkSerialPort"],
                     *([["add-match", f"{exp}/{group}-power/NetworkPowerPort"]] if self._has_power(group) else []),
                     *([["set-tags", *(f"{k}={v}" for k, v in tags.items())]] if tags else [])):  # fmt: skip
            proc = self.client("-p", name, *args)
            assert proc.returncode == 0, proc.stderr

    def places(self, *specs: tuple[str, str, dict[str, str]]) -> None:
        """place(NAME, GROUP, TAGS) for each spec, the places side by side (each one's calls in order): a
        labgrid-client call is some 0.6 s of start-up, and a place takes three or four."""
        with concurrent.futures.ThreadPoolExecutor(len(specs)) as pool:
            for done in [pool.submit(self.place, *spec) for spec in specs]:
                done.result()

    def _has_power(self, board: str) -> bool:
        return any(n == board and i is not None for n, _p, i, _on in self._boards)

    def owner(self, place: str) -> str | None:
        """Who holds `place` ("host/user"), or None."""
        text = self.client("-v", "places").stdout
        block = text.split(f"Place '{place}':", 1)[1].split("Place '", 1)[0]
        value = block.split("acquired: ", 1)[1].splitlines()[0].strip()
        return None if value == "None" else value

    def pids(self) -> set[int]:
        """Every process of the farm's sessions (coordinator, exporter and the ser2net it started)."""
        import psutil

        out = set()
        for proc in self.procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p = psutil.Process(proc.pid)
                out |= {p.pid, *(c.pid for c in p.children(recursive=True))}
        return out

    @staticmethod
    def _stop(proc: subprocess.Popen | None) -> None:
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # its own session: the exporter's ser2net goes with it
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def close(self) -> None:
        for agent in self.agents.values():
            agent.stop()
        for proc in reversed(self.procs):
            self._stop(proc)
        for cable in self.cables.values():
            cable.close()
        self.power.close()
