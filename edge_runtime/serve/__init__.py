"""`edge-runtime serve` (issue 26): a model behind the KServe v2 protocol, with a dynamic batcher.

So far the batcher (`batcher.Batcher`) and its Triton-shaped statistics (`stats.ServeStats`); the endpoints come next.
Importing this package imports numpy, never a backend (the session factory loads one in each worker) and never `bench`.
"""

from edge_runtime.serve.batcher import Batcher
from edge_runtime.serve.instances import Instance, session_loader, split_cpus
from edge_runtime.serve.requests import (
    BatcherClosed,
    DeadlineExpired,
    QueueFull,
    RequestFuture,
    RequestTimes,
    batching_refusal,
)
from edge_runtime.serve.stats import ServeStats

__all__ = [
    "Batcher",
    "BatcherClosed",
    "DeadlineExpired",
    "Instance",
    "QueueFull",
    "RequestFuture",
    "RequestTimes",
    "ServeStats",
    "batching_refusal",
    "session_loader",
    "split_cpus",
]
