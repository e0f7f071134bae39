"""Latency statistics. One percentile definition, used everywhere: nearest rank.

Nearest rank (the value at 1-based rank ceil(p/100 * N) of the sorted samples) is what OpenVINO's benchmark_app
reports; ONNX Runtime's perf_test uses a floor index instead. It never interpolates, so every reported percentile is
a latency that really happened. numpy's `percentile(..., method="inverted_cdf")` is the same definition.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

PERCENTILE_METHOD = "nearest-rank (value at rank ceil(p/100*N); as OpenVINO benchmark_app)"
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9, "p9999": 99.99}
# A run is flagged unstable, as pyperf does, when its standard deviation is more than 10% of its mean; or when the
# median of its last tenth differs from that of its first tenth by more than 10% (drift: heat, frequency, load).
UNSTABLE_STD_RATIO = 0.10
UNSTABLE_DRIFT_RATIO = 0.10


def nearest_rank(sorted_ns: np.ndarray, p: float) -> int:
    """Value at rank ceil(p/100 * N), in exact arithmetic: in floats 99.9/100*1000 is 999.0000000000001, whose
    ceiling would make p99.9 of 1000 samples their maximum."""
    n = len(sorted_ns)
    rank = max(1, math.ceil(Fraction(str(p)) * n / 100))
    return int(sorted_ns[min(rank, n) - 1])


def nearest_rank_counts(values: np.ndarray, counts: np.ndarray, p: float) -> np.ndarray:
    """`nearest_rank` of histograms, R at once: for each row of `counts` (R x buckets, or one row) over the bucket
    `values` (ascending), the value at rank ceil(p/100 * n), n the row's total, in exact integers as nearest_rank
    (bench/compare.py bootstraps thousands of resampled histograms through it)."""
    counts = np.atleast_2d(counts)
    n = counts.sum(axis=1).astype(np.int64)
    q = Fraction(str(p)) / 100
    rank = np.maximum((q.numerator * n + q.denominator - 1) // q.denominator, 1)
    idx = (np.cumsum(counts, axis=1) < rank[:, None]).sum(axis=1)  # the first bucket whose count reaches the rank
    return np.asarray(values)[idx]


def percentile_us(values_ns: np.ndarray, p: float) -> float | None:
    """The nearest-rank percentile `p` of ns values, in us rounded to the ns (None for no value): the scenario
    figures' (send error, service time) of both engines."""
    return round(nearest_rank(np.sort(values_ns), p) / 1e3, 3) if len(values_ns) else None


def summarize(samples_ns: np.ndarray) -> dict:
    """Statistics in microseconds (float) of latencies given in nanoseconds."""
    if len(samples_ns) == 0:
        raise ValueError("no samples")
    s = np.sort(samples_ns)
    out = {"count": len(s), "min": s[0] / 1e3, "mean": np.mean(s) / 1e3, "std": np.std(s) / 1e3}
    for key, p in PERCENTILES.items():
        out[key] = nearest_rank(s, p) / 1e3
    out["max"] = s[-1] / 1e3
    return {k: (v if k == "count" else float(v)) for k, v in out.items()}


def jitter(lat: dict) -> dict:
    """Jitter from the statistics: the tail above the median (p99 - p50) and the whole spread (max - min), in us."""
    return {"p99_minus_p50": lat["p99"] - lat["p50"], "max_minus_min": lat["max"] - lat["min"]}


# Fewer samples than this say nothing about stability: the drift check compares tenths of at least 10 samples.
MIN_SAMPLES_FOR_STABILITY = 100


def stability(samples_ns: np.ndarray, lat: dict) -> tuple[bool | None, list[str]]:
    """(unstable, why): True when the spread or the drift says the run was disturbed, False when it was steady,
    None when there are too few samples to tell (a 1-sample run is not "stable")."""
    if len(samples_ns) < MIN_SAMPLES_FOR_STABILITY:
        return None, [
            f"stability unknown: {len(samples_ns)} sample(s); at least {MIN_SAMPLES_FOR_STABILITY} are needed to judge "
            "spread and drift"
        ]
    warnings = []
    if lat["mean"] > 0 and lat["std"] / lat["mean"] > UNSTABLE_STD_RATIO:
        warnings.append(
            f"unstable: standard deviation {lat['std']:.1f} us is {lat['std'] / lat['mean']:.0%} of the mean "
            f"(> {UNSTABLE_STD_RATIO:.0%})"
        )
    tenth = len(samples_ns) // 10
    if tenth >= 10:
        first, last = float(np.median(samples_ns[:tenth])), float(np.median(samples_ns[-tenth:]))
        drift = (last - first) / first if first else 0.0
        if abs(drift) > UNSTABLE_DRIFT_RATIO:
            warnings.append(f"unstable: median drifted {drift:+.0%} from the first to the last tenth of the run")
    return bool(warnings), warnings


def histogram_us(samples_ns: np.ndarray) -> tuple[tuple[int, int], ...]:
    """((latency in whole microseconds, how many), ...) for every value seen, smallest first."""
    values, counts = np.unique(np.asarray(samples_ns) // 1000, return_counts=True)
    return tuple((int(v), int(c)) for v, c in zip(values, counts, strict=True))


TIMELINE_WINDOWS = 200  # a run's latency over time, in at most this many windows: enough for a plot, small to keep


def latency_timeline(m) -> tuple[dict, ...] | None:
    """Latency over time: the samples in order, cut into at most TIMELINE_WINDOWS windows of equal count, each with
    the time its last sample ended (s from the start of the measured part, placed by the loop's chunk marks) and
    its p50, p99 and max in us. None for a run without samples."""
    samples = np.asarray(m.samples_ns)
    n = len(samples)
    if n == 0:
        return None
    chunks = m.chunks or [(0, 0.0), (n, m.wall_s)]
    done, elapsed = np.array([c[0] for c in chunks], float), np.array([c[1] for c in chunks], float)
    edges = np.unique(np.linspace(0, n, min(TIMELINE_WINDOWS, n) + 1).astype(np.int64))
    out = []
    for a, b in itertools.pairwise(edges):
        w = np.sort(samples[a:b])
        out.append({
            "t_s": round(float(np.interp(b, done, elapsed)), 4),
            "count": int(b - a),
            "p50": nearest_rank(w, 50) / 1e3,
            "p99": nearest_rank(w, 99) / 1e3,
            "max": int(w[-1]) / 1e3,
        })  # fmt: skip
    return tuple(out)
