"""`bench --ops` (issue 29): a bench result's `ops` section, from edge_runtime/ops/, before and after the timed loop.

- `check(request)`: before anything loads, a backend `ops` has no profiler for, or an option its module refuses
  (OpenVINO's PERF_COUNT would profile the timed model too), is refused in one line;
- `profile_after(...)`: after the timed loop has ended and the sampler stopped, with the timed session still open
  (the same process, pinned to the same CPUs, under the same scheduling and co-runners), the engine's module
  profiles a second session of the same model, options and bound inputs (batch included); the report's total is
  the bench's own timed latency, so its overhead row and the profiler's cost are against the numbers the result
  shows. A failure is a one-line reason in the section (and a quality warning), never an exception: the timed
  result is not lost to the profiler.

Never: run anything of this inside the timed loop, or import edge_runtime.ops when the request does not ask for ops
(tests/measure/test_bench_ops.py checks both: the loop's calls are the same with ops on and off, and `bench` without
--ops imports no edge_runtime.ops module).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

import numpy as np

from edge_runtime.errors import EdgeRuntimeError

MAX_RUNS = 500  # profiled runs at most: per-op shares settle long before, and a long run is not profiled for as long
PLACEMENT_ONLY = ("tflite",)  # engines whose module reads placement and runs nothing (no op profiler)
WARMUP = 10  # the profiled session's warm-up: its first calls (allocation, kernel selection) are not in its times


def check(request) -> None:
    """Refuse, in one line, what `ops` cannot profile: a backend with no profiler module, an option it refuses."""
    from edge_runtime.ops.profile import ENGINES, engine_for

    name = engine_for(request.model, request.backend)
    importlib.import_module(ENGINES[name]).check_options(dict(request.options))


def profile_after(request, session, inputs: Mapping[str, np.ndarray], m, stop, say: Callable[[str], None]) -> dict:
    """The `ops` section for `session`, bound to `inputs` and timed as `m` (a Measurement) with profiling off. A run
    stopped early (`stop` requested: interrupted; else the thermal limit) is not profiled: a partial run's total is
    not one to split, and a hot board is not to be kept busy."""
    from edge_runtime.measure.schedule import OPEN_LOOP

    stopped = None
    if m.stopped:
        stopped = "interrupted" if stop is not None and stop.requested else "above the thermal limit"
    samples_ns = m.samples_ns
    scenario = request.scenario if request.scenario in OPEN_LOOP else None
    from edge_runtime.ops.record import SCHEMA

    if stopped:
        return {"schema": SCHEMA, "error": f"not profiled: the run was stopped ({stopped})"}
    if len(samples_ns) == 0:
        return {"schema": SCHEMA, "error": "not profiled: nothing was measured"}
    from edge_runtime.measure.stats import summarize
    from edge_runtime.ops.profile import profile_loaded

    runs = min(len(samples_ns), MAX_RUNS)
    if session.backend.name in PLACEMENT_ONLY:  # nothing runs: the placement is read from the timed interpreter
        say(f"reading ops' placement from the {session.backend.name} interpreter (after the timed loop)")
    else:
        say(f"profiling ops: {runs} runs of a second {session.backend.name} session (after the timed loop)")
    try:
        if scenario:
            # An open loop's latency is a query's (queueing, and samples_per_query inferences, included): the
            # profiled runs are single inferences back to back, so the total they are set against is a back-to-back
            # run of the timed session, profiling off, just before.
            from edge_runtime.measure.loop import measure

            samples_ns = measure(session.runner(), iterations=runs, warmup=min(WARMUP, runs)).samples_ns
        stats = summarize(samples_ns)
        total = {k: round(stats[k], 3) for k in ("p50", "mean", "p99")}
        report = profile_loaded(session, inputs, total, iterations=runs, warmup=min(WARMUP, runs))
    except KeyboardInterrupt as err:  # a signal while profiling: the timed result is whole, keep it and end
        from edge_runtime.system.process import signal_name

        signum = getattr(err, "signum", None) or 2
        if stop is not None:
            stop.request(signum)
        return {"schema": SCHEMA, "error": f"not profiled: interrupted by {signal_name(signum)} while profiling"}
    except EdgeRuntimeError as err:
        return {"schema": SCHEMA, "error": err.one_line()}
    except MemoryError:
        return {"schema": SCHEMA, "error": "out of memory while profiling: the timed result is whole"}
    except Exception as err:  # noqa: BLE001 - a profiler's failure (an engine's own exception) must not lose the run
        text = " ".join(str(err).split())[:300]
        return {"schema": SCHEMA, "error": f"{type(err).__name__}: {text}" if text else type(err).__name__}
    section = report.summary()
    if scenario:
        section["notes"].append(
            f"the {scenario} scenario's latency is a query's, queueing included: the profiler's cost is against "
            f"{runs} back-to-back runs of the timed session with profiling off, measured just before"
        )
    return section


def warning(section: Mapping | None) -> str | None:
    """The quality warning for a section whose profiling failed (a skipped one says so in the abort already)."""
    if not section or "error" not in section or str(section["error"]).startswith("not profiled:"):
        return None
    return f"ops not profiled: {section['error']}"
