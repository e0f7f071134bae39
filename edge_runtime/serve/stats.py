"""The batcher's statistics, counted the way Triton's statistics extension counts them, so a client that reads a GPU
server's statistics reads a board's the same way.

What Triton counts (docs/protocol/extension_statistics.md, `inference_stats` and `batch_stats`), and we with it:
- `inference_count` is rows (a request of 3 rows counts 3), `execution_count` is model runs (batches);
- `success` counts requests and their time from entering the queue to their outputs being ready; `queue` and the three
  `compute_*` stages count per successful request, each request carrying its whole batch's compute times (so
  compute_infer.ns / success.count is the mean compute a request waited through, not a per-row cost);
- `batch_stats` holds, per executed batch size in rows, how many batches ran and their cumulative compute ns.
Beyond Triton's keys: `rejected` (refused at once, queue full: never became a request, so not in `fail`), `expired`
(dropped before running because its deadline had passed: in `fail` too, with its time in the queue) and `cancelled`
(the caller cancelled the future before it ran: in neither).

This module only counts; it never reads a clock (the batcher passes monotonic nanoseconds in).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

STAGES = ("compute_input", "compute_infer", "compute_output")


@dataclass
class Duration:
    """Triton's `$duration_stat`: how many, and their cumulative nanoseconds."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def to_dict(self) -> dict:
        return {"count": self.count, "ns": self.ns}


@dataclass
class _BatchSize:
    stages: dict[str, Duration] = field(default_factory=lambda: {s: Duration() for s in STAGES})


class ServeStats:
    """Thread-safe counters; `to_dict()` is Triton's model statistics shape plus rejected, expired and cancelled."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.inference_count = 0
        self.execution_count = 0
        self.last_inference_ms = 0  # Triton's last_inference: wall-clock ms since the epoch, 0 before any
        self.inference = {k: Duration() for k in ("success", "fail", "queue", *STAGES)}
        self.batches: dict[int, _BatchSize] = {}
        self.rejected = 0
        self.expired = 0
        self.cancelled = 0

    def count_rejected(self) -> None:
        with self._lock:
            self.rejected += 1

    def count_cancelled(self, n: int = 1) -> None:
        with self._lock:
            self.cancelled += n

    def count_failed(self, waited_ns: list[int], *, expired: bool) -> None:
        """Requests that got an error instead of outputs, with their time since they entered the queue."""
        with self._lock:
            for ns in waited_ns:
                self.inference["fail"].add(ns)
            if expired:
                self.expired += len(waited_ns)

    def count_batch(self, rows: int, queue_ns: list[int], total_ns: list[int], stage_ns: dict[str, int]) -> None:
        """One successful run of `rows` rows for len(queue_ns) requests; `stage_ns` the batch's compute times."""
        with self._lock:
            self.inference_count += rows
            self.execution_count += 1
            self.last_inference_ms = int(time.time() * 1000)
            n = len(queue_ns)
            self.inference["success"].add(sum(total_ns), n)
            self.inference["queue"].add(sum(queue_ns), n)
            size = self.batches.setdefault(rows, _BatchSize())
            for stage in STAGES:
                self.inference[stage].add(stage_ns[stage] * n, n)
                size.stages[stage].add(stage_ns[stage])

    def to_dict(self) -> dict:
        with self._lock:
            return {
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "last_inference": self.last_inference_ms,
                "inference_stats": {k: d.to_dict() for k, d in self.inference.items()},
                "batch_stats": [
                    {"batch_size": rows, **{s: d.to_dict() for s, d in self.batches[rows].stages.items()}}
                    for rows in sorted(self.batches)
                ],
                "rejected": self.rejected,
                "expired": self.expired,
                "cancelled": self.cancelled,
            }
