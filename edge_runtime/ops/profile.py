"""`profile_model()`: the whole of `edge-runtime ops` below the command line; `profile_loaded()`: its second half, for
a caller that has loaded, bound and timed the session itself (`bench --ops`, measure/ops_section.py).

First the timed session (profiling off, `load()` as `run` and `bench` do it: crash check, pinning, the truth about
what runs), measured by bench's loop; then the engine's module profiles a second session of the same model, options
and inputs; then the rows get their shares, the overhead row and the verdict (verdict.py).
Never: a profiler on the timed session, or the timed loop while a profiled session exists.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping

from edge_runtime.errors import UserError
from edge_runtime.ops.record import OpsReport

# backend name -> the module that profiles it: `check_options(options)` (refuses what would profile the timed
# session) and `profile(session, feeds, *, iterations, warmup) -> EngineProfile`
ENGINES = {
    "openvino": "edge_runtime.ops.openvino_ops",
    "onnxruntime": "edge_runtime.ops.onnxruntime_ops",
    "tflite": "edge_runtime.ops.litert_ops",  # placement only: LiteRT's Python package has no op profiler
}
# backends whose module is still to come: what to say
NOT_YET: dict[str, str] = {}
# engines with no per-op times, so nothing for --chrome-trace: why
NO_TRACE = {"tflite": "LiteRT's Python package has no op profiler"}
DEFAULT_ITERATIONS = 500
DEFAULT_WARMUP = 50


def engine_for(model: str | os.PathLike[str], backend: str | None) -> str:
    """The backend that would run `model` (checked to be a readable model file), refused in one line when `ops` has
    no module for it."""
    from edge_runtime.runtime import backends
    from edge_runtime.runtime.model import DEFAULT_BACKEND, inspect_model

    name = backend or DEFAULT_BACKEND[inspect_model(model).format]
    if name in NOT_YET:
        raise UserError(f"{NOT_YET[name]} (edge-runtime ops reads {' and '.join(ENGINES)} models)")
    if name not in ENGINES:
        backends.get(name)  # an unknown name: the registry's one line, with the choices
        raise UserError(f"backend {name!r}: edge-runtime ops has no profiler for it", hint=f"use {', '.join(ENGINES)}")
    return name


def profile_model(
    model: str | os.PathLike[str],
    *,
    iterations: int = DEFAULT_ITERATIONS,
    warmup: int = DEFAULT_WARMUP,
    seed: int = 0,
    feeds: Callable[[object], Mapping] | None = None,
    **load_kwargs,
) -> OpsReport:
    """Measure `model` with profiling off, then profile it, and return the report. `load_kwargs` are `load()`'s
    (backend, device, delegate, threads, cpus, options, ...); `feeds(session)` gives the inputs (seeded random
    ones by default)."""
    from edge_runtime.measure.loop import measure
    from edge_runtime.measure.stats import summarize
    from edge_runtime.runtime.feeds import random_feeds
    from edge_runtime.runtime.load import load

    name = engine_for(model, load_kwargs.get("backend"))
    importlib.import_module(ENGINES[name]).check_options(load_kwargs.get("options"))
    session = load(model, **{**load_kwargs, "backend": name})
    with session:
        inputs = dict(feeds(session)) if feeds is not None else random_feeds(session.inputs, seed)[0]
        session.bind(inputs)
        timed = measure(session.runner(), iterations=iterations, warmup=warmup)
        stats = summarize(timed.samples_ns)
        total = {k: round(stats[k], 3) for k in ("p50", "mean", "p99")}
        return profile_loaded(session, inputs, total, iterations=iterations, warmup=warmup)


def profile_loaded(session, inputs: Mapping, total_us: Mapping, *, iterations: int, warmup: int) -> OpsReport:
    """The report for a session the caller has loaded, bound to `inputs` and timed with profiling off (`total_us`:
    its {p50, mean, p99}): the engine's module profiles a second session of the same model, options and inputs
    (`bench --ops` calls this after its timed loop has ended). The caller's session is never profiled."""
    engine = importlib.import_module(ENGINES[session.backend.name])
    profile = engine.profile(session, dict(inputs), iterations=iterations, warmup=warmup)
    model_doc = {"path": str(session.model.path), "sha256": session.model.sha256, "format": session.model.format}
    return build_report(profile, session.backend, model_doc, dict(total_us))


def build_report(profile, backend, model_doc: dict, total: dict) -> OpsReport:
    """The report from an engine's profile: shares, the overhead row, the verdict, the notes."""
    from edge_runtime.ops.verdict import coverage_note, finish, shares, verdict

    rows, named, overhead = finish(profile)
    notes = list(profile.notes)
    said = coverage_note(named, profile.profiled_us)
    if said:
        notes.append(said)
    if overhead is not None and overhead < 0:
        notes.append("the ops' times add up to more than the measured run (counter rounding): the overhead is negative")
    pct = report_pct(profile.profiled_p50_us, total.get("p50"))
    if pct is not None and abs(pct) > 10:
        notes.append(
            f"the profiled run's p50 is {pct:+.0f}% off the p50 with profiling off: the per-op times are of a run "
            "that differs from the timed one (the profiler's own cost, or a busy machine); read the shares"
        )
    if backend.fallback:
        notes.append(f"fell back to CPU: {backend.fallback_reason}")
    delegated, fallback = shares(profile, rows)
    return OpsReport(
        engine={k: getattr(backend, k) for k in ("name", "version", "device", "delegate", "fallback")},
        model=model_doc,
        device=backend.device,
        runs=profile.runs,
        ops=rows,
        partitions=profile.partitions,
        fallback=profile.fallback,
        copies=profile.copies,
        total_us=total,
        profiled_us=None if profile.profiled_us is None else round(profile.profiled_us, 3),
        named_us=None if named is None else round(named, 3),
        overhead_us=None if overhead is None else round(overhead, 3),
        engine_us=profile.engine_us,
        profiled_p50_us=profile.profiled_p50_us,
        time_source=profile.time_source,
        verdict=verdict(profile, rows),
        notes=tuple(notes),
        target=profile.target,
        delegated_share=delegated,
        fallback_share=fallback,
    )


def report_pct(profiled_p50_us: float | None, p50_us: float | None) -> float | None:
    """How much slower (+) the profiled run's median was than the timed one's, in percent."""
    if profiled_p50_us is None or not p50_us:
        return None
    return 100.0 * (profiled_p50_us / p50_us - 1.0)
