"""Issue 26, the batcher's fast path (Batcher.submit(inline=True)): a lone request, with no window to wait out and
nothing else queued or in flight, runs in the caller's thread on an idle instance's session, pinned to that
instance's CPUs while it runs. Real ONNX Runtime sessions on the committed dynamic-batch resnet8; the sessions are
wrapped only to record where each run happened."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from conftest import MODELS, need

from edge_runtime.serve import Batcher, QueueFull, session_loader

RESNET_DYNAMIC = MODELS / "resnet8" / "resnet8_int8_dynamic.onnx"


class Recorded:
    """A real session whose run() notes the thread and the CPUs it ran on."""

    def __init__(self, session, runs: list):
        self._s, self._runs = session, runs

    def __getattr__(self, name):
        return getattr(self._s, name)

    def run(self) -> None:
        self._runs.append((threading.get_native_id(), frozenset(os.sched_getaffinity(0))))
        self._s.run()


@pytest.fixture
def make():
    need("onnxruntime")
    made: list[Batcher] = []
    runs: list = []

    def build(**kw) -> Batcher:
        load = session_loader(RESNET_DYNAMIC, threads=1)
        settings = {"max_batch": 8, "max_delay_us": 0, "queue": 64, **kw}
        made.append(Batcher(lambda cpus: Recorded(load(cpus), runs), **settings))
        return made[-1]

    yield build, runs
    for b in made:
        b.close(timeout_s=10)


def idle(b: Batcher) -> None:
    """Wait until the worker waits on the empty queue (on a loaded machine it gets there a while after start)."""
    end = time.monotonic() + 30
    while not b._idle and time.monotonic() < end:
        time.sleep(0.005)
    assert b._idle, "the worker never came to wait for work"


def x(seed: int, n: int = 1) -> dict:
    return {"input": np.random.default_rng(seed).standard_normal((n, 32, 32, 3)).astype(np.float32)}


def test_a_lone_request_runs_in_the_callers_thread_on_the_instances_cpus(make):
    build, runs = make
    cpus = os.sched_getaffinity(0)
    pin = max(cpus)
    b = build(cpus=str(pin))
    idle(b)
    before = os.sched_getaffinity(0)
    runs.clear()
    f = b.submit(x(1), inline=True)
    assert f.done() and f.result()["probabilities"].shape == (1, 10)
    assert runs == [(threading.get_native_id(), frozenset({pin}))]  # here, pinned to the instance's CPU
    assert os.sched_getaffinity(0) == before  # and given back
    stats = b.stats()
    assert stats["execution_count"] == 1 and stats["inference_stats"]["success"]["count"] == 1
    assert b.submit(x(1), inline=False).result(timeout=30)["probabilities"].shape == (1, 10)
    assert runs[-1][0] != threading.get_native_id()  # without inline: the worker ran it


def test_a_window_means_no_fast_path(make):
    """With a window, a lone request waits for companions: running it at once would change what the window means."""
    build, runs = make
    b = build(max_delay_us=200_000)
    f = b.submit(x(2), inline=True)
    assert not f.done()
    f.result(timeout=30)
    assert runs[-1][0] != threading.get_native_id()


def test_a_burst_still_meets_the_queue_bound(make):
    """Only a request alone takes the fast path: in a burst the others queue, and a full queue still refuses."""
    build, _ = make
    b = build(queue=2)
    go = threading.Barrier(12)

    def one(i):
        go.wait()
        try:
            return b.submit(x(i), inline=True).result(timeout=60)["probabilities"].shape
        except QueueFull:
            return "full"

    with ThreadPoolExecutor(12) as pool:
        got = list(pool.map(one, range(12)))
    assert "full" in got and (1, 10) in got
    assert b.stats()["rejected"] == got.count("full")


def test_answers_stay_each_requests_own_under_concurrency(make):
    """Eight threads, inline allowed: whichever path each request takes, it gets its own rows back."""
    from edge_runtime import load

    build, _ = make
    b = build(max_batch=4)
    with load(RESNET_DYNAMIC, threads=1) as ref:
        want = {i: ref.infer(x(i))["probabilities"] for i in range(64)}

    def one(i):
        return i, b.submit(x(i), inline=True).result(timeout=60)["probabilities"]

    with ThreadPoolExecutor(8) as pool:
        for i, got in pool.map(one, range(64)):
            np.testing.assert_array_equal(got, want[i])
