"""Typed result records: what `edge-runtime bench` writes (schema `edge-runtime/bench/1`) and what the host's store
and reports read, through the same code.

The records are frozen dataclasses. `to_dict()` gives the JSON shape of the schema, key for key and in order;
`from_dict()` reads it back, converting nested sections, tolerating keys an older writer left out (they read as their
defaults) and keeping keys a newer writer of the same major version added (`extra`), so a file survives a round trip:
a record as read writes back the keys it was read with, in their order (a host's record, which has no pinning or
thermal section, stays without them). `load()` refuses, with one line, a file that is not a result, an unknown schema
or a newer major version.

Never: import anything of edge_runtime but errors and the system's checked file reader (the host imports this module
without the runtime), or carry private data: the latency samples travel beside a result (`measure.bench.BenchRun`),
not inside it.

Long because it is the whole schema in one place, one record per section, with the strict reader every consumer of
a result file shares: split, the schema would be read in pieces.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from edge_runtime.errors import UserError

BENCH_SCHEMA_NAME = "edge-runtime/bench"
BENCH_SCHEMA_MAJOR = 1
BENCH_SCHEMA = f"{BENCH_SCHEMA_NAME}/{BENCH_SCHEMA_MAJOR}"
MAX_RESULT_BYTES = 256 << 20  # a result with a long thermal timeline is a few MB; a larger file is not one of ours

R = TypeVar("R", bound="Record")


# Field metadata: a key left out of to_dict() when None (a key the schema has only sometimes, e.g. `aborted`).
OMIT_NONE = types.MappingProxyType({"omit_none": True})


@dataclass(frozen=True)
class Record:
    """Base of every record: to_dict()/from_dict() driven by the field types. Unknown keys land in `extra`."""

    # Keys read that this version does not know: written back after the known ones (a newer minor version's keys).
    extra: Mapping[str, Any] = field(
        default_factory=dict, repr=False, compare=False, kw_only=True, metadata={"extra": True}
    )

    _hints: ClassVar[dict[type, dict[str, Any]]] = {}
    # The keys a record read by from_dict() was read with, in their order (set on the instance); None: built in code.
    # Not a field: equality ignores it, and dataclasses.replace() makes a record that writes the schema's every key.
    _read_keys: ClassVar[tuple[str, ...] | None] = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape: every key of the schema in order (None left out where the field says so), then `extra`;
        for a record as read, the keys it was read with, in their order."""
        names = {f.metadata.get("key", f.name): f for f in dataclasses.fields(self) if not f.metadata.get("extra")}
        if self._read_keys is not None:
            return {k: _plain(getattr(self, names[k].name) if k in names else self.extra[k]) for k in self._read_keys}
        out: dict[str, Any] = {}
        for key, f in names.items():
            value = getattr(self, f.name)
            if value is None and f.metadata.get("omit_none"):
                continue
            out[key] = _plain(value)
        for k, v in self.extra.items():
            out.setdefault(k, _plain(v))
        return out

    @classmethod
    def from_dict(cls: type[R], data: Mapping[str, Any], where: str = "") -> R:
        if not isinstance(data, Mapping):
            raise UserError(f"{where or cls.__name__}: expected an object, got {type(data).__name__}")
        hints = cls._type_hints()
        known: dict[str, Any] = {}
        names = set()
        for f in dataclasses.fields(cls):
            if f.metadata.get("extra"):
                continue
            key = f.metadata.get("key", f.name)
            names.add(key)
            if key in data:
                known[f.name] = _convert(hints[f.name], data[key], f"{where}.{key}" if where else key)
        extra = {k: v for k, v in data.items() if k not in names}
        try:
            record = cls(**known, extra=extra)
        except TypeError as err:  # a required key missing
            raise UserError(f"{where or cls.__name__}: {err}") from err
        object.__setattr__(record, "_read_keys", tuple(data))  # frozen: set once, here
        return record

    @classmethod
    def _type_hints(cls) -> dict[str, Any]:
        if cls not in Record._hints:
            Record._hints[cls] = typing.get_type_hints(cls)
        return Record._hints[cls]


def _plain(value):
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _convert(hint, value, where: str):
    """`value` read from JSON, made into what `hint` says and checked against it: records, tuples of records, tuples
    for lists, and scalars of the right kind (a bool is no number; a number is finite)."""
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _convert(args[0], value, where) if len(args) == 1 else _checked_any(value, where)
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint.from_dict(value, where)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{where}: expected a list, got {type(value).__name__}")
        args = typing.get_args(hint)
        if (len(args) == 2 and args[1] is Ellipsis) or len(args) == 1:
            if _all_plain(args[0], value):
                return tuple(tuple(v) if isinstance(v, list) else v for v in value)
            return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if args and len(value) != len(args):
            raise UserError(f"{where}: expected {len(args)} items, got {len(value)}")
        return tuple(_convert(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=False)))
    if origin in (Mapping, dict) or hint in (Mapping, dict):
        if not isinstance(value, Mapping):
            raise UserError(f"{where}: expected an object, got {type(value).__name__}")
        return _checked_any(value, where)
    if hint is bool:
        if not isinstance(value, bool):
            raise UserError(f"{where}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise UserError(f"{where}: expected a whole number, got {value!r}")
        return value
    if hint is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise UserError(f"{where}: expected a finite number, got {value!r}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise UserError(f"{where}: expected a string, got {value!r}")
        return value
    return _checked_any(value, where)


_JSON_KINDS = {int: (int,), float: (int, float), str: (str,)}  # what JSON gives for each (a bool is neither number)


def _all_plain(item, value: list) -> bool:
    """Every item of `value` already what `item` says, when it is a scalar or a fixed tuple of scalars: one quick pass
    over a long list (a histogram's buckets, a timeline) before the item-by-item conversion, which names the first
    item that is not."""
    parts = typing.get_args(item) if typing.get_origin(item) is tuple else (item,)
    kinds = [_JSON_KINDS.get(p) for p in parts]
    if not kinds or None in kinds:
        return False

    def plain(x, kind) -> bool:
        return type(x) in kind and (type(x) is not float or math.isfinite(x))

    if typing.get_origin(item) is not tuple:
        return all(plain(x, kinds[0]) for x in value)
    n = len(kinds)
    return all(type(v) in (list, tuple) and len(v) == n and all(map(plain, v, kinds)) for v in value)


def _checked_any(value, where: str):
    """A free-form part (details, isolation, ...): any JSON, but no number that is not finite."""
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"{where}: {value!r} is not a finite number")
    if isinstance(value, Mapping):
        return {k: _checked_any(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_checked_any(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


# --------------------------------------------------------------------------------------------------- the sections
@dataclass(frozen=True)
class ModelInfo(Record):
    path: str = ""
    sha256: str = ""
    format: str = ""
    precision: str = "unknown"  # int8 | fp32 | fp16 | mixed | unknown
    # A server's run (the host's record): the model's name and versions on the server.
    server_name: str | None = field(default=None, metadata=OMIT_NONE)
    server_versions: tuple[str, ...] | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class BackendSection(Record):
    """What actually ran (DESIGN.md: never the requested device where a fallback happened)."""

    name: str = ""
    version: str = ""
    device: str = ""
    delegate: str | None = None
    fallback: bool = False
    fallback_reason: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Config(Record):
    threads: int | None = None
    cpus: tuple[int, ...] | None = None
    rt_priority: int | None = None
    mlock: bool = False
    warmup: int | None = None  # warm-up calls made
    iterations: int | None = None
    duration_s: float | None = None
    stress: tuple[Mapping[str, Any], ...] = ()
    timed_call: str | None = None
    batch: int | None = field(default=None, metadata=OMIT_NONE)  # samples per inference (absent: 1)


@dataclass(frozen=True)
class Latency(Record):
    """Microseconds; percentiles by nearest rank (`quality.percentile_method`)."""

    count: int = 0
    min: float | None = None
    mean: float | None = None
    std: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p999: float | None = None
    p9999: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class Jitter(Record):
    p99_minus_p50: float | None = None
    max_minus_min: float | None = None


@dataclass(frozen=True)
class ThreadPin(Record):
    tid: int = 0
    name: str = ""
    cpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class Pinning(Record):
    requested: tuple[int, ...] | None = None
    all_threads_pinned: bool = False
    threads: tuple[ThreadPin, ...] = ()


@dataclass(frozen=True)
class OtherTask(Record):
    """A process that used a measured CPU during the measured part (or was running there and ended meanwhile)."""

    pid: int = 0
    comm: str = ""
    cpus: tuple[int, ...] = ()
    cpu_s: float | None = None
    ended: bool = False


@dataclass(frozen=True)
class Interference(Record):
    """On the measured CPUs, during the measured part only. None means unknown, never zero."""

    cpus: tuple[int, ...] = ()
    interrupts: int | None = None
    interrupts_per_cpu: Mapping[str, Any] | None = None
    context_switches_involuntary: int | None = None
    context_switches_voluntary: int | None = None
    migrations: int | None = None
    page_faults_major: int | None = None
    runqueue_wait_ms: float | None = None
    runqueue_wait_share: float | None = None
    other_tasks: tuple[OtherTask, ...] = ()


@dataclass(frozen=True)
class ZoneSection(Record):
    name: str = ""
    type: str = ""
    start_c: float | None = None
    end_c: float | None = None
    trips: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class ThermalPoint(Record):
    """One sample of the thermal sampler, placed on the latency samples (`sample_index`)."""

    t_s: float = 0.0
    max_c: float | None = None
    temps_c: Mapping[str, float] = field(default_factory=dict)
    freq_khz: Mapping[str, int | None] = field(default_factory=dict)
    power_w: float | None = None
    throttled: bool = False
    sampler_cpus: tuple[int, ...] | None = None
    sample_index: int | None = None


@dataclass(frozen=True)
class Thermal(Record):
    available: bool = False
    start_c: float | None = None
    max_c: float | None = None
    end_c: float | None = None
    limit_c: float | None = None
    limit_source: str | None = None
    headroom_c: float | None = None
    throttled: bool | None = None
    throttle_started_s: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    latency_drift_pct: float | None = None
    zones: tuple[ZoneSection, ...] = ()
    firmware_throttled: Mapping[str, Any] | None = None
    sensors_skipped: int = 0
    cooldown: Mapping[str, Any] | None = None
    sampler_warning: str | None = None
    sampler: Mapping[str, Any] | None = None
    timeline: tuple[ThermalPoint, ...] = ()


@dataclass(frozen=True)
class Power(Record):
    available: bool = False
    rail: str | None = None
    avg_w: float | None = None
    energy_per_inference_uj: float | None = None
    note: str | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class Quality(Record):
    timer_overhead_ns: int | None = None
    percentile_method: str = ""
    unstable: bool | None = None  # None: too few samples to tell
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Environment(Record):
    """The observed system (from --sysroot, or this machine) and the process that measured; `measured_on` says what
    the model really ran on when the two differ."""

    sysroot: str | None = None
    board: str | None = None
    firmware: str | None = None  # DMI's BIOS, or the boot loader the device tree names (a farm report compares it)
    kernel: str | None = None
    cmdline: str | None = None
    cpu_model: str | None = None
    governor: Mapping[str, str] = field(default_factory=dict)
    isolated_cpus: tuple[int, ...] = ()
    online_cpus: tuple[int, ...] = ()
    python: str | None = None
    packages: Mapping[str, str] = field(default_factory=dict)
    hostname: str | None = None
    measured_on: Mapping[str, Any] | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class Aborted(Record):
    """A run that stopped early and kept what it measured: `kind` thermal (limit crossed) or interrupted (a signal).
    `at_s`: when, from the start of the measured part (never negative); `phase`: for a thermal stop, the part of the run
    the limit was crossed in (load, warm-up or measure: on a slow board the heat can come before the measured part)."""

    kind: str = ""
    reason: str = ""
    signal: str | None = field(default=None, metadata=OMIT_NONE)
    at_s: float | None = None
    partial: bool = True
    phase: str | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class Errors(Record):
    """A run a client timed: its failed queries, their share of the queries sent, how many of each kind, and the first
    message of each kind."""

    failed: int = 0
    share: float = 0.0
    kinds: Mapping[str, int] = field(default_factory=dict)
    examples: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ServerSection(Record):
    """What a server said about a run a client timed: its statistics (the time split), its metrics, the network."""

    statistics: Mapping[str, Any] | None = None
    metrics: Mapping[str, Any] | None = None
    network: Mapping[str, Any] | None = None
    # The client's own cost (bench/scenarios/client.py): processes, cpu_s, cpu_us_per_query, client_bound, the rule.
    client: Mapping[str, Any] | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class BenchResult(Record):
    """One `edge-runtime bench` run: schema `edge-runtime/bench/1`."""

    schema: str = BENCH_SCHEMA
    model: ModelInfo = field(default_factory=ModelInfo)
    backend: BackendSection = field(default_factory=BackendSection)
    config: Config = field(default_factory=Config)
    latency_us: Latency = field(default_factory=Latency)
    jitter_us: Jitter = field(default_factory=Jitter)
    throughput_ips: float | None = None
    pinning: Pinning = field(default_factory=Pinning)
    interference: Interference = field(default_factory=Interference)
    isolation: Mapping[str, Any] = field(default_factory=dict)
    platform_latency: Mapping[str, Any] | None = None
    thermal: Thermal = field(default_factory=Thermal)
    power: Power = field(default_factory=Power)
    quality: Quality = field(default_factory=Quality)
    environment: Environment = field(default_factory=Environment)
    started_at: str | None = None
    wall_s: float | None = None
    aborted: Aborted | None = field(default=None, metadata=OMIT_NONE)
    # A run driven by a host over the agent's link: frames, bytes, retransmissions, CRC errors, resyncs, round trip.
    link: Mapping[str, Any] | None = field(default=None, metadata=OMIT_NONE)
    # An open-loop (server) run: the rate asked and achieved, the schedule's own error, latency from the actual send.
    scenario: Mapping[str, Any] | None = field(default=None, metadata=OMIT_NONE)
    # A run a host timed as a client (a KServe v2 server): failed queries by kind and their share, the count the
    # SLO's error budget takes, and what the server said about itself (its time split, its metrics).
    errors: Errors | None = field(default=None, metadata=OMIT_NONE)
    failed_queries: int | None = field(default=None, metadata=OMIT_NONE)
    server: ServerSection | None = field(default=None, metadata=OMIT_NONE)
    # A local NVIDIA GPU's own figures during the run (NVML: utilisation, memory, power, temperature, clocks).
    gpu: Mapping[str, Any] | None = field(default=None, metadata=OMIT_NONE)
    # A microcontroller's run over the EEMBC runner's protocol (MLPerf Tiny firmware, issue 27): its mode, the loops
    # its own timer measured (each a mean per inference: no distribution, so the percentiles are absent and `why`
    # says so), resets and reloads on the way, its last result vector, and in accuracy mode the score.
    firmware: Mapping[str, Any] | None = field(default=None, metadata=OMIT_NONE)
    # A run on a labgrid place (issue 28): the place's name, its group (the kind: the campaign target a campaign fanned
    # out to its places, or the place itself for a one-off run), its tags, board, coordinator and whether it was power
    # cycled; the farm report compares the places of one group.
    place: Mapping[str, Any] | None = field(default=None, metadata=OMIT_NONE)
    # Where each op ran and what it cost (issue 29; asked with `bench --ops`, absent otherwise): the summary of
    # edge_runtime/ops/ (OpsReport.summary(): schema edge-runtime/ops/1, verdict, partitions, fallback op types,
    # copies, delegated and fallback shares, the profiler's own cost, the slowest op rows and the overhead row),
    # measured on a second, profiled session after the timed loop: the latency above is never profiled.
    ops: Mapping[str, Any] | None = field(default=None, metadata=OMIT_NONE)
    # Latency over time: up to 200 windows of equal count in order, {t_s (end of the window, s from the start of the
    # measured part), count, p50, p99, max (us)}: what a plot of the run against its temperature needs.
    timeline_us: tuple[Mapping[str, Any], ...] | None = field(default=None, metadata=OMIT_NONE)
    # [latency in whole microseconds, count] for every value seen: the distribution, small enough to keep.
    histogram_us: tuple[tuple[int, int], ...] = ()


# ---------------------------------------------------------------------------------------------------------- load
KNOWN = {BENCH_SCHEMA_NAME: (BENCH_SCHEMA_MAJOR, BenchResult)}


def parse_schema(text: object) -> tuple[str, int, int]:
    """`edge-runtime/bench/1` or `edge-runtime/bench/1.2` -> (name, major, minor)."""
    if not isinstance(text, str) or "/" not in text:
        raise ValueError(f"{text!r} is not a schema name")
    name, _, version = text.rpartition("/")
    major, _, minor = version.partition(".")
    if not major.isascii() or not major.isdecimal() or (minor and not (minor.isascii() and minor.isdecimal())):
        raise ValueError(f"{text!r} has no version number")
    return name, int(major), int(minor or 0)


def load(source: str | os.PathLike[str] | Mapping[str, Any], *, where: str | None = None) -> BenchResult:
    """A result record from a file or a dict. Refuses, with one line naming the file (or `where`, e.g. "run 17 in
    s.sqlite"): no JSON, no schema, an unknown schema, or a newer major version than this one reads (`upgrade
    edge-runtime`). Older files of the same major version read, with the keys they lack as their defaults."""
    if isinstance(source, Mapping):
        data = source
        where = where or "result"
    else:
        from edge_runtime.files.inputs import open_input

        where = where or f"result {str(source)!r}"
        with open_input(source, "result", max_bytes=MAX_RESULT_BYTES) as f:
            raw = f.read()

        def refuse_constant(name: str):
            raise ValueError(f"{name} is not JSON")

        try:
            data = json.loads(raw, parse_constant=refuse_constant)
        except RecursionError as err:
            raise UserError(f"{where}: nested too deeply to be a result") from err
        except (ValueError, UnicodeDecodeError) as err:
            raise UserError(f"{where}: not a JSON result ({' '.join(str(err).split())[:120]})") from err
    if not isinstance(data, Mapping):
        raise UserError(f"{where}: not a result (a JSON {type(data).__name__}, not an object)")
    if "schema" not in data:
        raise UserError(f"{where}: no 'schema' key: not an edge-runtime result")
    try:
        name, major, _ = parse_schema(data["schema"])
    except ValueError as err:
        raise UserError(f"{where}: schema {data['schema']!r} is not one edge-runtime writes ({err})") from err
    if name not in KNOWN:
        reads = ", ".join(f"{n}/{m}" for n, (m, _) in KNOWN.items())
        raise UserError(f"{where}: schema {data['schema']!r} is not one this version reads (it reads {reads})")
    newest, cls = KNOWN[name]
    if major > newest:
        raise UserError(
            f"{where}: written by a newer edge-runtime (schema {data['schema']}); this version reads up to "
            f"{name}/{newest}",
            hint="upgrade edge-runtime to read it",
        )
    if major < 1:
        raise UserError(f"{where}: schema {data['schema']!r}: no such version")
    try:
        return cls.from_dict(data)
    except UserError as err:  # the key's path after the name: "run 3 in s.sqlite: errors.failed: expected ..."
        raise UserError(f"{where}: {err.message}", hint=err.hint) from None
    except RecursionError as err:
        raise UserError(f"{where}: nested too deeply to be a result") from err
