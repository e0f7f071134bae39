"""What every target is: something a URL names that can be reached, described, asked to bench a request with
progress, asked to stop, and closed; and what it declares before anything connects (board or server, the scenarios
it runs, whether its records carry a thermal section, the options it takes). registry.py maps URL schemes to classes.

Never: import a target module, the registry, the store, the campaign or the CLI here (every target imports this)."""

from __future__ import annotations

import abc
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from edge_runtime.errors import EdgeRuntimeError, UserError

Progress = Callable[[str], None]

# The kinds a user fixes (exit 2). Every other kind (unreachable, refused, timeout, crashed, internal, cancelled)
# is a failed check (exit 1): DESIGN.md, "1 failed check or unreachable target".
USER_KINDS = frozenset({"user-error", "bad-path", "no-model", "hash-mismatch", "too-large", "auth", "unusable"})
# Of those, what `edge-bench targets` says apart from "unreachable" (exit 2 there too): the far end said no to the
# token, or this machine lacks what the URL asks for (a GPU), which `run` would refuse in the same words.
REFUSED_KINDS = frozenset({"auth", "unusable"})


class TargetError(EdgeRuntimeError):
    """The target cannot be reached, or refused what was asked: one line, and its `kind` (a wire error kind)."""

    def __init__(self, message: str, kind: str = "unreachable", *, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.kind = kind

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        return 2 if self.kind in USER_KINDS else 1


@dataclass(frozen=True)
class TargetInfo:
    """What a target kind declares; the CLI and the campaign read it without connecting."""

    kind: Literal["board", "server"]  # board: it runs the scenario itself; server: the host times it as a client
    summary: str  # its URL form, for help and the unknown-scheme hint ("kserve+http://HOST:PORT/MODEL")
    scenarios: frozenset[str] | None = None  # None: every kind (edge_runtime.measure.schedule.KINDS)
    thermal: bool = False  # its records carry the board's thermal and power sections
    # options beyond the URL: token, reconnect_for, headers, concurrency, cpus, threads, backend, device, ops (a
    # per-op profile in the result: `edge-bench run --ops`, a campaign's `ops = true`)
    takes: frozenset[str] = frozenset()
    recovers: bool = False  # Ctrl-C escapes bench(); recover() then asks the far end for what it measured


@dataclass(frozen=True)
class TargetOptions:
    """What a caller gives every target. Each uses what its info.takes names and ignores the rest."""

    token: bytes | None = None
    reconnect_for: float = 60.0
    connect_timeout: float = 10.0
    headers: Mapping[str, str] | None = None
    log: Callable[[str], None] = lambda _line: None


@dataclass
class TargetResult:
    """One bench's answer: the record (edge-runtime/bench/1, a dict as on the wire and in the store) and what the
    target knows around it."""

    request_id: str
    result: dict
    warnings: list[str] = field(default_factory=list)
    rerun_after_restart: bool = False
    link: dict = field(default_factory=dict)
    store_id: int | None = None  # set by a caller that kept it in a store
    stopped_by: int | None = None  # the signal that stopped the run (its result is partial)

    def record(self) -> dict:
        """The result with the link's statistics beside the board's sections (`link`, a key of schema 1.1)."""
        return {**self.result, "link": self.link} if self.link else dict(self.result)


class Target(abc.ABC):
    """A target kind: one subclass per family of URL schemes, registered in registry.py or through the
    `edge_bench.targets` entry-point group."""

    schemes: ClassVar[tuple[str, ...]]
    info: ClassVar[TargetInfo]

    def __init__(self, url: str, options: TargetOptions | None = None):
        self.url = url
        self.options = options or TargetOptions()
        self.identity: dict = {}

    # ------------------------------------------------------------------ checks that never connect
    @classmethod  # noqa: B027 - optional: a URL with nothing to check
    def check_url(cls, url: str) -> None:
        """Refuse, with one UserError line, a URL of this scheme that names nothing."""

    @classmethod
    def with_base(cls, url: str, base: str) -> str:
        """The URL with a file it names relative to `base` (a campaign file's folder) made absolute, as a campaign's
        model paths are read; default: the URL as it is (it names no file)."""
        return url

    @classmethod
    def short_name(cls, url: str) -> str:
        """What a run without a campaign (which names its targets) calls this target: the scheme and where it is
        (`kserve:127.0.0.1:8000`, `tcp:10.0.0.2:7000`, `serial:/dev/ttyUSB0`, `local`), never the URL's options or
        its model (issue 25: the run's target column showed the whole URL); the whole URL stays the run's
        target_url."""
        import urllib.parse

        try:
            u = urllib.parse.urlsplit(url)
        except ValueError:  # a URL only its own target can read (checked before any run): said as it is
            return url
        scheme = u.scheme.lower().partition("+")[0]
        where = u.netloc.rpartition("@")[2] or u.path  # credentials are never part of a name
        if not scheme:
            return where or url  # a device path
        return f"{scheme}:{where}" if where not in ("", "/") else scheme

    @classmethod
    def fan_out(cls, url: str, group: str) -> list[tuple[str, str]] | None:
        """The many boards one URL stands for in a campaign (a farm's places that match tags): each (its name, its
        own URL, which carries `group`), asked once when the campaign starts; None (the default): one target."""
        return None

    @classmethod
    def shared_by(cls, url: str) -> str | None:
        """What a campaign's targets share one object by when they reach the same thing (a labgrid place, held for
        the campaign: a second acquire of it would be refused); None (the default): each target its own."""
        return None

    def adopt(self, url: str) -> None:  # noqa: B027 - optional: only a shared target has options to take
        """A shared object (shared_by) is used for another of the campaign's targets: take that URL's options."""

    @classmethod
    def named_model(cls, url: str) -> str | None:
        """The model a server's URL names (then --model is optional), or None: the model is a file on this host."""
        return None

    # Why a kind that takes no "ops" has no per-op profile (said by `run --ops` and once in a campaign's reports);
    # None: said by its kind (a server's protocol carries none).
    no_ops_why: ClassVar[str | None] = None

    @classmethod
    def ops_refusal(cls, url: str, device: str | None = None) -> str | None:
        """Why a run of `url` (on `device`, where the request names one) cannot carry a per-op profile (the `ops`
        section of edge_runtime/ops/), or None when it can. Never connects."""
        if "ops" in cls.info.takes:
            return None
        if cls.no_ops_why:
            return cls.no_ops_why
        if cls.info.kind == "server":
            return "a server's protocol (KServe v2) carries no per-op profile: run edge-runtime ops on its machine"
        return "this kind of target sends no per-op profile"

    @classmethod  # noqa: B027 - optional: nothing to check before a run
    def preflight(cls, url: str, *, backend: str | None = None, cpus: tuple[int, ...] | None = None,
                  models: Mapping[str, str] | None = None) -> None:  # fmt: skip
        """What would otherwise fail only when this target's turn came in a campaign (a backend or CPUs this machine
        lacks for local:); `models` maps how the caller names each model to its format. One UserError line. Default:
        nothing to check from here (a board says what is wrong itself, in one line)."""

    # ------------------------------------------------------------------ what every target does
    @abc.abstractmethod
    def connect(self) -> dict:
        """Reach it and return its identity (board or server, versions). Raises TargetError when it cannot."""

    def describe(self) -> dict:
        """The fields `edge-bench targets --json` shows for it (besides url and reachable); connects."""
        return dict(self.connect())

    @classmethod
    def describe_text(cls, row: dict) -> list[str]:
        """`describe()`'s row as the lines `edge-bench targets` prints."""
        return [f"{row['url']}  reachable  ({row.get('board') or cls.info.kind})"]

    @abc.abstractmethod
    def bench(self, request, *, progress: Progress | None = None, rid: str | None = None,
              sink: Callable[[TargetResult], None] | None = None) -> TargetResult:  # fmt: skip
        """Run `request` (a BenchRequest whose model is a path on this host, or the model a server's URL names) and
        return its result, given to `sink` first (the target may forget it once sink returns). A signal stops the run:
        the partial result comes back with `stopped_by`, or, for a target with info.recovers, KeyboardInterrupt
        escapes and recover() fetches it."""

    def cancel(self, rid: str) -> bool:
        """Ask run `rid` to stop at its next chunk; True when it was running there."""
        return False

    def recover(self, rid: str, sink: Callable[[TargetResult], None] | None = None,
                progress: Progress | None = None) -> TargetResult | None:  # fmt: skip
        """After KeyboardInterrupt escaped bench(rid): stop the run where it runs and return what it measured (given to
        sink; `progress` is told when the far end is asked), or None when nothing was started under `rid`."""
        return None

    def close(self) -> None:  # noqa: B027 - optional: a target that holds no connection
        """Let go of connections; idempotent."""

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def board_lines(row: dict) -> list[str]:
    """A board's CPUs and backends (its identity, from `edge-runtime info`) as `edge-bench targets` prints them."""
    from edge_runtime.system.cpulist import format_cpu_list

    cpus = row.get("cpus") or {}
    backends = ", ".join(f"{k} {v}" for k, v in (row.get("backends") or {}).items() if v) or "none"
    return [
        f"  cpus      {row.get('cpu_model') or '?'}; online {format_cpu_list(cpus.get('online') or []) or '?'}, "
        f"isolated {format_cpu_list(cpus.get('isolated') or []) or 'none'}",
        f"  backends  {backends}; python {row.get('python') or '?'}",
    ]


FRAMING_HEADERS = {"content-length", "content-type", "host", "transfer-encoding", "connection", "te", "upgrade",
                   "keep-alive", "inference-header-content-length"}  # fmt: skip


def expand_headers(headers: Mapping | None, where: str) -> dict[str, str]:
    """The HTTP/gRPC headers of a target that takes them (info.takes), with `${VAR}` in a value read from the
    environment (a token need not sit in a campaign file); one UserError line naming `where` for a bad one."""
    out = {}
    for k, v in (headers or {}).items():
        if not isinstance(k, str) or not isinstance(v, str) or not k.strip():
            raise UserError(f"{where}: header {k!r}: a name and a string value")

        def env(m, k=k):
            if m.group(1) not in os.environ:
                raise UserError(f"{where}: header {k!r}: environment variable {m.group(1)} is not set")
            return os.environ[m.group(1)]

        value = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", env, v)
        control = any(ord(c) < 32 or ord(c) == 127 for c in k + value)
        if control or not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", k.strip()):
            raise UserError(f"{where}: header {k!r}: a token name and a value without control characters")
        name = k.strip().lower()
        # gRPC metadata is printable ASCII (a "-bin" key means binary, which a token is not); the framing headers
        # belong to the HTTP and gRPC libraries, and a wrong one breaks every request in a way no message explains.
        if not value.isascii():
            raise UserError(f"{where}: header {k!r}: the value must be ASCII (gRPC metadata and HTTP/1.1 headers are)")
        if name in FRAMING_HEADERS or name.startswith("grpc-") or name.endswith("-bin"):
            raise UserError(f"{where}: header {k!r}: set by the HTTP/gRPC client itself, not by a campaign")
        out[name] = value
    return out


def printable(text: object, limit: int = 200, markup: bool = True) -> str:
    """What a device or a farm calls itself, fit for a terminal, Markdown and a store: control characters (and with
    `markup`, <>|`) made visible as "?", its length bounded. The eembc target's device names, the labgrid target's
    places, tags and owners (whoever can talk to a coordinator chooses them)."""
    out = "".join(c if c.isprintable() and (not markup or c not in "<>|`") else "?" for c in str(text))
    return out if len(out) <= limit else out[: limit - 3] + "..."
