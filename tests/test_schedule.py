"""The open-loop (server) schedule: a seeded Poisson process, and latency counted from the intended send time, so a
target that stalls shows the queue behind the stall, where a closed loop does not (coordinated omission)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from edge_runtime.measure.schedule import poisson_schedule, run_open_loop


def test_the_schedule_is_a_seeded_poisson_process_at_the_rate():
    s = poisson_schedule(500, 20, seed=3)
    assert np.array_equal(s, poisson_schedule(500, 20, seed=3)) and not np.array_equal(s, poisson_schedule(500, 20, 4))
    assert abs(len(s) / 20 - 500) < 500 * 0.05  # 10,000 expected, sd 100
    gaps = np.diff(s) / 1e9
    assert abs(gaps.mean() - 1 / 500) < 0.05 / 500 and abs(gaps.std() / gaps.mean() - 1) < 0.05  # exponential: cv 1
    with pytest.raises(ValueError):
        poisson_schedule(float("nan"), 1)
    with pytest.raises(ValueError, match="over"):
        poisson_schedule(1e9, 1e6)


class StallingTarget:
    """Serves a query in `service_s`, except for `stall_s` at the start of every `period_s` (a GC, a thermal
    throttle, another process): the kind of target a closed loop flatters."""

    def __init__(self, service_s=0.001, stall_s=0.2, period_s=1.0):
        self.service_s, self.stall_s, self.period_s = service_s, stall_s, period_s
        self.t0 = time.perf_counter()
        self.stalled_in = -1
        self.stalls_ns: list[tuple[int, int]] = []  # (start, end) of every stall, perf_counter_ns

    def __call__(self):
        now = time.perf_counter() - self.t0
        period = int(now // self.period_s)
        if period != self.stalled_in and now % self.period_s < self.stall_s:
            self.stalled_in = period
            a = time.perf_counter_ns()
            time.sleep(self.stall_s - now % self.period_s)
            self.stalls_ns.append((a, time.perf_counter_ns()))
        time.sleep(self.service_s)


def test_open_loop_latency_carries_the_queue_behind_a_stall_and_a_closed_loop_does_not():
    target = StallingTarget()
    sched = poisson_schedule(100, 3.2, seed=1)  # 100 queries/s, 1 ms each: 10% busy, except while stalled
    run = run_open_loop(target, sched)
    # While the target stalls 200 ms, ~20 queries arrive and wait: their latency from the intended time runs up to the
    # stall, so about a fifth of all queries are slow; timed from each actual send (a closed loop's view) only the one
    # query per second that met the stall is.
    assert np.percentile(run.latency_ns, 99) / 1e6 > 100
    assert np.percentile(run.latency_ns, 90) / 1e6 > 20
    assert np.percentile(run.service_ns, 90) / 1e6 < 10
    # Every query meant to be sent during a stall waited at least until the stall ended (from the stalls the target
    # itself recorded, not from the loop's own arithmetic).
    intended_abs = run.t0_ns + run.intended_ns
    checked = 0
    for a, b in target.stalls_ns:
        inside = (intended_abs >= a) & (intended_abs < b)
        checked += int(inside.sum())
        assert np.all(run.latency_ns[inside] >= b - intended_abs[inside])
    assert checked >= 20  # three stalls of 200 ms at 100 queries/s
    closed = []
    target2 = StallingTarget()
    t_end = time.perf_counter() + 3.2
    while time.perf_counter() < t_end:  # single-stream: the next query when the last completes
        s = time.perf_counter_ns()
        target2()
        closed.append(time.perf_counter_ns() - s)
    assert np.percentile(closed, 99) / 1e6 < 5  # 3 stalls among ~2,000 queries: under p99
    assert np.median(run.send_error_ns) / 1e3 < 500  # the issuer kept to its plan when the target was free



def test_edge_runtime_bench_runs_the_server_scenario():
    import json

    from conftest import MODELS, need
    from helpers import assert_one_line_error, run_cli

    need("tflite")
    model = str(MODELS / "digits_cnn" / "digits_cnn_int8.tflite")
    proc = run_cli("bench", model, "--cpus", "1", "--scenario", "server", "--rate", "400", "--duration", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    sc, lat = doc["scenario"], doc["latency_us"]
    assert sc["kind"] == "server" and sc["rate_qps"] == 400 and sc["queries"] == lat["count"]
    assert abs(sc["queries"] / 2 - 400) < 400 * 0.15  # a Poisson count over 2 s (sd ~3.5%)
    assert abs(sc["achieved_qps"] / (sc["queries"] / 2) - 1) < 0.1
    assert lat["p50"] >= sc["service_us"]["p50"]  # from the intended send: never shorter than from the actual one
    assert sc["send_error_us"]["p50"] < 1000
    for args, needle in (
        (["--scenario", "server", "--duration", "1"], "rate_qps"),
        (["--rate", "100", "--duration", "1"], "rate_qps goes with the server scenario"),
        (["--scenario", "server", "--rate", "nan"], "--rate"),
        (["--scenario", "server", "--rate", "0"], "--rate"),
        (["--scenario", "offline"], "--scenario"),
    ):
        assert_one_line_error(run_cli("bench", model, *args), needle)
