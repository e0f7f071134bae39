"""What goes through the batcher: a request checked the way a server must check one before queueing it, its future,
its timestamps, and the errors a request can end with (one line each, as a server answers them).

Never imports a backend: it works on TensorInfo records and numpy arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from edge_runtime.errors import EdgeRuntimeError, FeedError, UserError


class QueueFull(EdgeRuntimeError):
    """The queue holds `queue` requests: refused at once, nothing was queued."""


class DeadlineExpired(EdgeRuntimeError):
    """The request's deadline passed before its batch was taken: dropped, never run."""


class BatcherClosed(EdgeRuntimeError):
    """The batcher takes no new requests (close() was called), or it closed without draining this one."""


@dataclass(frozen=True)
class RequestTimes:
    """When a request went through the batcher, in time.monotonic_ns(): what the promise on max_delay_us is checked
    against. `ready_ns` is the later of its arrival and the moment its worker was free to gather (a request that
    arrives while every instance computes waits for capacity, which no window can give back); `held_ns` is the time
    the batcher held it while a worker was free: at most max_delay_us, plus the time it takes a thread to wake up."""

    enqueued_ns: int
    ready_ns: int
    started_ns: int
    done_ns: int
    batch_rows: int
    instance: int

    @property
    def queue_ns(self) -> int:
        return self.started_ns - self.enqueued_ns

    @property
    def held_ns(self) -> int:
        return self.started_ns - self.ready_ns


class RequestFuture(Future):
    """A Future of the request's outputs (dict name -> array); `times` is set once it has run or failed in a batch."""

    times: RequestTimes | None = None


@dataclass(eq=False)
class Request:
    feeds: dict[str, np.ndarray]
    rows: int
    deadline_ns: int | None
    future: RequestFuture
    enqueued_ns: int = 0


def batching_refusal(inputs, outputs) -> str | None:
    """Why this model cannot take a batch (a first dimension that is not dynamic), or None when it can."""
    for kind, infos in (("input", inputs), ("output", outputs)):
        for t in infos:
            if not len(t.shape) or t.shape[0] is not None:
                first = "no first dimension" if not len(t.shape) else f"a fixed first dimension of {t.shape[0]}"
                return f"{kind} {t.name!r} has {first}: requests run one at a time"
    return None


def _some(names: list, shown: int = 5, width: int = 40) -> str:
    """Names a client sent, bounded for a log line: a few, each cut short, and how many there were."""
    cut = [repr(str(n)[:width]) + ("..." if len(str(n)) > width else "") for n in names[:shown]]
    more = f" and {len(names) - shown:,} more" if len(names) > shown else ""
    return "[" + ", ".join(cut) + "]" + more


def check_request(inputs, feeds, deadline, *, batching: bool, max_batch: int) -> Request:
    """`feeds` as a Request for a model with these `inputs`: names, dtypes (a safe cast is made), shapes and rows
    checked, one FeedError line each. Without `batching` the whole shape is fixed and a request counts one row (the
    way Triton counts a model without batching: batch size 1 per execution)."""
    if not isinstance(feeds, Mapping):
        raise FeedError(f"request: expected a dict of input arrays, got {type(feeds).__name__}")
    names = [t.name for t in inputs]
    if sorted(feeds) != sorted(names):
        raise FeedError(f"request inputs {_some(sorted(feeds))}: the model takes {names!r}")
    arrays, rows = {}, set()
    for t in inputs:
        arr = np.asarray(feeds[t.name])
        if arr.dtype != t.dtype:
            if not np.can_cast(arr.dtype, t.dtype, "safe"):
                raise FeedError(f"input {t.name!r}: expects {t.dtype}, got {arr.dtype}")
            arr = arr.astype(t.dtype)
        skip = 0 if not batching else 1  # the first dimension is the rows when batching
        if arr.ndim != len(t.shape) or any(
            w is not None and w != g for w, g in zip(t.shape[skip:], arr.shape[skip:], strict=True)
        ):
            want = "(" + ", ".join("?" if d is None else str(d) for d in t.shape) + ")"
            raise FeedError(f"input {t.name!r}: expects shape {want}, got {tuple(arr.shape)}")
        arrays[t.name] = arr
        rows.add(arr.shape[0] if arr.ndim else 1)
    if len(rows) != 1 or 0 in rows:
        raise FeedError(f"request: every input needs the same number of rows, at least 1 (got {sorted(rows)})")
    n = rows.pop() if batching else 1
    if n > max_batch:
        raise FeedError(f"request of {n} rows: above max_batch {max_batch}", hint="split the request")
    if deadline is not None and (not isinstance(deadline, (int, float)) or isinstance(deadline, bool)):
        raise UserError(f"deadline {deadline!r}: expected time.monotonic() seconds")
    return Request(arrays, n, None if deadline is None else int(deadline * 1e9), RequestFuture())
