"""Is a change real? Two runs' latency distributions compared percentile by percentile, with a bootstrap confidence
interval for each change, and a threshold for what counts as a regression.

The test: for p50, p99, p99.9 and the mean (in a closed loop, throughput moves as its inverse), resample each run's
histogram (`histogram_us`, 1 us buckets, every sample of the run) with replacement RESAMPLES times (multinomial on the
bucket counts, the run's own sample size), take the statistic of each resample, and the relative change B/A - 1 of
each pair. The interval is the (alpha/2, 1 - alpha/2) quantiles of those changes, alpha = 5% shared across the four
metrics (Bonferroni: each at 98.75%), so two runs of the same work are called different in about 5% of comparisons,
not 20%. A change is significant when its interval excludes 0, and a regression when it is significant, slower, and
beyond the threshold. Throughput is each run's recorded one; an open loop's is its schedule's, shown but not tested.

A tail percentile gates the verdict only when each run holds enough samples beyond it: TAIL_SAMPLES (10) of them,
so p99 needs 1,000 samples a run and p99.9 needs 10,000. Below that the percentile is a handful of samples (one
4 ms stall of the machine decides a p99.9 of 3,000), so it is shown with its interval and "not gated", and the verdict
rests on the others. (CI flaked on exactly this: two runs of one model, 3,000 samples each, p99.9 +55%.)

What this cannot see: a difference between two runs that no resampling of one run shows (the machine drifting between
them). Interleave runs, repeat them, and let the threshold absorb what the board's own noise is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge_runtime.errors import UserError
from edge_runtime.measure.stats import nearest_rank_counts

RESAMPLES = 2000
TAIL_SAMPLES = 10  # samples beyond a percentile, in each run, before it gates a verdict
ALPHA = 0.05
METRICS = (("p50", 50.0), ("p99", 99.0), ("p999", 99.9), ("mean", None))  # percentiles, as stats.PERCENTILES
METHOD = (
    f"bootstrap ({RESAMPLES} resamples of each run's histogram), {100 * (1 - ALPHA / len(METRICS)):.2f}% percentile "
    f"intervals (Bonferroni over {len(METRICS)} metrics); a tail percentile gates only with {TAIL_SAMPLES} samples "
    f"beyond it in each run"
)


@dataclass(frozen=True)
class Distribution:
    values_us: np.ndarray  # bucket values, ascending
    counts: np.ndarray

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    @classmethod
    def of(cls, result: dict, what: str = "run") -> Distribution:
        hist = result.get("histogram_us") or []
        if not hist:
            raise UserError(f"{what}: no latency histogram in its result (histogram_us): nothing to compare")
        arr = np.asarray(hist, dtype=np.float64)
        order = np.argsort(arr[:, 0])
        return cls(arr[order, 0], arr[order, 1].astype(np.int64))


def _statistics(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """p50, p99, p99.9 (nearest rank, as every result here) and mean of each row of `counts` (R x buckets)."""
    counts = np.atleast_2d(counts)
    mean = (counts * values).sum(axis=1) / counts.sum(axis=1)
    return np.stack([mean if p is None else nearest_rank_counts(values, counts, p) for _, p in METRICS], axis=1)


def needed_samples(percentile: float | None) -> int:
    """How many samples a run needs before this percentile gates a verdict (the mean and p50: any number)."""
    if percentile is None or percentile <= 50:
        return 0
    return int(np.ceil(round(TAIL_SAMPLES * 100 / (100 - percentile), 6)))


def compare(a: dict, b: dict, threshold_pct: float = 5.0, seed: int = 0, resamples: int = RESAMPLES) -> dict:
    """B against A (A is the reference: a baseline, the earlier run). Per metric: A, B, change (B/A - 1, as %), its
    interval, significant, verdict; overall verdict: "regression" (exit 1), "improvement", "no significant change",
    "within threshold"."""
    da, db = Distribution.of(a, "run A"), Distribution.of(b, "run B")
    rng = np.random.default_rng(seed)
    sa = _statistics(da.values_us, rng.multinomial(da.n, da.counts / da.n, size=resamples))
    sb = _statistics(db.values_us, rng.multinomial(db.n, db.counts / db.n, size=resamples))
    point_a, point_b = _statistics(da.values_us, da.counts)[0], _statistics(db.values_us, db.counts)[0]
    changes = sb / sa - 1.0
    lo_q, hi_q = ALPHA / len(METRICS) / 2, 1 - ALPHA / len(METRICS) / 2
    metrics = {}
    for k, (name, pct) in enumerate(METRICS):
        lo, hi = np.quantile(changes[:, k], [lo_q, hi_q])
        change = point_b[k] / point_a[k] - 1.0
        significant = bool(lo > 0 or hi < 0)
        needed = needed_samples(pct)
        gated = min(da.n, db.n) >= needed
        if not gated:
            verdict = f"not gated (needs {needed:,} samples a run)"
        elif not significant:
            verdict = "not significant"
        elif change > threshold_pct / 100:
            verdict = "regression"
        elif change < -threshold_pct / 100:
            verdict = "improvement"
        else:
            verdict = "within threshold"
        metrics[name] = {
            "a": round(float(point_a[k]), 3),
            "b": round(float(point_b[k]), 3),
            "change_pct": round(100 * change, 2),
            "interval_pct": [round(100 * float(lo), 2), round(100 * float(hi), 2)],
            "significant": significant,
            "gated": gated,  # for a machine: whether this metric's verdict counts (the words say why not)
            "verdict": verdict,
        }
    metrics["throughput"] = _throughput(a, b, metrics.pop("mean"))
    verdicts = {m["verdict"] for m in metrics.values()}  # "not gated ..." and "not tested ..." decide nothing
    overall = (
        "regression"
        if "regression" in verdicts
        else "improvement"
        if "improvement" in verdicts
        else "within threshold"
        if "within threshold" in verdicts
        else "no significant change"
    )
    return {
        "method": METHOD,
        "threshold_pct": threshold_pct,
        "samples": {"a": da.n, "b": db.n},
        "metrics": metrics,
        "verdict": overall,
    }


CLOSED = ("single-stream", "offline")  # closed loops: the system sets the pace, so throughput is its to answer for


def _kind(result: dict) -> str:
    return (result.get("scenario") or {}).get("kind") or "single-stream"


def _throughput(a: dict, b: dict, mean: dict) -> dict:
    """Each run's recorded throughput (inferences/s), and its change. In a closed loop of one it moves as 1/mean
    latency, so the mean's bootstrap interval, inverted, is its interval; an open loop's throughput is what its
    schedule sent (and a multi-stream query holds several samples), so it is shown, not tested."""
    ta, tb = a.get("throughput_ips"), b.get("throughput_ips")
    if not ta or not tb:
        ta, tb = 1e6 / mean["a"], 1e6 / mean["b"]  # an older record without it: the closed-loop identity
    out = {"a": round(float(ta), 1), "b": round(float(tb), 1), "change_pct": round(100 * (tb / ta - 1), 2)}
    if _kind(a) in CLOSED and _kind(b) in CLOSED:
        out["interval_pct"] = [round(100 * (1 / (1 + x / 100) - 1), 2) for x in reversed(mean["interval_pct"])]
        out["significant"], out["verdict"], out["gated"] = mean["significant"], mean["verdict"], mean["gated"]
        if out["verdict"] in ("regression", "improvement"):  # the direction is throughput's own
            out["verdict"] = "regression" if out["change_pct"] < 0 else "improvement"
    else:
        why = "not tested (an open loop's throughput is its schedule's)"
        out.update(interval_pct=None, significant=None, gated=False, verdict=why)
    return out


def comparable(a: dict, b: dict) -> list[str]:
    """Why two results should not be compared (different models, boards, backends or devices): one line each."""
    why = []
    ma, mb = a.get("model") or {}, b.get("model") or {}
    if ma.get("sha256") != mb.get("sha256"):
        why.append(f"different models ({str(ma.get('sha256'))[:12]} vs {str(mb.get('sha256'))[:12]})")
    ea, eb = a.get("environment") or {}, b.get("environment") or {}
    for key, what in (("board", "boards"), ("cpu_model", "CPUs")):
        if ea.get(key) != eb.get(key):
            why.append(f"different {what} ({ea.get(key)!r} vs {eb.get(key)!r})")
    ba, bb = a.get("backend") or {}, b.get("backend") or {}
    for key in ("name", "device"):
        if ba.get(key) != bb.get(key):
            why.append(f"different backend {key} ({ba.get(key)!r} vs {bb.get(key)!r})")
    sa, sb = a.get("scenario") or {}, b.get("scenario") or {}
    if _kind(a) != _kind(b):
        why.append(f"different scenarios ({_kind(a)} vs {_kind(b)})")
    elif sa.get("rate_qps") != sb.get("rate_qps"):
        why.append(f"different rates ({sa.get('rate_qps')} vs {sb.get('rate_qps')} queries/s)")
    return why
