"""The board side as a board gets it: a wheel from `make wheelhouse`, installed with no index into a fresh virtual
environment outside the checkout, then the commands a firmware team runs first.

Built once per session: the wheelhouse for this machine and Python (edge-runtime's wheel and, from the package
registry, numpy, psutil and ONNX Runtime's), then `pip install --no-index --find-links` from it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import ROOT, fixture, x86_tree

VERSION = "{}.{}".format(*sys.version_info[:2])


def _env() -> dict[str, str]:
    """This environment minus anything that would lead the installed package back to the checkout."""
    drop = {"PYTHONPATH", "EDGE_RUNTIME_BOARDS", "EDGE_RUNTIME_SCRIPTS", "VIRTUAL_ENV", "PYTHONHOME"}
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("wheel")
    house = base / "wheelhouse"
    built = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools/wheelhouse.py"),
            "--python",
            VERSION,
            "--extras",
            "onnxruntime",
            "--out",
            str(house),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=base,
    )
    assert built.returncode == 0, built.stderr
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300, env=_env())
    pip = subprocess.run(
        [
            str(venv / "bin/python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-index",
            "--find-links",
            str(house),
            "edge-runtime[onnxruntime]",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=base,
        env=_env(),
    )
    assert pip.returncode == 0, pip.stderr
    return base, house, venv


def _run(installed, *args: str, check_code: int | None = 0) -> subprocess.CompletedProcess:
    base, _, venv = installed
    proc = subprocess.run(
        [str(venv / "bin/edge-runtime"), *args], capture_output=True, text=True, timeout=300, cwd=base, env=_env()
    )
    if check_code is not None:
        assert proc.returncode == check_code, proc.stdout + proc.stderr
    return proc


def test_the_wheel_carries_the_profiles_scripts_and_unit_files(installed):
    _, house, _ = installed
    (wheel,) = house.glob("edge_runtime-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    profiles = {p.name for p in (ROOT / "boards").glob("*.toml")}
    scripts = {p.name for p in (ROOT / "system_tuning").iterdir()}
    assert {n.rsplit("/", 1)[1] for n in names if n.startswith("edge_runtime/_data/boards/")} == profiles
    assert {n.rsplit("/", 1)[1] for n in names if n.startswith("edge_runtime/_data/system_tuning/")} == scripts
    assert {"edge-runtime-agent.service", "edge-runtime-agent.init", "isolate_cpus.sh"} <= scripts
    # The wheelhouse says how to install it and lets a board check its copy.
    sums = dict(reversed(line.split("  ")) for line in (house / "SHA256SUMS").read_text().splitlines())
    assert set(sums) == {w.name for w in house.glob("*.whl")}
    assert "--no-index --find-links" in (house / "INSTALL.txt").read_text()


def test_installed_from_the_wheel_it_runs_without_the_checkout(installed, tmp_path):
    base, _, venv = installed
    where = subprocess.run(
        [str(venv / "bin/python"), "-c", "import edge_runtime; print(edge_runtime.__file__)"],
        capture_output=True,
        text=True,
        cwd=base,
        env=_env(),
    ).stdout.strip()
    assert Path(where).is_relative_to(venv), where
    # The files the package carries are found through it, not through a checkout.
    files = json.loads(_run(installed, "tune", "files", "--json", "-").stdout)
    assert Path(files["system_tuning"]).is_relative_to(venv) and Path(files["boards"]).is_relative_to(venv)
    # info finds the board profile of a ROCK 5B capture (it found none when the wheel had no boards/).
    info = json.loads(_run(installed, "info", "--sysroot", str(fixture("rock5b")), "--json", "-").stdout)
    assert info["board_profile"]["name"] == "rk3588"
    # tune show and apply --dry-run on a fake tree run the shipped scripts (they were "not found" before).
    tree = x86_tree(tmp_path)
    show = _run(installed, "tune", "show", "--cpus", "1", "--sysroot", str(tree), check_code=1)
    assert "tuning for CPU 1" in show.stdout and "not tuned" in show.stdout
    apply = _run(
        installed, "tune", "apply", "--dry-run", "--cpus", "1", "--sysroot", str(tree), "--state-dir", str(tmp_path)
    )
    assert "would write" in apply.stdout, apply.stdout
    # run and bench on a reference model, copied out of the checkout.
    model = tmp_path / "resnet8_int8.onnx"
    model.write_bytes((ROOT / "models/resnet8/resnet8_int8.onnx").read_bytes())
    ran = json.loads(_run(installed, "run", str(model), "--json", "-").stdout)
    assert ran["backend"]["name"] == "onnxruntime"
    bench = json.loads(_run(installed, "bench", str(model), "--iterations", "50", "--json", "-").stdout)
    assert bench["latency_us"]["count"] == 50
