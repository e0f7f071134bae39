"""Inputs for a model when the caller gives none: seeded random data of each input's dtype and shape (a dynamic
dimension becomes 1). One builder for `run`, `bench` and the agent, so the same seed feeds the same data everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from edge_runtime.errors import FeedError
from edge_runtime.runtime.backends.base import TensorInfo


def random_feeds(
    inputs: Iterable[TensorInfo], seed: int, given: Mapping[str, np.ndarray] | None = None
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(feeds, sources): the arrays in `given`, and seeded random data for every other input; `sources` says which
    (`file`, `random uniform [0, 1)`, ...). Floats uniform in [0, 1), integers over their whole range, bools either."""
    rng = np.random.default_rng(seed)
    given = given or {}
    feeds: dict[str, np.ndarray] = {}
    sources: dict[str, str] = {}
    for t in inputs:
        if t.name in given:
            feeds[t.name] = given[t.name]
            sources[t.name] = "file"
            continue
        shape = [d if d is not None else 1 for d in t.shape]
        if t.dtype.kind == "f":
            feeds[t.name] = rng.random(shape, dtype=np.float64).astype(t.dtype)
            sources[t.name] = "random uniform [0, 1)"
        elif t.dtype.kind in "iu":
            info = np.iinfo(t.dtype)
            feeds[t.name] = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=t.dtype)
            sources[t.name] = f"random integers [{info.min}, {info.max}]"
        elif t.dtype.kind == "b":
            feeds[t.name] = rng.integers(0, 2, size=shape).astype(bool)
            sources[t.name] = "random bool"
        else:
            raise FeedError(f"input {t.name!r}: cannot make random data of dtype {t.dtype}; give it as a file")
    return feeds, sources
