"""The dynamic batcher at the core of `edge-runtime serve` (issue 26): requests in, one inference per batch, outputs
out.

A request is a dict of input arrays whose first dimension holds 1 or more rows, with an optional deadline
(time.monotonic() seconds). It waits in a bounded queue; `submit()` refuses at once when the queue is full
(`QueueFull`), because a queue that grows turns overload into latency nobody asked for (the serving rule Triton's
`max_queue_size` and KServe's 503 express). One worker thread per model instance, each with its own Session on its
own CPUs, takes requests from the head of the queue up to `max_batch` rows, or fewer once the oldest of them has waited
`max_delay_us` (Triton's `max_queue_delay_microseconds`), joins them along the first dimension, runs once and hands
each request its rows back through a `concurrent.futures.Future`. A request is never split across batches.

A model whose first dimension is not dynamic (every committed reference model: fixed at 1) cannot take a batch: its
requests run one at a time and `unbatched_reason` says why. A request whose deadline has passed when its batch is taken
is dropped with `DeadlineExpired` instead of run: the client has given up on it, running it would only delay the
requests behind it.

This module knows nothing of HTTP or gRPC and never imports a backend itself (the session factory does).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

import numpy as np

from edge_runtime.errors import UserError
from edge_runtime.serve.instances import Instance, SessionFactory, pin_this_thread, split_cpus, warm_up
from edge_runtime.serve.requests import (
    BatcherClosed,
    DeadlineExpired,
    QueueFull,
    Request,
    RequestFuture,
    RequestTimes,
    batching_refusal,
    check_request,
)
from edge_runtime.serve.stats import ServeStats


def _check_settings(max_batch, max_delay_us, queue, instances) -> None:
    def whole(name, value, low):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise UserError(f"{name} {value!r}: expected a whole number of at least {low}")

    whole("max_batch", max_batch, 1)
    whole("queue", queue, 1)
    whole("instances", instances, 1)
    ok = isinstance(max_delay_us, (int, float)) and not isinstance(max_delay_us, bool)
    if not ok or not 0 <= max_delay_us <= 60e6:
        raise UserError(f"max_delay_us {max_delay_us!r}: expected microseconds from 0 to 60000000 (a minute)")


class Batcher:
    """Gathers requests into batches for `instances` sessions made by `session_factory(cpus)`. See the module doc."""

    def __init__(
        self,
        session_factory: SessionFactory,
        *,
        max_batch: int,
        max_delay_us: float,
        queue: int,
        instances: int = 1,
        cpus: Iterable[int] | str | None = None,
        start_timeout_s: float = 300.0,
    ) -> None:
        _check_settings(max_batch, max_delay_us, queue, instances)
        self._groups = split_cpus(cpus, instances)
        self._queue_limit = queue
        self._max_delay_ns = int(max_delay_us * 1000)
        self._pending: deque[Request] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._go = threading.Event()  # workers gather only once the settings below are known
        self._load_lock = threading.Lock()  # one load at a time: each worker's new threads are then its own
        self._workers_started = threading.Event()
        self._stats = ServeStats()
        self.instances: list[Instance] = []
        # The fast path (see _claim): instances whose worker waits on an empty queue, those lent to a caller now,
        # their sessions, and the requests submitted and not yet answered
        self._idle: set[int] = set()
        self._lent: set[int] = set()
        self._sessions: dict[int, object] = {}
        self._in_flight = 0
        ready: list[Future] = [Future() for _ in range(instances)]
        self._threads = [
            threading.Thread(target=self._worker, args=(i, session_factory, ready[i]), name=f"batcher-{i}", daemon=True)
            for i in range(instances)
        ]
        for t in self._threads:
            t.start()
        self._workers_started.set()  # every worker's thread id is known now: none counts another's as its own
        try:
            end = time.monotonic() + start_timeout_s
            sessions = [f.result(timeout=max(0.0, end - time.monotonic())) for f in ready]
        except FutureTimeout as err:
            self.close(drain=False, timeout_s=0)  # the late loads end their own workers when they finish
            raise UserError(f"model instances not loaded within start_timeout_s {start_timeout_s:g} s") from err
        except BaseException:
            self.close(drain=False)
            raise
        first = sessions[0]
        self.inputs, self.outputs = list(first.inputs), list(first.outputs)
        self.backend = first.backend  # the BackendInfo of what runs (every instance loads the same way)
        self.unbatched_reason = batching_refusal(self.inputs, self.outputs)
        self.max_batch = 1 if self.unbatched_reason else max_batch
        self.instances.sort(key=lambda inst: inst.index)
        self._go.set()

    # -- the caller's side ------------------------------------------------------------------------------------------
    def submit(self, feeds: Mapping[str, object], deadline: float | None = None, inline: bool = False) -> RequestFuture:
        """Queue one request; its future gets the outputs, or DeadlineExpired, or the inference's error.

        Raises QueueFull at once when the queue is full, BatcherClosed after close(), FeedError for inputs the model
        cannot take. The arrays must stay unchanged until the future is done (they are not copied here).

        `inline`: the caller's thread may run the request itself, on an idle instance's session and CPUs, when
        nothing could join it (no window, or no batching), nothing else is queued or in flight, and an instance
        waits for work: a lone request then skips the two thread hand-offs (~60 us here), which is most of what the
        batcher costs a single client. The future is done when submit returns."""
        if self._closing:
            raise BatcherClosed("batcher is closed: it takes no new requests")
        req = check_request(self.inputs, feeds, deadline, batching=not self.unbatched_reason, max_batch=self.max_batch)
        now = time.monotonic_ns()
        req.enqueued_ns = now
        if req.deadline_ns is not None and req.deadline_ns <= now:
            self._expire([req], now)
            return req.future
        with self._cond:
            if self._closing:  # again, under the lock: close() may have come in between
                raise BatcherClosed("batcher is closed: it takes no new requests")
            if len(self._pending) >= self._queue_limit:
                self._stats.count_rejected()
                raise QueueFull(f"queue full: {self._queue_limit} request(s) waiting", hint="retry later")
            index = self._claim() if inline else None
            self._in_flight += 1
            if index is None:
                self._pending.append(req)
                self._cond.notify_all()
        req.future.add_done_callback(self._answered)
        if index is not None:
            self._run_lent(index, req, now)
        return req.future

    def _answered(self, _future) -> None:
        with self._cond:
            self._in_flight -= 1

    def _claim(self) -> int | None:
        """An idle instance lent to the caller, or None (lock held). Only when no request could have joined this one
        (window 0, or no batching) and none is queued or in flight: then running it here changes nothing but time."""
        if self._pending or self._in_flight or not (self._max_delay_ns == 0 or self.max_batch == 1):
            return None
        free = self._idle - self._lent
        if not free:
            return None
        index = min(free)
        self._lent.add(index)
        return index

    def _run_lent(self, index: int, req: Request, now: int) -> None:
        """Run `req` in the caller's thread on instance `index`, pinned to its CPUs meanwhile; then give it back."""
        cpus = self._groups[index]
        before = os.sched_getaffinity(0) if cpus else None
        try:
            if cpus:
                os.sched_setaffinity(0, cpus)
            if req.future.set_running_or_notify_cancel():
                self._run(index, self._sessions[index], [req], now)
        finally:
            if before is not None:
                os.sched_setaffinity(0, before)
            with self._cond:
                self._lent.discard(index)
                if self._pending or self._closing:  # the worker may wait for its session back; else let it sleep
                    self._cond.notify_all()

    def stats(self) -> dict:
        """Triton's model statistics shape (see serve/stats.py), plus rejected, expired and cancelled counts."""
        return self._stats.to_dict()

    def queued(self) -> int:
        """Requests waiting now, not yet taken into a batch."""
        with self._cond:
            return len(self._pending)

    def close(self, drain: bool = True, timeout_s: float = 30.0) -> bool:
        """Take no new requests; with `drain`, run what is queued (without waiting out the window: nothing else will
        come), else fail it with BatcherClosed. Wait up to `timeout_s` for the workers; True when all have ended."""
        with self._cond:
            self._closing = True
            dropped = [] if drain else list(self._pending)
            if not drain:
                self._pending.clear()
            self._cond.notify_all()
        self._go.set()  # a close during start-up releases workers that wait for it
        for r in dropped:
            if r.future.set_running_or_notify_cancel():
                r.future.set_exception(BatcherClosed("batcher closed before this request ran"))
        end = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def __enter__(self) -> Batcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the worker's side ------------------------------------------------------------------------------------------
    def _worker(self, index: int, factory: SessionFactory, ready: Future) -> None:
        cpus = self._groups[index]
        try:
            session = self._start(index, cpus, factory)
        except BaseException as err:  # noqa: BLE001 - handed to the constructor, which raises it
            ready.set_exception(err)
            return
        self._sessions[index] = session
        ready.set_result(session)
        try:
            self._go.wait()
            self._serve(index, session)
        except Exception as err:  # a fault of ours: never leave requests waiting on a worker that is gone
            self._give_up(f"batcher worker {index} stopped: {type(err).__name__}: {err}")
            raise
        finally:
            session.close()

    def _give_up(self, why: str) -> None:
        """Take no more requests and fail those queued (the server answers 503 from then on, and says why)."""
        with self._cond:
            self._closing = True
            dropped = list(self._pending)
            self._pending.clear()
            self._cond.notify_all()
        for r in dropped:
            if r.future.set_running_or_notify_cancel():
                r.future.set_exception(BatcherClosed(why))

    def _start(self, index: int, cpus: tuple[int, ...] | None, factory: SessionFactory):
        """Pin this thread, load, run once (pools exist after a first run), and note the threads the load started."""
        from edge_runtime.system.process import own_threads

        self._workers_started.wait()
        others = {t.native_id for t in self._threads} - {threading.get_native_id()}
        with self._load_lock:
            before = {t.tid for t in own_threads()} | others
            if cpus:
                pin_this_thread(index, cpus)
            session = factory(cpus)
            try:
                warm_up(session)
            except BaseException:
                session.close()
                raise
            tid = threading.get_native_id()
            mine = tuple(t for t in own_threads() if t.tid == tid or t.tid not in before)
        self.instances.append(Instance(index, cpus, tid, mine))
        return session

    def _serve(self, index: int, session) -> None:
        while True:
            free_ns = time.monotonic_ns()
            batch, expired, now = self._gather(index)
            if expired:  # failed outside the lock: a future runs its callbacks in the thread that sets it
                self._expire(expired, now)
            if batch is None:
                return
            if batch:
                self._run(index, session, batch, free_ns)

    def _gather(self, index: int) -> tuple[list[Request] | None, list[Request], int]:
        """Wait for the next batch: max_batch rows, or the head of the queue that fits once its oldest request has
        waited max_delay; at close, what is there at once. Returns (batch, requests found expired, when); batch is
        None when closed and empty, and empty when only expired requests were found."""
        expired: list[Request] = []
        with self._cond:
            while True:
                while index in self._lent:  # a caller runs a request on this instance's session now
                    self._cond.wait()
                now = time.monotonic_ns()
                expired += self._purge(now)  # before planning: a dropped request must not count as a companion
                if not self._pending:
                    if self._closing or expired:
                        return (None if self._closing else []), expired, now
                    self._idle.add(index)
                    self._cond.wait()
                    self._idle.discard(index)
                    continue
                if expired:  # answer those now (outside the lock), then plan the rest
                    return [], expired, now
                rows, fit = 0, 0
                for r in self._pending:
                    if rows + r.rows > self.max_batch:
                        break
                    rows, fit = rows + r.rows, fit + 1
                full = rows == self.max_batch or fit < len(self._pending)  # the next one would not fit anyway
                due = self._pending[0].enqueued_ns + self._max_delay_ns
                if full or self._closing or now >= due:
                    batch = self._take()
                    if batch:
                        return batch, expired, now
                    continue  # all cancelled meanwhile: plan again
                # wake at the window's end, or at the first deadline before it (dropped then, not at the window's end)
                deadlines = [r.deadline_ns for r in self._pending if r.deadline_ns is not None]
                self._cond.wait((min([due, *deadlines]) - now) / 1e9)

    def _purge(self, now: int) -> list[Request]:
        """Take expired and cancelled requests out of the queue, wherever they are (lock held); return the expired."""
        if not any(r.future.cancelled() or (r.deadline_ns is not None and now >= r.deadline_ns) for r in self._pending):
            return []
        keep: deque[Request] = deque()
        expired, cancelled = [], 0
        for r in self._pending:
            if r.future.cancelled():
                cancelled += 1
            elif r.deadline_ns is not None and now >= r.deadline_ns:
                expired.append(r)
            else:
                keep.append(r)
        self._pending = keep
        if cancelled:
            self._stats.count_cancelled(cancelled)
        return expired

    def _take(self) -> list[Request]:
        """Take the head of the queue up to max_batch rows (lock held)."""
        batch, rows = [], 0
        while self._pending and rows + self._pending[0].rows <= self.max_batch:
            r = self._pending.popleft()
            if not r.future.set_running_or_notify_cancel():  # cancelled since the purge
                self._stats.count_cancelled()
                continue
            batch.append(r)
            rows += r.rows
        return batch

    def _expire(self, requests: list[Request], now: int) -> None:
        live = [r for r in requests if r.future.set_running_or_notify_cancel()]
        self._stats.count_failed([now - r.enqueued_ns for r in live], expired=True)
        for r in live:
            r.future.set_exception(DeadlineExpired("deadline passed before the request ran: dropped"))

    def _run(self, index: int, session, batch: list[Request], free_ns: int) -> None:
        """One inference for the batch; each request gets its rows, or the batch's error."""
        started = time.monotonic_ns()
        rows = sum(r.rows for r in batch)
        try:
            if len(batch) == 1:
                feeds = batch[0].feeds
            else:
                feeds = {t.name: np.concatenate([r.feeds[t.name] for r in batch]) for t in self.inputs}
            session.bind(feeds)
            t_in = time.monotonic_ns()
            session.run()
            t_infer = time.monotonic_ns()
            outs = session.results()
            answers, at = [], 0
            for r in batch:
                if self.unbatched_reason:
                    answers.append(outs)
                else:
                    answers.append({name: arr[at : at + r.rows] for name, arr in outs.items()})
                at += r.rows
            done = time.monotonic_ns()
        except BaseException as err:  # one bad batch fails its requests, never the worker
            now = time.monotonic_ns()
            self._stats.count_failed([now - r.enqueued_ns for r in batch], expired=False)
            for r in batch:
                r.future.times = RequestTimes(r.enqueued_ns, max(r.enqueued_ns, free_ns), started, now, rows, index)
                r.future.set_exception(err)
            if not isinstance(err, Exception):
                raise
            return
        stages = {"compute_input": t_in - started, "compute_infer": t_infer - t_in, "compute_output": done - t_infer}
        self._stats.count_batch(
            rows, [started - r.enqueued_ns for r in batch], [done - r.enqueued_ns for r in batch], stages
        )
        for r, answer in zip(batch, answers, strict=True):
            r.future.times = RequestTimes(r.enqueued_ns, max(r.enqueued_ns, free_ns), started, done, rows, index)
            r.future.set_result(answer)
