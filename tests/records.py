"""A bench result record built from latency samples, for tests of what reads records (the store, compare): the
fields those read, a 1-us histogram of the samples, and whatever else a test adds."""

from __future__ import annotations

import numpy as np


def result(samples, sha: str = "a" * 64, board: str = "board", **extra) -> dict:
    us = np.round(samples).astype(int)
    v, c = np.unique(us, return_counts=True)
    return {
        "schema": "edge-runtime/bench/1",
        "model": {"path": "/m/model.tflite", "sha256": sha},
        "backend": {"name": "tflite", "device": "cpu"},
        "environment": {"board": board, "cpu_model": "cpu"},
        "latency_us": {"p50": float(np.percentile(us, 50)), "p99": float(np.percentile(us, 99)), "count": len(us)},
        "histogram_us": [[int(a), int(b)] for a, b in zip(v, c, strict=True)],
        **extra,
    }
