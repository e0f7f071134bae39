"""labgrid's `labgrid-client`, run as a command: the places a coordinator knows (name, tags, matches, owner), acquire
and release, a place's acquired resources (its NetworkSerialPort's host and port, a NetworkPowerPort) and a power
cycle. The labgrid:// target (labgrid.py) is built on this and nothing else of labgrid.

Why a command and not `import labgrid`: labgrid 26 brings pyserial-labgrid, a fork that installs the same `serial`
module as upstream pyserial and overwrites its files when both are installed (pip check does not notice). The harness
speaks rfc2217 with upstream pyserial, so labgrid lives in its own environment (`make .venv-labgrid/.done`) and only
its `labgrid-client` is run: EDGE_BENCH_LABGRID_CLIENT, else `labgrid-client` on PATH, else the repository's
.venv-labgrid/bin/labgrid-client.

A resource is read from `labgrid-client show`, whose resources are Python literals (pprint), with ast.literal_eval,
which evaluates nothing: the harness has no YAML parser for `env`.

Never: open a port or a socket here, or hand labgrid-client anything of the agent's (its token goes to the agent
alone); every call is bounded by a timeout."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from bench.targets.base import TargetError
from edge_runtime.errors import UserError

CLIENT_ENV = "EDGE_BENCH_LABGRID_CLIENT"
CALL_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Place:
    """A place as the coordinator lists it; `owner` is "host/user", or None when it is free."""

    name: str
    tags: dict[str, str] = field(default_factory=dict)
    matches: tuple[str, ...] = ()
    owner: str | None = None

    @property
    def boards(self) -> list[str]:
        """The exporter groups its matches name (`exp1/board1/NetworkSerialPort` -> `exp1/board1`), once each."""
        return list(dict.fromkeys("/".join(m.split("/")[:2]) for m in self.matches))


@dataclass(frozen=True)
class Resource:
    """An acquired resource: its path (`exp1/board1/NetworkSerialPort/RawSerialPort`), class, parameters, and
    whether its exporter still offers it."""

    path: str
    cls: str
    params: dict
    avail: bool


def find_client() -> str:
    """The labgrid-client to run; one UserError line when there is none."""
    given = os.environ.get(CLIENT_ENV)
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            raise UserError(f"{CLIENT_ENV}={given!r}: not an executable labgrid-client")
        return given
    found = shutil.which("labgrid-client")
    if found:
        return found
    own = Path(__file__).resolve().parents[2] / ".venv-labgrid" / "bin" / "labgrid-client"
    if own.is_file():
        return str(own)
    raise UserError("labgrid:// targets run labgrid-client: not found (EDGE_BENCH_LABGRID_CLIENT, PATH, .venv-labgrid)",
                    hint="make .venv-labgrid/.done, or pip install labgrid in an environment of its own")  # fmt: skip


def parse_places(text: str) -> list[Place]:
    """`labgrid-client -v places` as Place records."""
    places: list[dict] = []
    section = None
    for line in text.splitlines():
        m = re.match(r"Place '(.+)':$", line)
        if m:
            places.append({"name": m.group(1), "tags": {}, "matches": [], "owner": None})
            section = None
            continue
        if not places:
            continue
        here = places[-1]
        key, _, value = line.strip().partition(": ")
        if line.startswith("    ") and section == "matches":
            here["matches"].append(line.strip())
        elif key == "tags":
            here["tags"] = dict(t.strip().partition("=")[::2] for t in value.split(",") if t.strip())
        elif key == "acquired":
            here["owner"] = None if value in ("", "None") else value
        section = line.strip().rstrip(":") if line.startswith("  ") and not line.startswith("    ") else section
    return [Place(p["name"], p["tags"], tuple(p["matches"]), p["owner"]) for p in places]


def parse_resources(text: str) -> list[Resource]:
    """The acquired resources of `labgrid-client -p P show`: each a header line and a Python literal below it."""
    out = []
    blocks = re.split(r"^Acquired resource '[^']*' \(([^)]*)\):\n", text, flags=re.M)
    for path, body in zip(blocks[1::2], blocks[2::2], strict=True):
        literal = "\n".join(line for line in body.splitlines() if line.startswith("  "))
        try:
            d = ast.literal_eval(literal.strip())
        except (ValueError, SyntaxError):
            continue  # not a resource we can read: left out, as labgrid would show it to a person
        if isinstance(d, dict):
            out.append(Resource(path, str(d.get("cls")), dict(d.get("params") or {}), bool(d.get("avail"))))
    return out


def owner_in(words: str) -> str | None:
    """The "host/user" a refusal to acquire names ("Place p1 is already acquired by vm/root.")."""
    m = re.search(r"acquired by (\S+?)\.?(?:\s|$)", words)
    return m.group(1) if m else None


class LabgridClient:
    """labgrid-client against one coordinator (HOST:PORT, or labgrid's own default: LG_COORDINATOR, 127.0.0.1:20408)."""

    YOURS = "this host and user"  # acquire()'s owner of a place this user holds from another session

    def __init__(self, coordinator: str | None, name: str):
        import getpass
        import socket

        self.coordinator, self.name = coordinator, name  # name: the target's URL, the first word of every error
        self.argv0 = find_client()
        # The owner labgrid names this host and user by ("host/user"), as labgrid-client run from here tells it
        host = os.environ.get("LG_HOSTNAME") or socket.gethostname()
        self.me = f"{host}/{os.environ.get('LG_USERNAME') or getpass.getuser()}"

    def run(self, *args: str, place: str | None = None, timeout: float = CALL_TIMEOUT_S) -> tuple[int, str, str]:
        """(exit status, stdout, the client's last error line); one TargetError line when the coordinator is not
        there or the call outlives `timeout`."""
        argv = [self.argv0, *(["-x", self.coordinator] if self.coordinator else []),
                *(["-p", place] if place else []), *args]  # fmt: skip
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise TargetError(f"{self.name}: labgrid-client {' '.join(args)} gave no answer in {timeout:g} s",
                              "timeout") from None  # fmt: skip
        except OSError as err:
            raise UserError(f"{self.name}: cannot run {self.argv0!r}: {err.strerror or err}") from None
        if "Could not connect to coordinator" in proc.stderr or "coordinator is unavailable" in proc.stderr:
            where = self.coordinator or os.environ.get("LG_COORDINATOR") or "labgrid's default, 127.0.0.1:20408"
            raise TargetError(f"{self.name}: no labgrid coordinator answers at {where}", "unreachable")
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        last = lines[-1].removeprefix("labgrid-client: ").removeprefix("Error: ") if lines else ""
        return proc.returncode, proc.stdout, last

    def places(self) -> list[Place]:
        code, out, err = self.run("-v", "places")
        if code:
            raise TargetError(f"{self.name}: labgrid-client places: {err or f'exit {code}'}", "unreachable")
        return parse_places(out)

    def acquire(self, place: str) -> str | None:
        """None once acquired; else the owner that holds it ("host/user", or YOURS: never taken over, since the other
        session would lose it at this one's release). A place that does not exist: one line."""
        code, _out, err = self.run("acquire", place=place)
        if code == 0:
            return None
        if "You have already acquired" in err:
            return self.YOURS
        owner = owner_in(err)
        if owner:
            return owner
        kind = "user-error" if "matches nothing" in err else "refused"
        raise TargetError(f"{self.name}: labgrid cannot acquire place {place!r}: {err or f'exit {code}'}", kind)

    def release(self, place: str) -> str:
        """Release the place; "" when done, else the client's words (the caller has nothing better to do with them)."""
        code, _out, err = self.run("release", place=place)
        return "" if code == 0 else err or f"exit {code}"

    def resources(self, place: str) -> list[Resource]:
        code, out, err = self.run("show", place=place)
        if code:
            raise TargetError(f"{self.name}: labgrid-client show {place}: {err or f'exit {code}'}", "unreachable")
        return parse_resources(out)

    def power_cycle(self, place: str, off_s: float) -> str:
        """Power the place's board off for `off_s` and on again; "" when done, else the client's words."""
        code, _out, err = self.run("power", "cycle", "-t", f"{off_s:g}", place=place, timeout=CALL_TIMEOUT_S + off_s)
        return "" if code == 0 else err or f"exit {code}"
