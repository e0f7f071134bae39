"""A host-side run (bench/scenarios/engine.py) as a result record of the same schema a board writes
(`edge-runtime/bench/1`): the same statistics, histogram and timeline code, so a server's numbers and a board's sit in
one store, one comparison and one report. What only a client run has goes in its own sections: `errors` (failed
queries by kind, and their share of the queries sent), `failed_queries` (what the SLO's error budget counts), `server`
(the server's own time split and its metrics)."""

from __future__ import annotations

import signal
import socket
import time
from collections import Counter
from types import SimpleNamespace

import numpy as np

from bench.scenarios.engine import NOT_SENT
from edge_runtime.measure.scenario import saturation_text, scenario_figures
from edge_runtime.measure.stats import (
    PERCENTILE_METHOD,
    histogram_us,
    jitter,
    latency_timeline,
    stability,
    summarize,
)


def host_result(
    target, request, run, kind: str, started_at: float, tensors: str, split: dict, metrics: dict, network: dict
) -> dict:
    from edge_runtime import __version__
    from edge_runtime.results import BENCH_SCHEMA
    from edge_runtime.system import SystemRoot
    from edge_runtime.system.environment import environment, packages

    lat_ns = run.latency_ns
    warnings: list[str] = []
    # A query the run's time was over for did not fail: it is the scenario's `not_sent`, beside `saturated`, and the
    # error budget charges only the queries sent (a target that cannot keep up shows in their latency).
    not_sent = run.kinds.get(NOT_SENT, 0)
    kinds = Counter({k: v for k, v in run.kinds.items() if k != NOT_SENT})
    n, failed = len(run.errors), run.failed - not_sent
    if len(lat_ns):
        lat = summarize(lat_ns)
        unstable, why = stability(lat_ns, lat)
        warnings += why
    else:
        lat, unstable = {"count": 0}, None
        warnings.append("no query was answered: no latency to report")
    if failed:
        said = ", ".join(f"{k} x{v}" for k, v in kinds.most_common(4))
        warnings.append(f"{failed:,} of {n - not_sent:,} queries sent failed ({said})")
    if run.stopped:
        warnings.append(f"interrupted: partial result of {n:,} queries")
    spq = request.samples_per_query or 1
    answered = int(run.ok.sum())
    order = np.argsort(run.finished_ns[run.ok], kind="stable")
    done_at = (run.finished_ns[run.ok][order] / 1e9) if answered else np.empty(0)
    steps = np.linspace(0, answered, min(answered, 50) + 1).astype(int)[1:] if answered else []
    m = SimpleNamespace(samples_ns=lat_ns, wall_s=run.wall_s,
                        chunks=[(0, 0.0)] + [(int(i), float(done_at[i - 1])) for i in steps])  # fmt: skip
    scenario = _scenario(request, run, kind, warnings)
    env = environment(SystemRoot("/"), None, {"edge-runtime": __version__, "numpy": np.__version__,
                                               **packages(["tritonclient", "grpcio", "geventhttpclient"])})  # fmt: skip
    server = (target.meta or {}).get("server") or {}
    env["board"] = f"{server.get('name') or 'kserve'} {server.get('version') or ''} at {target.opts['address']}".strip()
    env["measured_on"] = {"client": socket.gethostname(), "note": "latency as the client sees it, network included"}
    model = (target.meta or {}).get("model") or {}
    sha = None
    if request.model and request.model != target.opts["model"]:
        from edge_runtime.errors import UserError
        from edge_runtime.runtime.model import model_sha256

        try:  # the campaign's model file, hashed as a board hashes it (an IR's .xml and .bin): the pair of a board run
            sha = model_sha256(request.model)
        except (OSError, UserError):
            sha = None
    model_section = {
        "path": target.url,
        "sha256": sha,
        "format": "kserve",
        "precision": None,
        "server_name": model.get("name", target.opts["model"]),
        "server_versions": model.get("versions"),
    }
    details = {
        "server": server.get("name"),
        "protocol": target.opts["protocol"],
        "tensors": tensors,
        "address": target.opts["address"],
        "extensions": server.get("extensions"),
    }
    backend = {
        "name": "kserve",
        "version": server.get("version"),
        "device": f"server ({server.get('name')})",
        "delegate": None,
        "fallback": False,
        "fallback_reason": None,
        "details": details,
    }
    config = {
        "threads": run.concurrency,
        "cpus": None,
        "rt_priority": None,
        "mlock": False,
        "warmup": run.warmup,
        "iterations": request.iterations,
        "duration_s": request.duration_s,
        "stress": [],
        "timed_call": "tritonclient infer() of seeded random inputs, from the client",
    }
    quality = {
        "timer_overhead_ns": None,
        "percentile_method": PERCENTILE_METHOD,
        "unstable": unstable,
        "warnings": warnings,
    }
    sig = signal.Signals(run.interrupted).name if run.interrupted else None
    aborted = {
        "kind": "interrupted",
        "reason": f"interrupted by {sig}" if sig else "stopped",
        "signal": sig,
        "at_s": round(run.wall_s, 3),
        "partial": True,
    }
    return {
        "schema": BENCH_SCHEMA,
        "model": model_section,
        "backend": backend,
        "config": config,
        "latency_us": lat,
        "jitter_us": jitter(lat) if len(lat_ns) else {"p99_minus_p50": None, "max_minus_min": None},
        "throughput_ips": round(answered * spq / run.wall_s, 2) if run.wall_s > 0 else None,
        "quality": quality,
        "environment": env,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started_at)),
        "wall_s": run.wall_s,
        **({"aborted": aborted} if run.stopped else {}),
        "scenario": scenario,
        "timeline_us": list(latency_timeline(m) or []),
        "errors": {
            "failed": failed,
            "share": round(failed / (n - not_sent), 6) if n > not_sent else 0.0,
            "kinds": dict(kinds),
            "examples": dict(run.examples),
        },
        "failed_queries": failed,
        "server": {"statistics": split, "metrics": metrics, "network": network},
        "histogram_us": [list(x) for x in histogram_us(lat_ns)] if len(lat_ns) else [],
    }


def _scenario(request, run, kind: str, warnings: list[str]) -> dict:
    """The record's scenario section, from the board's function (`scenario_figures`, over the queries sent; its end
    the run's unless stopped). A saturated run adds its warning."""
    sent = run.started_ns >= 0
    scenario = scenario_figures(kind, request, run.intended_ns[sent], run.started_ns[sent], run.finished_ns[sent],
                                from_intended=run.from_intended, wall_s=run.wall_s,
                                end_s=None if run.stopped else request.duration_s, scheduled=len(run.errors),
                                samples_per_query=request.samples_per_query or 1, ok=run.ok[sent],
                                concurrency=run.concurrency)  # fmt: skip
    saturated = saturation_text(scenario)
    if saturated:
        warnings.append(saturated)
    return scenario
