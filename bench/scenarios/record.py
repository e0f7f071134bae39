"""A host-side run (bench/scenarios/engine.py) as a result record of the same schema a board writes
(`edge-runtime/bench/1`), built as the same typed record (`edge_runtime.results.BenchResult`) from the same statistics,
histogram, timeline and scenario code, so a server's numbers and a board's sit in one store, one comparison and one
report. What only a client run has goes in its own sections: `errors` (failed queries by kind, and their share of the
queries sent), `failed_queries` (what the SLO's error budget counts), `server` (the server's own time split, its
metrics, the network, the client's own CPU and whether it was the limit). The sections only a board measures say so:
thermal and power `available: false`, no pinning.

What the target supplies (its model, its backend, where it runs, the call it times) comes in a `HostRunContext`."""

from __future__ import annotations

import signal
import socket
import time
from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from bench.scenarios.engine import END_GRACE_S, NOT_SENT, HostRun
from edge_runtime.measure.scenario import saturation_text, scenario_figures
from edge_runtime.measure.stats import (
    PERCENTILE_METHOD,
    histogram_us,
    jitter,
    latency_timeline,
    stability,
    summarize,
)
from edge_runtime.results import (
    Aborted,
    BackendSection,
    BenchResult,
    Config,
    Environment,
    Errors,
    Jitter,
    Latency,
    ModelInfo,
    Quality,
    ServerSection,
)


@dataclass(frozen=True)
class HostRunContext:
    """What a server target says about a run it timed from the client: the model it serves, its backend section,
    the board's name in the record (the server, its version and address), the call timed, and the client packages
    whose versions the record lists."""

    model: ModelInfo
    backend: BackendSection
    board: str
    timed_call: str
    packages: tuple[str, ...] = ()


def served_model(url: str, request_model: str | None, served: str, name: str, versions) -> ModelInfo:
    """The record's model section of a server's run: the target's URL, and the sha256 of the campaign's model file when
    the request names one other than the served name (hashed as a board hashes it: an IR's .xml and .bin, so the
    run pairs with a board run of that file); the server's name and versions for it."""
    sha = None
    if request_model and request_model != served:
        from edge_runtime.errors import UserError
        from edge_runtime.runtime.model import model_sha256

        try:
            sha = model_sha256(request_model)
        except (OSError, UserError):
            sha = None
    # precision null: a server does not say it. A server that lists no versions says [] (the record said null before).
    return ModelInfo(url, sha, "kserve", None, server_name=name, server_versions=tuple(versions or ()))  # type: ignore[arg-type]


def host_result(
    request,
    run: HostRun,
    context: HostRunContext,
    *,
    started_at: float | None = None,
    server: ServerSection | None = None,
) -> BenchResult:
    """The typed record of a host-timed run (`started_at`, seconds since the epoch: when its first query went out;
    default now)."""
    kind = request.scenario or "single-stream"
    latency, jitter_us, unstable, warnings = _latency(run)
    errors = _errors(run)
    warnings += _warnings(run, errors)
    if server is not None and server.client:  # the client's own cost: client-bound or not (scenarios/client.py)
        from bench.scenarios.client import warnings_of

        warnings += warnings_of(dict(server.client))
    scenario = _scenario(request, run, kind, warnings)
    answered = int(run.ok.sum())
    lat_ns = run.latency_ns
    return BenchResult(
        model=context.model,
        backend=context.backend,
        config=_config(request, run, context),
        latency_us=latency,
        jitter_us=jitter_us,
        throughput_ips=round(answered * (request.samples_per_query or 1) / run.wall_s, 2) if run.wall_s > 0 else None,
        quality=Quality(None, PERCENTILE_METHOD, unstable, tuple(warnings)),
        environment=_environment(context),
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if started_at is None else started_at)),
        wall_s=run.wall_s,
        aborted=_aborted(run),
        scenario=scenario,
        timeline_us=_timeline(run),
        errors=errors,
        failed_queries=errors.failed,
        server=server if server is not None else ServerSection({}, {}, {}),
        histogram_us=tuple(map(tuple, histogram_us(lat_ns))) if len(lat_ns) else (),
    )


def _latency(run: HostRun) -> tuple[Latency, Jitter, bool | None, list[str]]:
    """The answered queries' latency, its jitter, whether it was stable, and the warnings that says."""
    lat_ns = run.latency_ns
    if not len(lat_ns):
        return Latency(count=0), Jitter(), None, ["no query was answered: no latency to report"]
    lat = summarize(lat_ns)
    unstable, why = stability(lat_ns, lat)
    return Latency(**lat), Jitter(**jitter(lat)), unstable, list(why)


def _errors(run: HostRun) -> Errors:
    """The failed queries by kind: a query the run's time was over for did not fail (it is the scenario's `not_sent`,
    beside `saturated`), and the error budget charges only the queries sent."""
    not_sent = run.kinds.get(NOT_SENT, 0)
    kinds = Counter({k: v for k, v in run.kinds.items() if k != NOT_SENT})
    n, failed = len(run.errors), run.failed - not_sent
    return Errors(failed, round(failed / (n - not_sent), 6) if n > not_sent else 0.0, dict(kinds), dict(run.examples))


def _warnings(run: HostRun, errors: Errors) -> list[str]:
    out = []
    if errors.failed:
        said = ", ".join(f"{k} x{v}" for k, v in Counter(errors.kinds).most_common(4))
        sent = len(run.errors) - run.kinds.get(NOT_SENT, 0)
        out.append(f"{errors.failed:,} of {sent:,} queries sent failed ({said})")
    if run.stopped:
        out.append(f"interrupted: partial result of {len(run.errors):,} queries")
    if run.cut_off:  # issue 24: a target that stops answering cannot hold a run past its time and the grace
        out.append(f"ended by its deadline (its time + {END_GRACE_S:g} s): {run.cut_off:,} queries still out, "
                   "counted as 'no answer'")  # fmt: skip
    return out


def _timeline(run: HostRun) -> tuple:
    """The latency timeline of the answered queries, in up to 50 chunks by the time they came back."""
    answered = int(run.ok.sum())
    order = np.argsort(run.finished_ns[run.ok], kind="stable")
    done_at = (run.finished_ns[run.ok][order] / 1e9) if answered else np.empty(0)
    steps = np.linspace(0, answered, min(answered, 50) + 1).astype(int)[1:] if answered else []
    m = SimpleNamespace(samples_ns=run.latency_ns, wall_s=run.wall_s,
                        chunks=[(0, 0.0)] + [(int(i), float(done_at[i - 1])) for i in steps])  # fmt: skip
    return tuple(latency_timeline(m) or ())


def _aborted(run: HostRun) -> Aborted | None:
    if not run.stopped:
        return None
    sig = signal.Signals(run.interrupted).name if run.interrupted else None
    return Aborted("interrupted", f"interrupted by {sig}" if sig else "stopped", sig, round(run.wall_s, 3), True)


def _environment(context: HostRunContext) -> Environment:
    """This client's environment, the server named as the board, and where the latency was measured."""
    from edge_runtime import __version__
    from edge_runtime.system import SystemRoot
    from edge_runtime.system.environment import environment, packages

    env = environment(SystemRoot("/"), None, {"edge-runtime": __version__, "numpy": np.__version__,
                                               **packages(list(context.packages))})  # fmt: skip
    env["board"] = context.board
    env["measured_on"] = {"client": socket.gethostname(), "note": "latency as the client sees it, network included"}
    return Environment.from_dict(env)


def _config(request, run: HostRun, context: HostRunContext) -> Config:
    return Config(threads=run.concurrency, cpus=None, rt_priority=None, mlock=False, warmup=run.warmup,
                  iterations=request.iterations, duration_s=request.duration_s, stress=(),
                  timed_call=context.timed_call)  # fmt: skip


def _scenario(request, run: HostRun, kind: str, warnings: list[str]) -> dict:
    """The record's scenario section, from the board's function (`scenario_figures`, over the queries sent; its end
    the run's unless stopped). A saturated run adds its warning."""
    sent = run.started_ns >= 0
    scenario = scenario_figures(kind, request, run.intended_ns[sent], run.started_ns[sent], run.finished_ns[sent],
                                from_intended=run.from_intended, wall_s=run.wall_s,
                                end_s=None if run.stopped else request.duration_s, scheduled=len(run.errors),
                                samples_per_query=request.samples_per_query or 1, ok=run.ok[sent],
                                concurrency=run.concurrency)  # fmt: skip
    if run.cut_off:
        scenario.update(ended_by="deadline", cut_off=run.cut_off)
    saturated = saturation_text(scenario)
    if saturated:
        warnings.append(saturated)
    return scenario
