"""Per-op placement and time on ONNX Runtime, from its profiler's trace, on a second session.

Facts this rests on (research 29, section 2; onnxruntime 1.31):
- `SessionOptions.enable_profiling` writes a Chrome-trace JSON array at `end_profiling()`: one `model_run` event per
  run and one `<node>_kernel_time` event per node per run (names after ORT's fusions), with args `op_name`,
  `provider` and `input_type_shape`/`output_type_shape` (the dtypes: ORT names no kernel or ISA, so the precision is
  read from them). Each event has its own duration: per-op mean and p99 come straight from them.
- The profiler costs about 7 us per node per run: per-op times under it are inflated, so the session the caller
  times has it off, and the report gives shares and the profiled session's own overhead.
- Placement: `session.record_ep_graph_assignment_info=1` and `get_provider_graph_assignment_info()` list each
  provider's subgraphs (node names before fusion); the CPU provider gets one subgraph per node, so its subgraphs are
  one partition here. Where the call is missing (older ORT) the providers in the trace stand in.
- A compiling provider's subgraph (OpenVINO's, through the onnxruntime-ep-openvino plugin) is ONE node to the
  profiler, op_name `<provider>_<hash>_<k>`: its time covers every op in it, none alone. Its k-th subgraph is the
  provider's k-th in the graph assignment, both in the order the graph runs (checked on resnet8 and on graphs whose
  subgraphs of 1 and 3 ops, and 2 and 1, stand either side of FastGelu): the row says how many ops it holds.
- Copies: Memcpy* nodes (an EP with its own memory) and ReorderInput/ReorderOutput (NCHWc layout changes). The
  OpenVINO plugin on CPU works in host memory: ONNX Runtime inserts no Memcpy around its subgraphs (0 copies).
- The profiler keeps at most a million events: the profiled runs are bounded to fit.
Never: profile the session the caller times.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import replace

import numpy as np

from edge_runtime.errors import UserError
from edge_runtime.measure.loop import measure
from edge_runtime.measure.stats import nearest_rank
from edge_runtime.ops.record import EXECUTED, PROFILER, Counted, EngineProfile, OpRow, Partition, median_us
from edge_runtime.runtime.backends.onnxruntime_backend import PROVIDERS, OnnxRuntimeBackend
from edge_runtime.runtime.session import Session

PLACEMENT_KEY = "session.record_ep_graph_assignment_info"
# Events the profiled runs may make: the profiler stops at 1,000,000 (onnxruntime/core/common/profiler.h), and the
# trace is read whole (about 700 bytes an event on disk, more in memory): a board's memory is the tighter bound.
MAX_EVENTS = 200_000
DTYPES = {
    "float": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "double": "fp64",
    "int8": "int8",
    "uint8": "uint8",
    "int16": "int16",
    "uint16": "uint16",
    "int32": "int32",
    "int64": "int64",
    "bool": "bool",
}
COPY_OPS = ("Memcpy", "ReorderInput", "ReorderOutput")


class ProfilingBackend(OnnxRuntimeBackend):
    """The ONNX Runtime backend with the profiler on (files under `prefix`) and placement recorded, set through the
    backend's public `configure` hook."""

    def __init__(self, model, options, prefix: str) -> None:
        def configure(so) -> None:
            so.enable_profiling = True
            so.profile_file_prefix = prefix
            try:
                so.add_session_config_entry(PLACEMENT_KEY, "1")
            except Exception:  # noqa: BLE001 - the user set it already, or this ORT does not know it: from the trace
                pass

        super().__init__(model, options, configure=configure)

    def assignment(self) -> list[tuple[str, list[tuple[str, str]]]] | None:
        """[(provider, [(node name, op type), ...]), ...] per subgraph, or None where this ORT cannot say."""
        get = getattr(self._session, "get_provider_graph_assignment_info", None)
        if get is None:
            return None
        try:
            found = get()
        except Exception:  # noqa: BLE001 - not recorded (an old ORT): placement from the trace instead
            return None
        return [(g.ep_name, [(n.name, n.op_type) for n in g.get_nodes()]) for g in found] or None

    def end_profiling(self) -> str:
        return self._session.end_profiling()


def check_options(options: dict[str, str] | None) -> None:
    """Nothing to refuse: ONNX Runtime's profiler is a SessionOptions field, which no --option reaches."""


def short(provider: str) -> str:
    """CPUExecutionProvider -> CPU; OpenVINOExecutionProvider -> OpenVINO."""
    return provider.removesuffix("ExecutionProvider") or provider


def precision_of(args: dict) -> str | None:
    """The first input's and first output's dtypes: "uint8", or "fp32->uint8" for an op that converts."""

    def first(key: str) -> str | None:
        shapes = args.get(key) or []
        if not shapes or not isinstance(shapes[0], dict) or not shapes[0]:
            return None
        dtype = next(iter(shapes[0]))
        return DTYPES.get(dtype, dtype)

    a, b = first("input_type_shape"), first("output_type_shape")
    if a and b and a != b:
        return f"{a}->{b}"
    return a or b


def profile(session: Session, feeds: dict, *, iterations: int, warmup: int) -> EngineProfile:
    """A second session with the profiler on: `warmup` + `iterations` runs on `feeds` (fewer when the profiler's
    event limit says so), then the trace read back and the per-node times taken from the measured runs only."""
    where = tempfile.mkdtemp(prefix="edge-runtime-ops-")
    try:
        impl = ProfilingBackend(session.model, session.options, os.path.join(where, "profile"))
        placed = impl.assignment()
        per_run = (sum(len(n) for _, n in placed) if placed else 200) + 2  # nodes (fewer after fusion) + 2 run events
        runs, warm = fit_runs(MAX_EVENTS // per_run, iterations, warmup)
        with Session(session.model, impl, session.backend, session.options) as profiled:
            profiled.bind(feeds)
            m = measure(profiled.runner(), iterations=runs, warmup=warm)
            path = impl.end_profiling()
        events = _read_trace(path)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    asked = (session.backend.requested_device or "cpu").lower()
    target = short(PROVIDERS.get(asked, "CPUExecutionProvider"))  # the one asked for: a fallback is "not delegated"
    rows, engine_us = _rows(events, len(m.samples_ns))
    partitions, fallback, notes = _placement(placed, rows, target)
    rows, subgraph_notes = _subgraphs(rows, placed)
    notes += subgraph_notes
    copies = Counted.of([r.type for r in rows if r.type.startswith(COPY_OPS)])
    if target != "CPU" and not copies.count and any(p.where == target for p in partitions):
        notes.append(
            f"copies 0: onnxruntime put no Memcpy node between {target} and the CPU provider (it works in host memory "
            "here, so each subgraph reads and writes the CPU's tensors in place)"
        )
    notes.append(
        "ONNX Runtime's profiler adds about 7 us per node per run: its per-op times are inflated, the shares are "
        "what to read; the total with profiling off is measured on a separate session"
    )
    if placed:
        notes.append(
            f"partitions count the {sum(len(n) for _, n in placed)} ops as onnxruntime placed them, before its "
            f"fusions and constant folding; the table lists the {len(rows)} nodes that ran"
        )
    if runs < iterations:
        notes.append(f"{runs} profiled runs, not {iterations}: the trace is kept under {MAX_EVENTS:,} events")
    if warm < warmup:
        notes.append(
            f"{warm} warm-up runs on the profiled session, not {warmup}: the profiler records warm-up runs too and "
            f"the trace is kept under {MAX_EVENTS:,} events (the session timed with profiling off had all {warmup})"
        )
    return EngineProfile(
        rows=tuple(rows),
        partitions=partitions,
        fallback=fallback,
        copies=copies,
        profiled_us=float(m.samples_ns.mean()) / 1e3 if len(m.samples_ns) else None,
        profiled_p50_us=median_us(m.samples_ns),
        engine_us=engine_us,
        runs=len(m.samples_ns),
        time_source=PROFILER,
        target=target,
        notes=tuple(notes),
    )


def fit_runs(budget: int, iterations: int, warmup: int) -> tuple[int, int]:
    """(measured runs, warm-up runs) of the profiled session within `budget` runs of trace: the profiler records
    warm-up runs as well, and stops recording at its event cap (the measured runs would then go unrecorded and the
    times be the warm-up's). The warm-up takes at most half the budget, the measured runs the rest; at least one
    measured run, always."""
    runs = max(1, min(iterations, budget - min(warmup, budget // 2)))
    return runs, max(0, min(warmup, budget - runs))


def _read_trace(path: str) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            events = json.load(f)
    except (OSError, ValueError) as err:
        raise UserError(f"onnxruntime's profile {path!r} could not be read: {err}") from err
    except MemoryError:
        size = os.path.getsize(path) if os.path.exists(path) else 0
        raise UserError(
            f"onnxruntime's profile ({size / 1e6:.0f} MB) does not fit in memory",
            hint="fewer --iterations and --warmup",
        ) from None
    if isinstance(events, dict):  # the object form of the format, should a later ORT write it
        events = events.get("traceEvents", [])
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def _rows(events: list[dict], runs: int) -> tuple[list[OpRow], float | None]:
    """One row per node from the last `runs` model_run events on (warm-up excluded); and model_run's mean."""
    model_runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                        key=lambda e: e["ts"])[-runs:]  # fmt: skip
    if not model_runs:
        return [], None
    start = model_runs[0]["ts"]
    per_node: dict[str, list[int]] = {}
    args_of: dict[str, dict] = {}
    for e in events:
        name = e.get("name", "")
        if e.get("cat") != "Node" or not name.endswith("_kernel_time") or e.get("ts", -1) < start:
            continue
        node = name.removesuffix("_kernel_time")
        per_node.setdefault(node, []).append(int(e.get("dur", 0)))
        args_of.setdefault(node, e.get("args") or {})
    rows = []
    n = len(model_runs)
    for node, durs in per_node.items():  # first seen, first run: the order the executor ran them
        args = args_of[node]
        arr = np.sort(np.asarray(durs, dtype=np.int64))
        rows.append(
            OpRow(
                name=node,
                type=str(args.get("op_name", "?")),
                where=short(str(args.get("provider", "?"))),
                kernel=None,
                precision=precision_of(args),
                mean_us=round(float(arr.sum()) / n, 3),
                p99_us=float(nearest_rank(arr, 99.0)),
                share=None,
                status=EXECUTED,
            )
        )
    return rows, round(float(np.mean([e["dur"] for e in model_runs])), 3)


def _subgraphs(rows: list[OpRow], placed) -> tuple[list[OpRow], list[str]]:
    """Each compiling provider's fused node named as the subgraph it is, with how many ops it holds (from the graph
    assignment: the provider's k-th subgraph is the node whose op_name ends in _k); and a note saying so."""
    counts: dict[str, list[int]] = {}
    for provider, nodes in placed or []:
        counts.setdefault(short(provider), []).append(len(nodes))
    out, fused = [], []
    for r in rows:
        head, _, k = r.type.rpartition("_")
        if r.where == "CPU" or not head.startswith(r.where + "ExecutionProvider_") or not k.isdigit():
            out.append(r)
            continue
        sizes = counts.get(r.where, [])
        n = sizes[int(k)] if int(k) < len(sizes) else None
        held = "subgraph" if n is None else f"subgraph of {n} op{'s' if n != 1 else ''}"
        out.append(replace(r, name=f"{r.where} subgraph {k}", type=held))
        fused.append((r.where, r.type))
    notes = [
        f"each {where} subgraph is one node to onnxruntime's profiler: its time covers every op it holds, none "
        f"alone (the profiler's names: {', '.join(t for w, t in fused if w == where)})"
        for where in dict.fromkeys(w for w, _ in fused)
    ]
    return out, notes


def _placement(placed, rows: list[OpRow], target: str) -> tuple[tuple[Partition, ...], Counted, list[str]]:
    """Partitions (the CPU provider's one-node subgraphs as one), what fell back to CPU when another provider was
    asked, and a note where the placement came from the trace."""
    notes: list[str] = []
    if placed is None:
        notes.append("placement from the profiler's trace (this onnxruntime cannot list its graph assignment)")
        placed = [(r.where + "ExecutionProvider", [(r.name, r.type)]) for r in rows]
    partitions: list[Partition] = []
    merged: dict[str, list[str]] = {}
    for provider, nodes in placed:
        ep = short(provider)
        types = [t for _, t in nodes]
        if ep == "CPU":
            merged.setdefault(ep, []).extend(types)
        else:
            partitions.append(_partition(ep, types))
    partitions += [_partition(ep, types) for ep, types in merged.items()]
    fallback = Counted.of(merged.get("CPU", [])) if target != "CPU" else Counted()
    return tuple(partitions), fallback, notes


def _partition(where: str, types: list[str]) -> Partition:
    c = Counted.of(types)
    return Partition(where, c.count, c.types)
