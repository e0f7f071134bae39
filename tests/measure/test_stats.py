"""Statistics against an independent reference (numpy's inverted-CDF percentiles = nearest rank), stability flags,
and the cyclictest-layout histogram read back by the cyclictest parser."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import artifact, need
from helpers import cli, strict_json

from edge_runtime.cli.bench import cyclictest_histogram
from edge_runtime.measure.platform_latency import parse_cyclictest
from edge_runtime.measure.stats import (
    PERCENTILES,
    jitter,
    nearest_rank,
    nearest_rank_counts,
    percentile_us,
    stability,
    summarize,
)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 10, 99, 100, 1001, 12345])
def test_percentiles_match_numpy_inverted_cdf(n):
    rng = np.random.default_rng(n)
    samples = rng.lognormal(mean=10, sigma=0.5, size=n).astype(np.int64) + 1
    got = summarize(samples)
    for key, p in PERCENTILES.items():
        # numpy's inverted_cdf is the same definition, but computes the rank in floats: where the two disagree
        # (p99.9 of 1000 samples) the exact integer reference decides.
        assert got[key] == _exact_reference(samples.tolist(), p) / 1e3, key
    assert got["count"] == n
    assert got["min"] == samples.min() / 1e3 and got["max"] == samples.max() / 1e3
    assert got["mean"] == pytest.approx(samples.mean() / 1e3)
    assert got["std"] == pytest.approx(samples.std() / 1e3)


def _exact_reference(samples, p):
    """Nearest rank with integer arithmetic only: p given in hundredths of a percent."""
    s = sorted(samples)
    hundredths = round(p * 100)
    rank = max(1, -(-hundredths * len(s) // 10000))  # ceil(p/100 * N)
    return s[rank - 1]


@pytest.mark.parametrize("n", [1000, 2000, 3000, 10000, 12345])
def test_p999_of_round_sample_counts_is_not_the_maximum(n):
    samples = np.arange(1, n + 1, dtype=np.int64) * 1000  # 1 .. n us, all distinct
    got = summarize(samples)
    for key, p in PERCENTILES.items():
        assert got[key] * 1000 == _exact_reference(samples.tolist(), p), key
    assert got["p999"] < got["max"]  # 1000 samples: rank 999, not 1000


@pytest.mark.parametrize("n", [1, 2, 999, 1000, 1001, 12345, 200_001, 999_999, 1_000_000])
def test_a_histogram_s_nearest_rank_is_that_of_its_samples(n):
    """Issue 23, step 5: compare's percentiles of histograms (nearest_rank_counts, R rows at once, exact integer
    ranks) are nearest_rank of the samples the histograms stand for, for every percentile a result reports, on
    random histograms of n samples (up to 10^6) and over the rows of one call."""
    rng = np.random.default_rng(n)
    buckets = int(rng.integers(1, min(n, 500) + 1))
    values = np.sort(rng.choice(np.arange(1, 100_000), size=buckets, replace=False)).astype(np.float64)
    rows = np.stack([rng.multinomial(n, rng.dirichlet(np.full(buckets, 0.3))) for _ in range(3)])
    for p in [*PERCENTILES.values(), 100.0, 0.01]:
        got = nearest_rank_counts(values, rows, p)
        want = [nearest_rank(np.repeat(values, row), p) for row in rows]  # the samples, sorted as the values are
        assert got.tolist() == want, p
        assert nearest_rank_counts(values, rows[0], p).tolist() == want[:1]  # one histogram: one row


def test_a_scenario_figure_is_the_nearest_rank_in_us():
    ns = np.array([3_000, 1_000, 2_000, 4_000, 1_234_567])
    assert percentile_us(ns, 50) == 3.0 and percentile_us(ns, 99) == 1234.567 and percentile_us(ns[:0], 50) is None


def test_nearest_rank_by_hand():
    s = np.array([10, 20, 30, 40, 50, 60, 70, 80, 90, 100])
    assert nearest_rank(s, 50) == 50  # rank ceil(5) = 5
    assert nearest_rank(s, 90) == 90
    assert nearest_rank(s, 99) == 100  # rank ceil(9.9) = 10
    assert nearest_rank(s, 0.0) == 10


def test_jitter():
    lat = summarize(np.array([1000, 1000, 1000, 5000]))
    assert jitter(lat) == {"p99_minus_p50": 4.0, "max_minus_min": 4.0}


def test_stability_flags_spread_and_drift():
    rng = np.random.default_rng(0)
    steady = (50_000 + rng.normal(0, 500, 10_000)).astype(np.int64)
    assert stability(steady, summarize(steady)) == (False, [])
    wide = (50_000 + rng.normal(0, 15_000, 10_000)).clip(1).astype(np.int64)
    unstable, why = stability(wide, summarize(wide))
    assert unstable and "standard deviation" in why[0]
    drifting = np.linspace(50_000, 70_000, 10_000).astype(np.int64)  # e.g. a board heating up
    unstable, why = stability(drifting, summarize(drifting))
    assert unstable and any("drifted +" in w for w in why)


def test_cyclictest_layout_reads_back_with_the_cyclictest_parser():
    samples = np.array([1_200, 1_900, 2_100, 2_400, 7_800, 40_000], dtype=np.int64)  # ns
    text = cyclictest_histogram(samples, buckets=10)
    lines = text.splitlines()
    assert lines[0] == "# Histogram"
    assert lines[1:4] == ["000000 000000", "000001 000002", "000002 000002"]
    assert "# Histogram Overflows: 00001" in lines  # 40 us is past 10 buckets
    parsed = parse_cyclictest(text)
    assert (parsed["min_us"], parsed["max_us"]) == (1, 40)
    assert parsed["histogram"] == [[1, 2], [2, 2], [7, 1]]


# ------------------------------------------------------------------------------------ hostile cases (issue 9's reviews)
MODEL = artifact("digits_cnn", "_int8.onnx")


def test_a_one_sample_run_is_not_called_stable():
    need("onnxruntime")
    r = strict_json(cli("bench", MODEL, "--iterations", "1", "--json").stdout)
    assert r["quality"]["unstable"] is None
    assert any(w.startswith("stability unknown: 1 sample(s)") for w in r["quality"]["warnings"])
    assert "quality      stability unknown" in cli("bench", MODEL, "--iterations", "1").stdout
