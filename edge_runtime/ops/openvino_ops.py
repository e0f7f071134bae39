"""Per-op placement and time on OpenVINO, from its performance counters (PERF_COUNT), on a second compiled model.

Facts this rests on (research 29, section 1; the CPU plugin's Graph::GetPerfData and perf_count.h):
- PERF_COUNT is fixed when a model is compiled, so the profiled model is a second one, compiled with the session's
  own options (INFERENCE_PRECISION_HINT and every --option pass through) plus PERF_COUNT; the session that is timed
  never has it.
- Each op's `real_time` is a cumulative average since compile, shared by every request, that cannot be reset, and
  each run is truncated to whole microseconds before it is summed. The mean over the measured runs alone is two
  readings subtracted: (avg_b * n_b - avg_a * n_a) / N, warm-up excluded; the truncation error is at most
  (n_a + n_b) / N us per op. There is no per-run value: no per-op p99 ("n/a").
- NOT_RUN means: fused into the op listed before it (exec type "undef"), an in-place op (Reshape `unknown_*`,
  `reorder_*`), or an op that ran in under 1 us (truncated to 0).
- exec type = `<impl>_<isa>_<precision>`: the kernel, and its precision from the suffix (I8, bf16, f32...).
- Copies are Reorder (and Convert) nodes that run: layout changes and, under a bf16 hint, f32<->bf16 conversions,
  which the node's name shows (`input_f32_bf16_to_nchw`).
Never: enable PERF_COUNT on the session the caller times.
"""

from __future__ import annotations

from dataclasses import replace

from edge_runtime.measure.loop import measure
from edge_runtime.ops.record import (
    EXECUTED,
    FUSED,
    IN_PLACE,
    PROFILER,
    UNDER_1US,
    Counted,
    EngineProfile,
    OpRow,
    Partition,
    median_us,
)
from edge_runtime.runtime.backends.openvino_backend import OpenVinoBackend
from edge_runtime.runtime.session import Session

# exec type suffix (lower case) -> the precision words of every engine's rows
PRECISIONS = {
    "i8": "int8",
    "u8": "uint8",
    "f32": "fp32",
    "bf16": "bf16",
    "f16": "fp16",
    "i32": "int32",
    "i64": "int64",
    "i4": "int4",
    "u4": "uint4",
    "f8e4m3": "fp8",
    "f8e5m2": "fp8",
}
NOT_OPS = {"Parameter", "Result", "Constant"}  # the graph's ends and constants: listed by OpenVINO, not ops
COPY_TYPES = {"Reorder", "Convert"}


class PerfCountBackend(OpenVinoBackend):
    """The OpenVINO backend with PERF_COUNT on, and a way to read the counters."""

    def counters(self) -> list[tuple[str, str, str, bool, float]]:
        """(name, type, exec type, executed, cumulative average us) per node of the execution graph, in order."""
        out = []
        for p in self._request.get_profiling_info():
            executed = p.status == type(p).Status.EXECUTED
            out.append((p.node_name, p.node_type, p.exec_type, executed, p.real_time.total_seconds() * 1e6))
        return out

    def execution_devices(self) -> list[str] | None:
        """The compiled model's EXECUTION_DEVICES (what AUTO chose, what HETERO split over), None where unread."""
        try:
            return [str(d) for d in self._compiled.get_property("EXECUTION_DEVICES")]
        except Exception:  # noqa: BLE001 - an older plugin does not report it
            return None


def check_options(options: dict[str, str] | None) -> None:
    """PERF_COUNT is this module's to turn on, on the profiled model only: given by the user, it would profile the
    timed session too."""
    from edge_runtime.errors import UsageError

    if any(k.upper() == "PERF_COUNT" for k in options or {}):
        raise UsageError(
            "--option PERF_COUNT: edge-runtime ops (and bench --ops) turns OpenVINO's counters on itself, on a second "
            "compiled model (the timed one runs without them)"
        )


VIRTUAL = ("AUTO", "HETERO", "MULTI", "BATCH")  # devices that pick or split among others


def places(device: str, requested: str | None, executed: list[str] | None = None) -> tuple[str, str]:
    """(where the ops ran, where they were asked to run). `executed`: the compiled model's EXECUTION_DEVICES, read
    for a virtual device (AUTO, HETERO, MULTI), which picks or splits among others: where they ran is what it chose.
    The target: a plain device is itself (one that fell back to CPU keeps it, so the verdict says "not delegated");
    a virtual device whose candidates are CPU only ("HETERO:CPU") asked for no accelerator ("CPU"); one that could
    pick an accelerator ("AUTO", "HETERO:GPU,CPU") is where it ran when that is not the CPU, else itself, so all
    on CPU is "not delegated"."""
    asked = (requested or "CPU").upper()
    kind, _, candidates = asked.partition(":")
    if kind not in VIRTUAL:
        return device, asked
    ran = executed or ([device.split(":", 1)[1]] if device.startswith(kind + ":") else [device])
    where = ",".join(ran)
    names = [c.split("(")[0].split(".")[0].strip() for c in candidates.split(",") if c.strip()]
    if names and all(n == "CPU" for n in names):
        return where, "CPU"
    return where, where if any(d.split(".")[0] != "CPU" for d in ran) else asked


def precision_of(exec_type: str) -> str | None:
    """`brgconv_avx512_amx_I8` -> "int8"; `jit_avx512_bf16` -> "bf16"; "undef" -> None."""
    if not exec_type or exec_type == "undef" or "_" not in exec_type:
        return None
    suffix = exec_type.rsplit("_", 1)[1]
    return PRECISIONS.get(suffix.lower(), suffix)


def copy_kind(name: str, node_type: str) -> str:
    """What a Reorder converts, from its name: "Reorder f32->bf16", or "Reorder (layout)"."""
    words = [w.lower() for w in name.split("_")]
    seen: list[str] = []
    for w in words:
        if w in PRECISIONS and (not seen or seen[-1] != w):
            seen.append(w)
    if len(seen) >= 2:
        return f"{node_type} {seen[0]}->{seen[1]}"
    return f"{node_type} (layout)" if node_type == "Reorder" else node_type


def profile(session: Session, feeds: dict, *, iterations: int, warmup: int) -> EngineProfile:
    """Compile the session's model again with PERF_COUNT, run it `warmup` + `iterations` times on `feeds`, and
    read the counters just before and just after the measured runs."""
    options = replace(session.options, options={**session.options.options, "PERF_COUNT": "YES"})
    impl = PerfCountBackend(session.model, options)
    warmup = max(1, warmup)  # the first reading comes after at least one run
    readings: list[list] = []
    with Session(session.model, impl, session.backend, options) as profiled:
        profiled.bind(feeds)
        m = measure(
            profiled.runner(),
            iterations=iterations,
            warmup=warmup,
            on_start=lambda: readings.append(impl.counters()),
            on_end=lambda: readings.append(impl.counters()),
        )
        precision = impl.details.get("inference_precision")
        executed = impl.execution_devices()
    n_a = m.warmup_calls
    runs = len(m.samples_ns)
    device, target = places(session.backend.device, session.backend.requested_device, executed)
    rows = _rows(readings[0], readings[1], n_a, n_a + runs, runs, device)
    copies = Counted.of([copy_kind(r.name, r.type) for r in rows if r.type in COPY_TYPES and r.status != IN_PLACE])
    types: dict[str, int] = {}
    for r in rows:
        types[r.type] = types.get(r.type, 0) + 1
    notes = [
        "OpenVINO's PERF_COUNT keeps one running average per op, no per-run values: per-op p99 is n/a; each mean "
        f"covers the {runs} measured runs (two readings subtracted, {n_a} warm-up runs excluded), in whole "
        f"microseconds per run (error up to {(2 * n_a + runs) / runs:.2f} us per op)",
    ]
    asked = (session.backend.requested_device or "").upper()
    if asked.startswith("AUTO") and "," not in device:
        notes.append(f"{asked} ran the model on {device} (the compiled model's EXECUTION_DEVICES)")
    elif "," in device or asked.startswith("HETERO"):
        # Checked on OpenVINO 2026.0: a HETERO runtime model's nodes carry no affinity in their rt_info, and
        # PERF_COUNT names each node by its submodel ("subgraph0: conv1"), not by the submodel's device.
        notes.append(
            f"OpenVINO does not say which device ran each op of a {session.backend.requested_device} model: the "
            f"placement is the compiled model's EXECUTION_DEVICES ({device})"
        )
    if precision:
        notes.append(f"inference precision: {precision} (INFERENCE_PRECISION_HINT; --option sets it)")
    return EngineProfile(
        rows=tuple(rows),
        partitions=(Partition(device, len(rows), types),),
        fallback=Counted.of([r.type for r in rows]) if device != target else Counted(),  # all on CPU, or none
        copies=copies,
        profiled_us=float(m.samples_ns.mean()) / 1e3 if runs else None,
        profiled_p50_us=median_us(m.samples_ns),
        engine_us=None,
        runs=runs,
        time_source=PROFILER,
        target=target,
        notes=tuple(notes),
    )


def _rows(before: list, after: list, n_a: int, n_b: int, runs: int, device: str) -> list[OpRow]:
    """The rows from two readings of the counters (same nodes, same order: one compiled model)."""
    rows: list[OpRow] = []
    owner: str | None = None  # the last op that ran: what a fused node after it is part of
    avg_before = {name: avg for name, _t, _e, _x, avg in before}
    for name, node_type, exec_type, executed, avg in after:
        if node_type in NOT_OPS:
            continue
        kernel = None if exec_type == "undef" else exec_type
        precision = precision_of(exec_type)
        mean = max(0.0, (avg * n_b - avg_before.get(name, 0.0) * n_a) / runs) if runs else 0.0
        if executed:
            status, fused_into = EXECUTED, None
            owner = name
        elif exec_type == "undef":
            status, fused_into, mean = FUSED, owner, None
        elif exec_type.startswith(("unknown", "reorder_")):
            status, fused_into, mean = IN_PLACE, None, None
        else:
            status, fused_into, mean = UNDER_1US, None, 0.0
            owner = name
        rows.append(
            OpRow(
                name=name,
                type=node_type,
                where=device,
                kernel=kernel,
                precision=precision,
                mean_us=None if mean is None else round(mean, 3),
                p99_us=None,
                share=None,
                status=status,
                fused_into=fused_into,
            )
        )
    return rows
