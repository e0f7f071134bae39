"""make wheelhouse: every wheel a board needs, for a board with no network.

    python tools/wheelhouse.py --platform aarch64 --python 3.11 [--extras onnxruntime,openvino,tflite,agent]
                               [--glibc 2.35] [--out DIR] [--tar]

Builds edge-runtime's own wheel (board profiles and tuning scripts inside), then downloads the wheels of everything the
chosen extras pull in, for the board's machine and Python, with the versions in constraints.txt. On the board:

    python3 -m venv /opt/edge-runtime
    /opt/edge-runtime/bin/pip install --no-index --find-links WHEELHOUSE 'edge-runtime[EXTRAS]'

Decisions (docs/board.md, "Deploying to a board"):
- Binary wheels only (a board image has no compiler). A dependency with no wheel for the target is named in one line
  with what to do: hdrhistogram publishes none for aarch64, so the `hdr` extra (--hdr-log) is left out of the default
  extras and, when asked for, refused with how to build it on a board that has a compiler.
- pip evaluates environment markers (`python_version < "3.11"`) with the interpreter it runs in, not the
  `--python-version` it is given, so the download runs under an interpreter of the target version, found on PATH or
  under pyenv; without one the wheelhouse is refused rather than built wrong.
- `--glibc` is the board's C library (Ubuntu 22.04/JetPack 6: 2.35, Debian 12 and Raspberry Pi OS: 2.36, Debian 11:
  2.31): wheels that need a newer one are not taken. The wheelhouse says which glibc its wheels need at least.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MACHINES = ("x86_64", "aarch64")
BOARD_EXTRAS = "onnxruntime,openvino,tflite,agent"
# The package's sources: what a wheel is built from (boards/ and system_tuning/ through edge_runtime/_data's links).
SOURCES = ("pyproject.toml", "README.md", "edge_runtime", "bench", "boards", "system_tuning")
NO_WHEEL = {
    "hdrhistogram": "--hdr-log; on the board, with a C compiler: pip install hdrhistogram, or build its wheel there "
    "(pip wheel hdrhistogram -w DIR) and add it to the wheelhouse"
}


class Refused(Exception):
    """A one-line reason; exit 2."""


def say(msg: str) -> None:
    print(f"wheelhouse: {msg}", file=sys.stderr, flush=True)


def extras_known() -> dict[str, list[str]]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]


def find_python(version: str) -> str:
    """An interpreter of `version`: this one, pythonX.Y on PATH, or pyenv's."""
    if "{}.{}".format(*sys.version_info[:2]) == version:
        return sys.executable
    candidates = [shutil.which(f"python{version}")]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += sorted(str(p) for p in pyenv.glob(f"{version}.*/bin/python{version}"))
    for c in candidates:
        if c and subprocess.run([c, "-c", "import pip"], capture_output=True).returncode == 0:
            return c
    raise Refused(
        f"--python {version}: no Python {version} with pip on this machine (pythonX.Y on PATH or under pyenv); pip "
        "evaluates the packages' environment markers with the interpreter it runs in, so the download needs one "
        f"(pyenv install {version})"
    )


def platforms(machine: str, glibc: str) -> list[str]:
    """Every manylinux tag a board with this glibc runs (pip does not widen a --platform it is given)."""
    major, minor = (int(x) for x in glibc.split("."))
    tags = [f"manylinux_{major}_{m}_{machine}" for m in range(minor, 16, -1)]
    return [*tags, f"manylinux2014_{machine}", f"linux_{machine}"] if major == 2 and minor >= 17 else tags


def build_wheel(dest: Path) -> Path:
    """edge-runtime's wheel, built from a copy of its sources (nothing is written into the checkout)."""
    with tempfile.TemporaryDirectory(prefix="edge-runtime-src-") as tmp:
        for name in SOURCES:
            src = ROOT / name
            if src.is_dir():
                shutil.copytree(src, Path(tmp) / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(src, Path(tmp) / name)
        try:
            import setuptools  # noqa: F401 - present: build here, offline; absent (3.12+ venvs): pip fetches it

            isolation = ["--no-build-isolation"]
        except ImportError:
            isolation = []
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--disable-pip-version-check",
                "--no-deps",
                *isolation,
                "-w",
                str(dest),
                tmp,
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise Refused(f"building edge-runtime's wheel failed: {_last(proc.stderr)}")
    wheels = sorted(dest.glob("edge_runtime-*.whl"))
    if len(wheels) != 1:
        raise Refused(f"building edge-runtime's wheel left {len(wheels)} wheels in {dest}")
    return wheels[0]


def _last(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and "is ignored" not in ln]
    return lines[-1] if lines else "no output"


def download(python: str, machine: str, version: str, glibc: str, extras: str, dest: Path) -> None:
    abi = "cp" + version.replace(".", "")
    args = [python, "-m", "pip", "download", "--disable-pip-version-check", "--only-binary=:all:"]
    for tag in platforms(machine, glibc):
        args += ["--platform", tag]
    args += ["--python-version", version, "--implementation", "cp", "--abi", abi]
    args += ["-d", str(dest), "--find-links", str(dest), "-c", str(ROOT / "constraints.txt")]
    args.append(f"edge-runtime[{extras}]" if extras else "edge-runtime")
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode == 0:
        return
    # pip names the package with no wheel one of two ways: no distribution at all, or (when constraints.txt pins it) a
    # conflict between the pin and the requirement, which is the same thing once every tag has been tried.
    text = proc.stdout + proc.stderr
    missing = re.search(r"No matching distribution found for ([A-Za-z0-9_.-]+)", text) or re.search(
        r"The user requested \(constraint\) ([A-Za-z0-9_.-]+)", text
    )
    if missing:
        name = re.split(r"[<>=!~;\[ ]", missing.group(1))[0]
        how = NO_WHEEL.get(name.lower())
        why = f"no {name} wheel fits {machine}, Python {version}, glibc {glibc} (with constraints.txt's pins)"
        raise Refused(f"{why}: leave out the extra that needs it ({how})" if how else f"{why} (pip: {_last(text)})")
    raise Refused(f"pip download failed: {_last(text)}")


def glibc_needed(wheels: list[Path]) -> str | None:
    """The newest glibc any wheel's tag asks for (pure-Python wheels ask none)."""
    best = None
    for w in wheels:
        for major, minor in re.findall(r"manylinux_(\d+)_(\d+)_", w.name):
            best = max(best or (0, 0), (int(major), int(minor)))
        if "manylinux2014_" in w.name:
            best = max(best or (0, 0), (2, 17))
    return f"{best[0]}.{best[1]}" if best else None


def write_notes(dest: Path, machine: str, version: str, extras: str) -> None:
    wheels = sorted(dest.glob("*.whl"))
    sums = "".join(f"{hashlib.sha256(w.read_bytes()).hexdigest()}  {w.name}\n" for w in wheels)
    (dest / "SHA256SUMS").write_text(sums)
    spec = f"edge-runtime[{extras}]" if extras else "edge-runtime"
    (dest / "INSTALL.txt").write_text(
        f"edge-runtime wheelhouse for {machine}, Python {version}, extras: {extras or 'none'}\n"
        f"{len(wheels)} wheels; they need glibc >= {glibc_needed(wheels) or 'any'}.\n\n"
        "On the board, with no network (check the copy first: sha256sum -c SHA256SUMS):\n"
        "    python3 -m venv /opt/edge-runtime\n"
        f"    /opt/edge-runtime/bin/pip install --no-index --find-links . '{spec}'\n"
        "    /opt/edge-runtime/bin/edge-runtime info\n"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make wheelhouse", description=__doc__.split("\n\n")[0])
    p.add_argument("--platform", default=os.uname().machine, help=f"the board's machine: {', '.join(MACHINES)}")
    p.add_argument("--python", default="{}.{}".format(*sys.version_info[:2]), help="the board's Python, e.g. 3.11")
    p.add_argument("--extras", default=BOARD_EXTRAS, help=f"comma-separated (default {BOARD_EXTRAS})")
    p.add_argument("--glibc", default="2.35", help="the board's glibc (default 2.35: Ubuntu 22.04, JetPack 6)")
    p.add_argument("--out", type=Path, help="the folder (default dist/wheelhouse-PLATFORM-pyVERSION)")
    p.add_argument("--tar", action="store_true", help="also write FOLDER.tar.gz beside it")
    a = p.parse_args(argv)
    try:
        machine = {"arm64": "aarch64", "amd64": "x86_64"}.get(a.platform, a.platform)
        if machine not in MACHINES:
            raise Refused(f"--platform {a.platform!r}: not one of {', '.join(MACHINES)}")
        if not re.fullmatch(r"3\.(1[0-9]|[2-9][0-9])", a.python):
            raise Refused(f"--python {a.python!r}: give the board's Python as 3.N with N >= 10 (e.g. 3.11)")
        if not re.fullmatch(r"2\.(1[7-9]|[2-9][0-9])", a.glibc):
            raise Refused(f"--glibc {a.glibc!r}: give the board's glibc as 2.N with N >= 17 (ldd --version says it)")
        known = extras_known()
        extras = [e.strip() for e in a.extras.split(",") if e.strip()]
        bad = [e for e in extras if e not in known]
        if bad:
            raise Refused(f"--extras: unknown {', '.join(bad)} (known: {', '.join(sorted(known))})")
        extras_s = ",".join(extras)
        out = a.out or ROOT / "dist" / f"wheelhouse-{machine}-py{a.python}"
        if out.exists() and not out.is_dir():
            raise Refused(f"--out {str(out)!r}: exists and is not a folder")
        python = find_python(a.python)
        out.mkdir(parents=True, exist_ok=True)
        # Exactly this bundle: nothing kept from an earlier one (other pins, other extras).
        for stale in [*out.glob("*.whl"), out / "SHA256SUMS", out / "INSTALL.txt"]:
            stale.unlink(missing_ok=True)
        say(f"building edge-runtime's wheel into {out}")
        wheel = build_wheel(out)
        say(f"{wheel.name}; downloading wheels for {machine}, Python {a.python}, glibc {a.glibc}: [{extras_s}]")
        download(python, machine, a.python, a.glibc, extras_s, out)
        write_notes(out, machine, a.python, extras_s)
        n = len(list(out.glob("*.whl")))
        size = sum(w.stat().st_size for w in out.glob("*.whl")) / 1e6
        say(f"{n} wheels, {size:.0f} MB in {out} (INSTALL.txt says how to install them on the board)")
        if a.tar:
            tar = out.parent / f"{out.name}.tar.gz"
            with tarfile.open(tar, "w:gz") as t:
                t.add(out, arcname=out.name)
            say(f"and {tar}")
        print(out)
        return 0
    except Refused as err:
        print(f"make wheelhouse: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
