"""LiteRT's per-op placement (issue 29): which ops of a .tflite model the delegate a run uses took (XNNPACK by
default; an external delegate with its options, as the tflite backend takes them), in how many partitions, and which
it left on LiteRT's builtin CPU kernels (the fallback).

How: the run's own interpreter, once allocated, holds the model's ops first, then one DELEGATE node per delegated
partition (LiteRT appends a node for each partition it replaces; XNNPACK is applied lazily, at allocation). The ops a
partition absorbed are found by walking back from its node's outputs through their producers to its inputs
(partitions are convex, so this is exact). Ops no DELEGATE node absorbed ran on the CPU.

Placement only: LiteRT's Python package exposes no op profiler (the interpreter has no profiler methods, and no
benchmark binary ships), so no op has a time here: mean_us, p99_us and share stay None, and the report says so.
Read once after loading, from the session itself: nothing of it enters a timed loop, and it never changes the session.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping

from edge_runtime.errors import UserError

ENGINE = "tflite"
TIME_SOURCE = "placement only"
CPU = "CPU"
NO_PROFILER = (
    "LiteRT's Python package exposes no op profiler: placement only, no per-op time (mean_us, p99_us and share are "
    "empty); the whole inference can still be timed"
)
# LiteRT's names for tensor types, as the interpreter's dtypes give them; anything else keeps numpy's name.
_PRECISION = {"float32": "fp32", "float16": "fp16", "int8": "int8", "uint8": "uint8", "int16": "int16"}


def ops_report(
    model: str | os.PathLike[str],
    *,
    delegate: str | None = None,
    delegate_options: Mapping[str, str] | None = None,
    options: Mapping[str, str] | None = None,
    threads: int | None = None,
    fallback: bool = False,
    sandbox: bool = True,
) -> dict:
    """Load `model` on the tflite backend as a run would (same delegate, options, fallback) and report its placement.

    A delegate that cannot be used raises DeviceError, unless `fallback`: then the report is the CPU placement the
    run falls back to, and a note says why.
    """
    from edge_runtime.runtime.load import load

    with load(
        model,
        backend=ENGINE,
        delegate=delegate,
        threads=threads,
        delegate_options=delegate_options,
        options=options,
        fallback=fallback,
        sandbox=sandbox,
    ) as session:
        got = placement(session)
        if session.backend.fallback:  # `edge-runtime ops` says it for every engine (profile.build_report)
            got["notes"].append(f"fell back: {session.backend.fallback_reason}")
        return got


def placement(session) -> dict:
    """The placement of a loaded tflite Session's ops: a plain dict (engine, ops, partitions, fallback, copies,
    time_source, notes, backend, verdict) for edge_runtime.ops' report. The partitions are every part of the graph,
    as ONNX Runtime's are: one per DELEGATE node, then the ops left on the CPU as one."""
    if session.backend.name != ENGINE:
        raise UserError(f"LiteRT placement needs a tflite session, not {session.backend.name!r}")
    # The backend's interpreter is the one the run invokes: the placement read is the run's, not a re-creation's.
    interp = session._impl._interp
    if interp is None:
        raise UserError(f"session for {session.model.path.name!r} is closed", hint="load the model again")
    model_ops, nodes = split_nodes(interp._get_ops_details())
    label = delegate_label(session.backend)
    where: dict[int, tuple[str, str]] = {}  # op index -> (where, kernel)
    partitions = []
    for k, node in enumerate(nodes, 1):
        taken = absorbed(model_ops, node)
        for i in taken:
            where[i] = (label or "delegate", f"partition {k} (DELEGATE node {node['index']})")
        types = Counter(model_ops[i]["op_name"] for i in sorted(taken))
        partitions.append({"where": label or "delegate", "ops": len(taken), "op_types": _sorted_counts(types)})
    requested = label is not None
    names = _tensor_names(interp)
    ops = []
    for op in model_ops:
        place, kernel = where.get(op["index"], (CPU, "builtin"))
        status = "delegated" if place != CPU else ("fallback" if requested else "cpu")
        ops.append(
            {
                "name": _op_name(op, names),
                "type": op["op_name"],
                "where": place,
                "kernel": kernel,
                "precision": precision(interp, op),
                "mean_us": None,
                "p99_us": None,
                "share": None,
                "status": status,
            }
        )
    on_cpu = Counter(r["type"] for r in ops if r["where"] == CPU)
    if on_cpu:
        partitions.append({"where": CPU, "ops": sum(on_cpu.values()), "op_types": _sorted_counts(on_cpu)})
    fell_back = Counter(r["type"] for r in ops if r["status"] == "fallback")
    return {
        "engine": ENGINE,
        "ops": ops,
        "partitions": partitions,
        "fallback": {"count": sum(fell_back.values()), "types": _sorted_counts(fell_back)},
        "copies": copies(session.backend),
        "time_source": TIME_SOURCE,
        "notes": notes(session, interp, label, len(model_ops), fell_back),
        "backend": session.backend.to_dict(),
        "verdict": verdict(len(model_ops), sum(1 for r in ops if r["status"] == "delegated")),
    }


def split_nodes(details: list[dict]) -> tuple[list[dict], list[dict]]:
    """(the model's ops, the DELEGATE nodes): LiteRT appends one node per delegated partition after the model's own
    (Subgraph::ReplaceNodeSubsetsWithDelegateKernels adds them with AddNodeWithParameters), and keeps the replaced
    ops in the node list, out of the execution plan. The model's ops are the ones before the first DELEGATE node."""
    first = next((i for i, d in enumerate(details) if d["op_name"] == "DELEGATE"), len(details))
    return details[:first], details[first:]


def absorbed(model_ops: list[dict], node: dict) -> set[int]:
    """Indices of the model ops one DELEGATE node replaced: producers walked back from its outputs, stopping at its
    inputs (tensors from outside the partition, constants included)."""
    producer = {int(t): op["index"] for op in model_ops for t in op["outputs"]}
    stop = {int(t) for t in node["inputs"]}
    seen: set[int] = set()
    stack = [int(t) for t in node["outputs"]]
    while stack:
        t = stack.pop()
        if t in stop or t not in producer or producer[t] in seen:
            continue
        seen.add(producer[t])
        stack.extend(int(x) for x in model_ops[producer[t]]["inputs"] if int(x) >= 0)
    return seen


def delegate_label(backend) -> str | None:
    """Who the DELEGATE nodes belong to (LiteRT names them all DELEGATE): the external delegate the run loaded (its
    file name), else XNNPACK when the backend applies LiteRT's default delegates, else None (no delegate)."""
    if backend.delegate:
        return os.path.basename(backend.delegate)
    if backend.details.get("xnnpack", True):
        return "XNNPACK"
    return None


def precision(interp, op: dict) -> str:
    """The op's tensor type, from its first input and first output: "int8", "fp32"..., or "fp32->int8" where they
    differ (QUANTIZE, DEQUANTIZE)."""
    first_in = next((int(t) for t in op["inputs"] if int(t) >= 0), None)
    first_out = next((int(t) for t in op["outputs"] if int(t) >= 0), None)
    kinds = [_dtype(interp, t) for t in (first_in, first_out) if t is not None]
    if not kinds:
        return "unknown"
    return kinds[0] if kinds[0] == kinds[-1] else f"{kinds[0]}->{kinds[-1]}"


def _dtype(interp, tensor: int) -> str:
    try:
        name = interp._get_tensor_details(tensor, 0)["dtype"].__name__
    except (ValueError, KeyError, AttributeError):  # a tensor without a name or type: LiteRT has no details for it
        return "unknown"
    return _PRECISION.get(name, name)


def _tensor_names(interp) -> dict[int, str]:
    names = {}
    for d in interp.get_tensor_details():
        names[int(d["index"])] = d["name"]
    return names


def _op_name(op: dict, names: dict[int, str]) -> str:
    """An op is named by its first output tensor, as LiteRT's own op profiler names it; unnamed: TYPE#index."""
    outs = [int(t) for t in op["outputs"] if int(t) >= 0]
    return (names.get(outs[0]) if outs else None) or f"{op['op_name']}#{op['index']}"


def copies(backend) -> dict:
    """LiteRT inserts no copy ops. XNNPACK computes on the interpreter's own CPU tensors (nothing to copy); an
    external delegate moves data inside its DELEGATE nodes, which LiteRT does not show (count unknown: None)."""
    if backend.delegate:
        return {"count": None, "types": {}}
    return {"count": 0, "types": {}}


def verdict(n_ops: int, n_delegated: int) -> str:
    if n_delegated == 0:
        return "not delegated"
    return "fully delegated" if n_delegated == n_ops else "partial"


def notes(session, interp, label: str | None, n_ops: int, fell_back: Counter) -> list[str]:
    b = session.backend
    out = [NO_PROFILER, f"{b.details.get('library', 'tflite')} {b.version}"]
    if label is None:
        out.append("no delegate (xnnpack=0): every op runs on LiteRT's builtin CPU kernels")
    elif fell_back:
        out.append(
            f"{label} left {sum(fell_back.values())} of {n_ops} op(s) on LiteRT's builtin CPU kernels: "
            + ", ".join(f"{t} x{n}" for t, n in _sorted_counts(fell_back).items())
        )
    if b.delegate and b.details.get("xnnpack", True):
        # Interpreter::ApplyLazyDelegateProviders: the default XNNPACK is applied at allocation after an explicit
        # delegate, unless that one took the whole model; its nodes look the same.
        out.append(
            f"every DELEGATE node is counted as {label}'s, but LiteRT names them all DELEGATE and applies its default "
            "XNNPACK to what an external delegate leaves: a partition may be XNNPACK's (xnnpack=0 rules it out)"
        )
    if b.delegate:
        out.append(f"{label} moves data inside its DELEGATE nodes: copies not visible (count unknown)")
    subgraphs = interp._interpreter.NumSubgraphs() if hasattr(interp._interpreter, "NumSubgraphs") else 1
    if subgraphs > 1:
        out.append(f"the main subgraph's ops only: {subgraphs - 1} other subgraph(s) (control-flow bodies) not read")
    return out


def _sorted_counts(c: Counter) -> dict[str, int]:
    """Most frequent first, then by name: the same order every time."""
    return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))


def check_options(options: dict[str, str] | None) -> None:
    """`edge-runtime ops`' engine interface: no LiteRT option profiles the timed session (there is no op profiler)."""


def profile(session, feeds: dict, *, iterations: int, warmup: int):
    """`edge-runtime ops`' engine interface: the placement of the run's own interpreter as an EngineProfile, with
    no per-op times (LiteRT's Python package has no op profiler: "placement only", and the notes say so)."""
    from edge_runtime.ops.record import PLACEMENT_ONLY, Counted, EngineProfile, OpRow, Partition

    got = placement(session)
    copied = got["copies"]
    partitions = tuple(Partition(p["where"], p["ops"], p["op_types"]) for p in got["partitions"])
    # The target is the delegate the run asked for: after a fallback the backend holds none, and the ops ran on
    # what it fell back to (XNNPACK, the CPU), so every op fell back and the verdict says "not delegated".
    asked = session.options.delegate
    target = os.path.basename(asked) if asked else delegate_label(session.backend) or CPU
    fallback = Counted(got["fallback"]["count"], got["fallback"]["types"])
    if session.backend.fallback and not any(p.where == target for p in partitions):
        fallback = Counted(len(got["ops"]), dict(Counter(r["type"] for r in got["ops"])))
    return EngineProfile(
        rows=tuple(OpRow(**r) for r in got["ops"]),
        partitions=partitions,
        fallback=fallback,
        copies=Counted(copied.get("count"), copied.get("types") or {}),  # None: the count is unknown
        profiled_us=None,
        engine_us=None,
        runs=0,
        time_source=PLACEMENT_ONLY,
        target=target,
        notes=tuple(got["notes"]),
    )
