"""Inputs for a model when the caller gives none: seeded random data of each input's dtype and shape (a dynamic
dimension becomes 1). One builder for `run`, `bench` and the agent, so the same seed feeds the same data everywhere.

The bits come from SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014) over a
counter, in numpy arithmetic: not numpy.random, whose import (~10 ms) was a tenth of a one-shot `run` (issue 22).
Inputs need statistical noise, not a simulation-grade stream; SplitMix64 passes BigCrush and is what seeds
xoshiro/PCG streams.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from edge_runtime.errors import FeedError
from edge_runtime.runtime.backends.base import TensorInfo

_MASK = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment: 2**64 / golden ratio, odd


def _mix(z):
    """SplitMix64's output function (the finaliser of MurmurHash3 with Stafford's 'Mix13' constants), on a Python
    int or a uint64 array (numpy's unsigned arithmetic wraps modulo 2**64, as the algorithm wants)."""
    if isinstance(z, int):
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def random_bits(seed: int, stream: int, count: int) -> np.ndarray:
    """`count` pseudo-random uint64 words of stream `stream` (one per input) of `seed` (any non-negative int):
    SplitMix64 started from a state mixed from both, so streams of one seed and seeds of one stream do not overlap
    in any way that shows."""
    state = _mix((_mix(seed & _MASK) ^ (seed >> 64) ^ (stream * _GAMMA)) & _MASK)
    counter = np.arange(1, count + 1, dtype=np.uint64)
    return _mix(counter * np.uint64(_GAMMA) + np.uint64(state))


def random_array(dtype: np.dtype, shape: list[int], seed: int, stream: int) -> np.ndarray:
    """Floats uniform in [0, 1) at the dtype's own precision (the top mantissa-width bits, so never 1.0 after a cast),
    integers over their whole range, bools either way."""
    n = int(np.prod(shape, dtype=np.int64))
    if dtype.kind == "f":
        bits = min(np.finfo(dtype).nmant + 1, 53)  # what float64 holds exactly, on the way to the dtype
        top = random_bits(seed, stream, n) >> np.uint64(64 - bits)
        return (top.astype(np.float64) * 2.0**-bits).astype(dtype).reshape(shape)
    if dtype.kind in "iu":
        # The words' bytes, little-endian whatever the machine, read as the dtype: the same values on every board.
        words = random_bits(seed, stream, -(-n * dtype.itemsize // 8)).astype("<u8", copy=False)
        raw = words.view(np.uint8)[: n * dtype.itemsize].view(dtype.newbyteorder("<"))
        return raw.astype(dtype, copy=False).reshape(shape)
    if dtype.kind == "b":
        return (random_bits(seed, stream, n) >> np.uint64(63)).astype(bool).reshape(shape)
    raise TypeError(dtype)


def random_feeds(
    inputs: Iterable[TensorInfo], seed: int, given: Mapping[str, np.ndarray] | None = None
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(feeds, sources): the arrays in `given`, and seeded random data for every other input; `sources` says which
    (`file`, `random uniform [0, 1)`, ...). Floats uniform in [0, 1), integers over their whole range, bools either."""
    given = given or {}
    feeds: dict[str, np.ndarray] = {}
    sources: dict[str, str] = {}
    for stream, t in enumerate(inputs):
        if t.name in given:
            feeds[t.name] = given[t.name]
            sources[t.name] = "file"
            continue
        shape = [d if d is not None else 1 for d in t.shape]
        if t.dtype.kind == "f":
            sources[t.name] = "random uniform [0, 1)"
        elif t.dtype.kind in "iu":
            info = np.iinfo(t.dtype)
            sources[t.name] = f"random integers [{info.min}, {info.max}]"
        elif t.dtype.kind == "b":
            sources[t.name] = "random bool"
        else:
            raise FeedError(f"input {t.name!r}: cannot make random data of dtype {t.dtype}; give it as a file")
        feeds[t.name] = random_array(t.dtype, shape, seed, stream)
    return feeds, sources
