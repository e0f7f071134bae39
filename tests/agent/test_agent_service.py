"""The agent as a service: the busybox/SysV init script under busybox sh, and the systemd unit's command line run as
systemd runs it (its EnvironmentFile's variables, `$$` unescaped). Both start a real agent a host then reaches."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agentkit import free_port
from conftest import ROOT

from bench.targets import TargetOptions
from bench.targets.agent import AgentTarget

pytest.importorskip("serial")
SCRIPTS = ROOT / "system_tuning"
EDGE_RUNTIME = str(Path(sys.executable).parent / "edge-runtime")


def conf(tmp_path: Path, port: int) -> Path:
    c = tmp_path / "agent.conf"
    c.write_text(f"ENDPOINT=tcp://127.0.0.1:{port}\nAGENT_ARGS=--state-dir {tmp_path / 'state'} --quiet\n")
    return c


def reach(port: int) -> dict:
    deadline = time.monotonic() + 60
    while True:
        try:
            with AgentTarget(f"tcp://127.0.0.1:{port}", TargetOptions(reconnect_for=0, connect_timeout=2)) as t:
                t.connect()
                t.call("ping")
                return t.identity
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_the_init_script_starts_and_stops_the_agent_under_busybox(tmp_path):
    busybox = shutil.which("busybox")
    if not busybox:
        pytest.skip("busybox not installed (make test installs it as root: apt-get install busybox)")
    port = free_port()
    env = {
        **os.environ,
        "EDGE_RUNTIME": EDGE_RUNTIME,
        "EDGE_RUNTIME_AGENT_CONF": str(conf(tmp_path, port)),
        "EDGE_RUNTIME_AGENT_PID": str(tmp_path / "agent.pid"),
        "EDGE_RUNTIME_AGENT_LOG": str(tmp_path / "agent.log"),
    }

    def init(action: str) -> subprocess.CompletedProcess:
        return subprocess.run([busybox, "sh", str(SCRIPTS / "edge-runtime-agent.init"), action], env=env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    assert init("status").returncode == 3
    started = init("start")
    assert started.returncode == 0, started.stderr
    pid = int((tmp_path / "agent.pid").read_text())
    assert reach(port)["protocol"] == 1
    assert init("status").stdout.startswith("running")
    assert "already running" in init("start").stdout
    stopped = init("stop")
    assert stopped.returncode == 0 and not Path(f"/proc/{pid}").exists()
    assert init("status").returncode == 3
    (tmp_path / "agent.conf").write_text("AGENT_ARGS=\n")
    bad = init("start")
    assert bad.returncode == 6 and "no ENDPOINT" in bad.stderr


def test_the_systemd_units_command_line_starts_the_agent(tmp_path):
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read(SCRIPTS / "edge-runtime-agent.service")
    service = unit["Service"]
    assert service["EnvironmentFile"] == "/etc/edge-runtime/agent.conf" and service["Restart"] == "always"
    cmd = service["ExecStart"].replace("$$", "$")
    assert cmd.startswith("/bin/sh -c '") and cmd.endswith("'")
    port = free_port()
    env = {**os.environ, "EDGE_RUNTIME": EDGE_RUNTIME}
    for line in conf(tmp_path, port).read_text().splitlines():
        k, _, v = line.partition("=")
        env[k] = v
    proc = subprocess.Popen(["/bin/sh", "-c", cmd[len("/bin/sh -c '") : -1]], env=env, stderr=subprocess.DEVNULL)
    try:
        assert reach(port)["protocol"] == 1
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 128 + 15  # what SuccessExitStatus=143 declares a clean stop
    assert "143" in service["SuccessExitStatus"]
