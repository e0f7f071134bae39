"""The host-side load generator (server targets): closed loops with N queries in flight, open loops from a schedule
with latency from the intended send, failures counted and not fatal. Driven by small targets written for the test
(a stalling one, a failing one); the real servers are in test_kserve.py."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from bench.scenarios.engine import closed_loop, open_loop
from edge_runtime.measure.schedule import poisson_schedule


class Stalling:
    """1 ms per query, except 200 ms at the start of every second, shared by every connection (a server's GC)."""

    def __init__(self):
        self.t0 = time.perf_counter()
        self.lock = threading.Lock()
        self.stalled_in = -1

    def __call__(self):
        with self.lock:  # one query at a time, as a server with one instance
            now = time.perf_counter() - self.t0
            if int(now) != self.stalled_in and now % 1.0 < 0.2:
                self.stalled_in = int(now)
                time.sleep(0.2 - now % 1.0)
            time.sleep(0.001)
        return None


def test_open_loop_latency_carries_the_stall_and_a_closed_loop_hides_it():
    target = Stalling()
    sched = poisson_schedule(100, 3.2, seed=5)
    run = open_loop([target] * 4, sched)
    assert run.failed == 0 and len(run.errors) == len(sched)
    lat_ms = run.latency_ns / 1e6
    assert np.percentile(lat_ms, 99) > 100 and np.percentile(lat_ms, 90) > 20  # the queue behind each stall
    service_ms = (run.finished_ns - run.started_ns) / 1e6
    assert np.percentile(service_ms, 50) < 20
    closed = closed_loop([Stalling()], duration_s=3.2)
    # 3 stalls among ~2,500 queries: the closed loop's share of slow queries is ~0.1%, the open loop's ~18%. (The
    # bound is 20 ms, not the 1 ms service time: a loaded VM delays a good share of 1 ms sleeps by a few ms.)
    open_slow, closed_slow = np.mean(lat_ms > 20), np.mean(closed.latency_ns / 1e6 > 20)
    assert open_slow > 0.1 and closed_slow < 0.02 and open_slow > 5 * closed_slow, (open_slow, closed_slow)


def test_closed_loop_keeps_n_in_flight_and_stops_at_its_count():
    inflight, peak, lock = [0], [0], threading.Lock()

    def send():
        with lock:
            inflight[0] += 1
            peak[0] = max(peak[0], inflight[0])
        time.sleep(0.002)
        with lock:
            inflight[0] -= 1

    run = closed_loop([send] * 4, queries=200)
    assert len(run.errors) == 200 and run.failed == 0 and peak[0] == 4 and run.concurrency == 4
    # Four at once, from the run's own times: the queries' summed time (however long a loaded VM made each) fits in
    # the wall time four times at most (four workers), and at least twice (they overlapped, not one after another).
    busy_s = run.latency_ns.sum() / 1e9
    assert busy_s / 4 <= run.wall_s < busy_s / 2, (busy_s, run.wall_s)


def test_failures_are_counted_by_kind_and_a_dead_server_does_not_end_the_run():
    calls = [0]

    def send():
        calls[0] += 1
        if calls[0] % 10 == 0:
            return "status 503"
        if calls[0] % 7 == 0:
            raise ConnectionResetError("reset")
        return None

    run = closed_loop([send], queries=100)
    assert run.kinds == {"status 503": 10, "ConnectionResetError": 14 - 1} and run.failed == 23
    assert len(run.latency_ns) == 77
    run = open_loop([lambda: "unreachable"] * 2, np.arange(50, dtype=np.int64) * 1_000_000)
    assert run.failed == 50 and run.kinds == {"unreachable": 50} and len(run.latency_ns) == 0


def test_a_stop_ends_either_loop_and_keeps_what_was_sent():
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    run = open_loop([lambda: time.sleep(0.001)] * 2, np.arange(10_000, dtype=np.int64) * 1_000_000,
                    should_stop=stop.is_set)  # fmt: skip
    # Stopped, and only what was due by then was sent (one query a ms: never more than the wall time holds, however
    # late a loaded VM let the stop land); the unsent queries are not this run's.
    assert run.stopped and run.wall_s < 5 and run.failed == 0
    assert 0 < len(run.errors) <= run.wall_s * 1e3 + 1, (len(run.errors), run.wall_s)
    stop2 = threading.Event()
    threading.Timer(0.3, stop2.set).start()
    run = closed_loop([lambda: time.sleep(0.001)], duration_s=60, should_stop=stop2.is_set)
    assert run.stopped and run.wall_s < 5


def test_queries_still_out_at_the_end_are_no_answer_and_nothing_is_sent_after(monkeypatch):
    from bench.scenarios import engine

    # The grace the run gives a query in flight. The slow query below never returns within it (it waits for the test),
    # so the run always takes the whole grace: 1 s leaves the worker time to pick up its first query on a loaded VM.
    monkeypatch.setattr(engine, "JOIN_GRACE_S", 1.0)
    calls = [0]
    release = threading.Event()

    def slow():
        calls[0] += 1
        release.wait(60)

    before = set(threading.enumerate())
    try:
        run = open_loop([slow], np.zeros(10, np.int64))  # ten due at once, one connection, each out until released
        returned_with = calls[0]
        workers = [t for t in threading.enumerate() if t not in before]
    finally:
        release.set()
    assert run.kinds["no answer"] == 1 and run.kinds["not sent"] == 9 and run.failed == 10
    for t in workers:  # the worker returns from its query now: it must end without sending the backlog
        t.join(10)
        assert not t.is_alive()
    assert calls[0] == returned_with == 1  # the backlog is not sent after the run has returned


def test_waiting_for_a_slow_worker_does_not_spin():
    checks = [0]

    def should_stop():
        checks[0] += 1
        return False

    run = closed_loop([lambda: None, lambda: time.sleep(1.0)], duration_s=0.1, should_stop=should_stop)
    assert run.failed == 0 and checks[0] < 100  # ~10 checks a second while the slow one finishes, not millions


def test_each_model_and_scenario_gets_its_own_edge_versus_server_comparison():
    from bench.report.edge_vs_server import pairs

    def res(sha, server, kind="single-stream", p50=100.0, spq=1):
        r = {"model": {"sha256": sha}, "latency_us": {"p50": p50, "p99": p50 * 2, "mean": p50},
             "scenario": {"kind": kind, "samples_per_query": spq}}  # fmt: skip
        if server:
            r["backend"] = {"name": "kserve"}
            r["server"] = {"network": {"rtt_ms": 0.1}, "statistics": {"available": False, "reason": "none"}}
        return r

    items = [("board", res("a", False)), ("triton", res("a", True, p50=300.0)), ("board", res("b", False)),
             ("triton", res("b", True, p50=50.0)), ("board", res("a", False, "multi-stream", 800.0, 8)),
             ("triton", res("a", True, "multi-stream", 2000.0, 8))]  # fmt: skip
    comps = pairs(items)
    assert [(c["model"], c["scenario"]) for c in comps] == [("a", "single-stream"), ("b", "single-stream"),
                                                             ("a", "multi-stream")]  # fmt: skip
    assert comps[0]["crossover_rtt_ms"]["p50"] < 0 and comps[1]["crossover_rtt_ms"]["p50"] > 0
    # eight samples a query: eight round trips to the server, eight inferences on the board
    assert comps[2]["crossover_rtt_ms"]["p50"] == pytest.approx((800 - (2000 - 8 * 100)) / 8 / 1000, abs=1e-4)


# ------------------------------------------------------------------------------------- on virtual time (FakeClock)
class VirtualStalling:
    """Stalling on a FakeClock: 20 ms per query, except 200 ms at the start of every (virtual) second, one query at a
    time. Exact: no sleep wakes late."""

    def __init__(self, clock):
        self.clock, self.t0 = clock, clock.now_ns()
        self.lock = threading.Lock()
        self.stalled_in = -1

    def __call__(self):
        with self.clock.parked():  # waiting for the instance is waiting on another thread
            self.lock.acquire()
        try:
            now = (self.clock.now_ns() - self.t0) / 1e9
            if int(now) != self.stalled_in and now % 1.0 < 0.2:
                self.stalled_in = int(now)
                self.clock.sleep(0.2 - now % 1.0)
            self.clock.sleep(0.02)
        finally:
            self.lock.release()


def test_on_an_idle_virtual_clock_each_query_is_sent_at_its_time_exactly():
    """The dispatcher's pacing (schedule.wait_until) on a clock whose sleeps are exact: the send error is 0 for every
    query, each latency is the service time, and the run's wall time is the last answer's."""
    from clock import FakeClock

    clock = FakeClock()
    sched = np.arange(20, dtype=np.int64) * 10_000_000 + 3_000_000

    def send():
        clock.sleep(0.001)

    run = open_loop([send, send], sched, clock=clock)
    assert run.failed == 0 and np.array_equal(run.started_ns, sched) and np.array_equal(run.intended_ns, sched)
    assert np.array_equal(run.latency_ns, np.full(20, 1_000_000)) and run.wall_s == (sched[-1] + 1_000_000) / 1e9


def test_on_virtual_time_an_open_loop_carries_the_stall_and_a_closed_loop_hides_it():
    """The stall test, exact: a closed loop's slow queries are the three stalls themselves (every other query takes
    its 20 ms to the ns), while the open loop's queue behind each stall makes a tenth of its queries slow."""
    from clock import FakeClock

    clock = FakeClock()
    sched = poisson_schedule(25, 2.2, seed=5)
    run = open_loop([VirtualStalling(clock)] * 4, sched, clock=clock)
    assert run.failed == 0 and len(run.errors) == len(sched)
    lat_ms = run.latency_ns / 1e6
    assert np.percentile(lat_ms, 99) > 100 and np.mean(lat_ms > 40) > 0.1
    assert np.all(run.finished_ns - run.started_ns >= 20_000_000)
    clock = FakeClock()
    closed = closed_loop([VirtualStalling(clock)], duration_s=2.2, clock=clock)
    lat = closed.latency_ns
    assert np.sum(lat > 40_000_000) == 3 and np.sum(lat == 20_000_000) == len(lat) - 3, np.unique(lat)


def test_on_virtual_time_a_stop_ends_the_open_loop_and_keeps_what_was_sent():
    """A stop at virtual 0.3 s: the 30 queries due before it were sent and answered, none after."""
    from clock import FakeClock

    clock = FakeClock()
    start = clock.now_ns()

    def send():
        clock.sleep(0.001)

    sched = np.arange(100, dtype=np.int64) * 10_000_000
    run = open_loop([send] * 2, sched, should_stop=lambda: clock.now_ns() - start >= 300_000_000, clock=clock)
    assert run.stopped and len(run.errors) == 30 and run.failed == 0
    assert np.array_equal(run.started_ns, sched[:30])


def test_a_warm_up_by_time_stops_at_its_time_on_the_clock_it_is_given():
    """One warm-up for board and host (loop.warm_up, checked after each query for a server): by time, it ends at
    `warmup_s` of the clock's time; the host's run_request counts it with one query per connection after it."""
    from clock import FakeClock

    from bench.scenarios.engine import run_request
    from edge_runtime.measure.loop import warm_up
    from edge_runtime.measure.request import BenchRequest

    clock = FakeClock()

    def send():
        clock.sleep(0.03)

    assert warm_up(send, 0, 0.1, None, check_every=1, clock=clock) == (4, 30_000_000)  # at 0, 30, 60, 90 ms
    stops = iter([False, True])
    assert warm_up(send, 0, 10.0, lambda: next(stops), check_every=1, clock=clock)[0] == 2  # asked after each
    run = run_request(BenchRequest("m.onnx", iterations=5, warmup_s=0.1), lambda: send, workers=2, clock=clock)
    assert run.warmup == 4 + 2 and len(run.errors) == 5 and run.failed == 0 and run.wall_s == 0.09  # 3 rounds of 30 ms


def test_the_pacing_sleeps_in_slices_that_ask_for_a_stop_and_returns_the_send_time():
    """schedule.wait_until, the one pacing of board and host: a wait of 1 s in slices of 50 ms is 20 sleeps, each
    followed by a stop check, and it returns the clock's reading at the due time; a stop says None at the slice it
    came in."""
    from clock import FakeClock

    from edge_runtime.measure.schedule import wait_until

    clock = FakeClock()
    due = clock.now_ns() + 1_000_000_000
    asked = []

    def never() -> bool:
        asked.append(clock.now_ns())
        return False

    assert wait_until(due, clock, never, poll_s=0.05) == due
    assert clock.sleeps == 20 and len(asked) == 20 and clock.now_ns() == due
    stop_at = due + 300_000_000
    assert wait_until(due + 10**9, clock, lambda: clock.now_ns() >= stop_at, poll_s=0.05) is None
    assert clock.now_ns() == stop_at and wait_until(due, clock) == stop_at  # past due: now, no sleep
