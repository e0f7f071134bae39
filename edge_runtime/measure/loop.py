"""The measuring loop: warm-up excluded, then a count or a duration of timed calls into a preallocated array.

Inside the loop there is nothing but the call and two `perf_counter_ns` reads: no allocation beyond the ints the
timer returns, no logging, no conversion. Garbage collection is paused for the loop and restored after. Long runs are
cut into chunks of about half a second so progress can be reported between chunks, never inside one.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edge_runtime.measure.clock import SYSTEM, Clock

MAX_SAMPLES = 50_000_000  # 400 MB of int64: the ceiling for any run
CHUNK_S = 0.5


def max_samples() -> int:
    """How many samples one run may keep here: MAX_SAMPLES, or fewer where memory is small (each sample is 8 bytes,
    and the statistics sort a copy: 16 bytes a sample, kept under a quarter of the memory)."""
    from edge_runtime.files.inputs import memory_bytes

    return max(1, min(MAX_SAMPLES, memory_bytes() // 64))


class StopRequest:
    """Asks a measuring loop to end at its next chunk boundary and keep what it measured (set from a signal handler).

    `armed` only while the measured part runs: outside it a signal ends the work at once."""

    def __init__(self) -> None:
        self.armed = False
        self.signum: int | None = None

    def request(self, signum: int) -> None:
        self.signum = signum

    @property
    def requested(self) -> bool:
        return self.signum is not None


@dataclass
class Measurement:
    samples_ns: np.ndarray  # one latency per call, in order
    start_ns: int  # time.time_ns() when the measured part began (for logs and timelines)
    wall_s: float  # measured part, from the first call's start to the last call's end
    warmup_calls: int
    timer_overhead_ns: int  # median cost of one loop turn around an empty call
    truncated: bool = False  # a --duration run that filled MAX_SAMPLES before its end
    stopped: bool = False  # should_stop() ended the run early (e.g. thermal limit)
    # (samples done, seconds since the measured part began) at each chunk boundary: maps wall time to sample index
    chunks: list[tuple[int, float]] | None = None
    begin_perf_s: float = 0.0  # time.perf_counter() when the measured part began
    per_call_ns: int = 0  # one call's time as the warm-up saw it (sizes chunks and buffers)


def _timed(fn: Callable[[], object], out: np.ndarray, start: int, stop: int, deadline: int | None) -> int:
    """Time fn() into out[start:stop]; stop early at `deadline` (perf_counter_ns). Returns the next free index."""
    t = time.perf_counter_ns
    i = start
    if deadline is None:
        for i in range(start, stop):
            t0 = t()
            fn()
            out[i] = t() - t0
        return stop
    while i < stop:
        t0 = t()
        if t0 >= deadline:
            break
        fn()
        out[i] = t() - t0
        i += 1
    return i


@contextlib.contextmanager
def gc_paused():
    """Collect now, then no garbage collection until the block ends (turned back on only if it was on): a
    collection inside a timed loop would land in one sample as a latency the model never had."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def timer_overhead_ns(n: int = 20_000) -> int:
    """What one loop turn costs around a call that does nothing (reported, not subtracted)."""
    buf = np.empty(n, dtype=np.int64)
    _timed(lambda: None, buf, 0, n, None)
    return int(np.median(buf))


def warm_up(
    fn: Callable[[], object],
    warmup: int,
    warmup_s: float | None,
    should_stop: Callable[[], bool] | None,
    *,
    check_every: int = 64,
    clock: Clock = SYSTEM,
) -> tuple[int, int]:
    """Untimed calls before a measured part: `warmup` of them, or for `warmup_s` seconds of `clock`; stops early when
    `should_stop()` says so (checked every `check_every` calls: the board's inferences are short, a server's query
    is not). Returns (calls made, ns per call; 0 when none)."""
    calls = 0
    t0 = clock.now_ns()
    t_end = t0 + int(warmup_s * 1e9) if warmup_s else None
    while (calls < warmup) if t_end is None else (clock.now_ns() < t_end):
        fn()
        calls += 1
        if should_stop is not None and calls % check_every == 0 and should_stop():
            break
    return calls, (clock.now_ns() - t0) // calls if calls else 0


def measure(
    fn: Callable[[], object],
    *,
    iterations: int | None = None,
    duration_s: float | None = None,
    warmup: int = 10,
    warmup_s: float | None = None,
    progress: Callable[[int, int | None, float], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    chunk_s: float = CHUNK_S,
    on_start: Callable[[], None] | None = None,
    on_end: Callable[[], None] | None = None,
) -> Measurement:
    """Time `fn` after warming up (`warmup` calls, or `warmup_s` seconds). Give `iterations` or `duration_s`.

    `on_start` runs just before the first timed call and `on_end` just after the last (outside the timed samples and
    the wall time): counters read there cover the measured part only, not the warm-up.
    """
    if (iterations is None) == (duration_s is None):
        raise ValueError("give iterations or duration_s")
    if iterations is not None and not 1 <= iterations <= max_samples():
        from edge_runtime.errors import UserError

        raise UserError(f"iterations {iterations}: must be 1 to {max_samples():,} (what fits in memory here)")
    overhead = timer_overhead_ns()
    # Warm-up: also gives the per-call time used to size chunks and the buffer of a --duration run.
    warm_calls, per_call = warm_up(fn, warmup, warmup_s, should_stop)
    if should_stop is not None and should_stop():
        # Stopped during warm-up (a signal, the thermal limit): nothing was measured.
        return Measurement(
            np.empty(0, dtype=np.int64), time.time_ns(), 0.0, warm_calls, overhead, stopped=True, per_call_ns=0
        )
    per_call_ns = max(1, per_call)
    if warm_calls == 0:  # no warm-up asked: one untimed probe call for sizing
        t0 = time.perf_counter_ns()
        fn()
        per_call_ns = max(1, time.perf_counter_ns() - t0)

    if iterations is not None:
        capacity = iterations
    else:
        capacity = min(MAX_SAMPLES, int(duration_s * 1e9 / per_call_ns * 1.5) + 1000)
    samples = np.empty(capacity, dtype=np.int64)
    samples[:] = 0  # touch every page now, not during the loop
    chunked = progress is not None or should_stop is not None or duration_s is not None
    chunk = max(1, int(chunk_s * 1e9 / per_call_ns)) if chunked else capacity

    if on_start is not None:
        on_start()
    with gc_paused():  # collected now; no collection inside the timed part
        start_wall = time.time_ns()
        begin = time.perf_counter_ns()
        deadline = begin + int(duration_s * 1e9) if duration_s is not None else None
        n = 0
        chunks: list[tuple[int, float]] = [(0, 0.0)]
        stopped = False
        while True:
            if n >= capacity:
                if deadline is None or capacity >= MAX_SAMPLES:
                    break
                # A --duration run faster than its warm-up suggested: grow the buffer between chunks, never inside.
                grown = np.zeros(min(MAX_SAMPLES, capacity * 2), dtype=np.int64)
                grown[:n] = samples[:n]
                samples, capacity = grown, len(grown)
            stop = min(capacity, n + chunk)
            got = _timed(fn, samples, n, stop, deadline)
            n = got
            elapsed = (time.perf_counter_ns() - begin) / 1e9
            chunks.append((n, elapsed))
            if got < stop:
                break  # deadline reached
            if progress:
                progress(n, iterations, elapsed)
            if should_stop is not None and should_stop():
                stopped = True
                break
    wall_s = (time.perf_counter_ns() - begin) / 1e9
    if on_end is not None:
        on_end()
    truncated = duration_s is not None and n == capacity and wall_s < duration_s
    return Measurement(
        samples[:n].copy(),
        start_wall,
        wall_s,
        warm_calls,
        overhead,
        truncated,
        stopped,
        chunks,
        begin / 1e9,
        per_call_ns,
    )


def hdr_histogram(samples_ns: np.ndarray):
    """An HdrHistogram (hdrhistogram package) of the samples, in nanoseconds, 3 significant digits."""
    try:
        from hdrh.histogram import HdrHistogram
    except ImportError as err:
        from edge_runtime.errors import UserError

        raise UserError("--hdr-log needs the hdrhistogram package", hint="pip install 'edge-runtime[hdr]'") from err
    h = HdrHistogram(1, max(int(samples_ns.max()) * 2, 3_600_000_000_000), 3)
    values, counts = np.unique(samples_ns, return_counts=True)
    for v, c in zip(values.tolist(), counts.tolist(), strict=True):
        h.record_value(max(1, v), c)
    return h


def hdr_log_text(samples_ns: np.ndarray, start_ns: int, wall_s: float, comment: str) -> str:
    """Standard HdrHistogram interval log (one interval), readable by HistogramLogProcessor and hdrh's reader.

    Values are nanoseconds. hdrhistogram 0.10.x's HistogramLogWriter.output_start_time raises AttributeError, so the
    StartTime line is written here in the format the Java and C writers use.
    """
    import io
    from datetime import datetime, timezone

    from hdrh.log import HistogramLogWriter

    h = hdr_histogram(samples_ns)
    # StartTime and BaseTime must be the same number: readers skip intervals that start before StartTime.
    start_ms = start_ns // 1_000_000
    start_s = start_ms / 1000.0
    f = io.StringIO()
    w = HistogramLogWriter(f)
    w.output_comment(comment)
    w.output_log_format_version()
    stamp = datetime.fromtimestamp(start_s, tz=timezone.utc).strftime("%a %b %d %H:%M:%S UTC %Y")
    f.write(f"#[StartTime: {start_s:f} (seconds since epoch), {stamp}]\n")
    w.output_base_time(start_ms)
    w.output_legend()
    w.output_interval_histogram(h, start_time_stamp_sec=0.0, end_time_stamp_sec=wall_s, max_value_unit_ratio=1e6)
    return f.getvalue()
