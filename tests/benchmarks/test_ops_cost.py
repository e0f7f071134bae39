"""What `bench --ops` costs (issue 29), per engine on resnet8 INT8, interleaved in one run, reported as ratios.

1. The profiler's cost on p50: rounds of the timed session's p50 with profiling off, then the report that
   `bench --ops` makes for it (`profile_loaded`: a second, profiled session of the same model and inputs), whose
   `profiled_p50_us` is set against it. OpenVINO's PERF_COUNT and ONNX Runtime's profiler each cost something per op
   per run; the per-op times of the section are of that slower run (the section says by how much).
2. LiteRT is placement only (no op profiler): the cost to check is that reading the placement leaves the interpreter
   as fast as before: p50 of a session whose placement was read against one whose was not, rounds interleaved
   (goal ~1.0).
3. The wall time of `edge-runtime bench --ops` against plain `bench` (1000 timed runs, the default): what asking for
   the section adds to a run (a second session's load and at most 500 profiled runs), in child processes, the
   order alternated round by round.
Reported, not asserted: timings on a shared 2-core machine vary run to run.
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import ROOT, artifact, need

import edge_runtime
from edge_runtime.measure.loop import measure
from edge_runtime.ops.record import median_us
from edge_runtime.runtime.feeds import random_feeds

from .conftest import report_ratio

FILES = {"onnxruntime": "_int8.onnx", "openvino": "_int8.xml", "tflite": "_int8.tflite"}
RUNS, ROUNDS, WARMUP = 300, 9, 20
WALL_ROUNDS = 3


def _load(backend: str):
    need(backend)
    if backend == "tflite":
        pytest.importorskip("ai_edge_litert")
    session = edge_runtime.load(artifact("resnet8", FILES[backend]), backend=backend, threads=1, sandbox=False)
    inputs = random_feeds(session.inputs, 0)[0]
    session.bind(inputs)
    return session, inputs


def _p50_us(session) -> float:
    return median_us(measure(session.runner(), iterations=RUNS, warmup=WARMUP).samples_ns)


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_profiler_cost_on_p50(benchmark, backend):
    from edge_runtime.ops.profile import profile_loaded

    session, inputs = _load(backend)
    off, on, ratios, pct = [], [], [], []

    def one_round():
        p50 = _p50_us(session)
        report = profile_loaded(session, inputs, {"p50": p50}, iterations=RUNS, warmup=WARMUP)
        off.append(p50)
        on.append(report.profiled_p50_us)
        ratios.append(report.profiled_p50_us / p50)
        pct.append(report.profiling_overhead_pct)

    benchmark.group = "bench --ops: the profiler's cost on p50"
    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1, warmup_rounds=0)
    report_ratio(benchmark, f"resnet8 int8 {backend}: profiled p50 / p50 off", off, on, goal=None, per_round=ratios)
    session.close()
    assert len(ratios) == ROUNDS and all(p is not None for p in pct)


def test_litert_placement_read_leaves_the_interpreter_as_fast(benchmark):
    from edge_runtime.ops.profile import profile_loaded

    read, inputs = _load("tflite")
    untouched, _ = _load("tflite")
    report = profile_loaded(read, inputs, {"p50": _p50_us(read)}, iterations=RUNS, warmup=WARMUP)
    assert report.time_source == "placement only" and report.partitions
    ref, cand, ratios = [], [], []

    def one_round():
        if len(ratios) % 2:  # alternate which goes first
            b = _p50_us(read)
            a = _p50_us(untouched)
        else:
            a = _p50_us(untouched)
            b = _p50_us(read)
        ref.append(a)
        cand.append(b)
        ratios.append(b / a)

    benchmark.group = "bench --ops: the profiler's cost on p50"
    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1, warmup_rounds=0)
    report_ratio(benchmark, "resnet8 int8 tflite: p50 after the placement read / p50", ref, cand, goal=1.05,
                 goal_low=0.95, per_round=ratios)  # fmt: skip
    read.close()
    untouched.close()


def _wall_s(model, *flags: str) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "edge_runtime.cli", "bench", str(model), *flags, "--json", "-"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr
    assert ('"ops"' in proc.stdout) is ("--ops" in flags)
    return wall


@pytest.mark.parametrize("backend", list(FILES))
def test_bench_ops_wall_time(benchmark, backend):
    need(backend)
    model = artifact("resnet8", FILES[backend])
    plain, ops, ratios = [], [], []

    def one_round():
        if len(ratios) % 2:
            b = _wall_s(model, "--ops")
            a = _wall_s(model)
        else:
            a = _wall_s(model)
            b = _wall_s(model, "--ops")
        plain.append(a * 1e6)
        ops.append(b * 1e6)
        ratios.append(b / a)

    benchmark.group = "bench --ops: wall time of the command"
    benchmark.pedantic(one_round, rounds=WALL_ROUNDS, iterations=1, warmup_rounds=0)
    report_ratio(benchmark, f"resnet8 int8 {backend}: bench --ops wall / bench wall", plain, ops, goal=None,
                 per_round=ratios)  # fmt: skip
    assert np.all(np.asarray(ratios) > 0)
