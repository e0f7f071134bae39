"""Numbers for people: one unit per table column, chosen for the column's magnitude, and figures without float noise
(no 1.14509e+09, no 0.0006089719999999999). Only what people read goes through here: CSV and JSON keep the exact
numbers, under their machine names (p999_us).

Decided here (issue 25, item 9):
- One vocabulary: p50, p99, p99.9 in every header people read; the machine keys stay p50_us, p99_us, p999_us.
- A latency column is in us while its largest value is under MS_FROM_US (10,000 us), else in ms; the header says
  which ("p50 ms"). Every value of one column is in the same unit.
- A percentile is shown only when the run holds enough samples for it to be other than the max (nearest rank:
  p99 needs 100, p99.9 needs 1,000); below that its cell is "-" and the legend under the table says why.
"""

from __future__ import annotations

import math

MS_FROM_US = 10_000.0  # a latency column whose largest value reaches this is shown in ms
S_FROM_US = 10_000_000.0  # a single figure in running text this large is said in s
# The fewest samples for which a nearest-rank percentile is not simply the run's maximum.
ENOUGH_FOR = {"p50": 1, "p90": 10, "p95": 20, "p99": 100, "p999": 1_000, "p9999": 10_000}
NAMES = {"p999": "p99.9", "p9999": "p99.99"}  # machine key -> what people read


def people_name(key: str) -> str:
    """`p999_us` -> `p99.9`, `throughput_ips` -> `throughput/s`; other keys as they are."""
    base = key[:-3] if key.endswith("_us") else key
    return {"throughput_ips": "throughput/s"}.get(key, NAMES.get(base, base))


def shown_for(key: str, count) -> bool:
    """Whether a run of `count` samples holds percentile `key` (p99, p999_us...) as more than its maximum."""
    base = key[:-3] if key.endswith("_us") else key
    need = ENOUGH_FOR.get(base)
    return need is None or (isinstance(count, int) and count >= need)


def latency_unit(values) -> str:
    """The unit, "us" or "ms", for a column of latencies in us: ms once its largest value reaches MS_FROM_US."""
    top = max((abs(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)), default=0.0)
    return "ms" if top >= MS_FROM_US else "us"


def number(v, digits: int = 1) -> str:
    """A figure for people: thousands separated, `digits` after the point, no exponent; "-" for none."""
    if v is None:
        return "-"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if not math.isfinite(v):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.{digits}f}"


def in_unit(v_us, unit: str) -> str:
    """A latency in us said in `unit` (us: one decimal; ms: three, so 17 us reads 0.017 in an ms column)."""
    if not isinstance(v_us, (int, float)) or isinstance(v_us, bool):
        return number(v_us)
    return {"us": lambda: number(float(v_us), 1), "ms": lambda: number(v_us / 1e3, 3),
            "s": lambda: number(v_us / 1e6, 3)}[unit]()  # fmt: skip


def duration(v_us) -> str:
    """One latency in running text, its unit chosen for it: 224 us, 2.61 ms, 12.3 s."""
    if not isinstance(v_us, (int, float)) or isinstance(v_us, bool) or not math.isfinite(v_us):
        return "?"
    if abs(v_us) >= S_FROM_US:
        return f"{v_us / 1e6:,.1f} s"
    if abs(v_us) >= MS_FROM_US:
        return f"{v_us / 1e3:,.1f} ms"
    if abs(v_us) >= 1000:
        return f"{v_us / 1e3:,.2f} ms"
    return f"{v_us:,.0f} us" if abs(v_us) >= 100 else f"{v_us:,.1f} us"


def rate(v) -> str:
    """Queries or inferences per second for people: 4,410/s, 12.5/s."""
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        return "?"
    return f"{v:,.0f}/s" if abs(v) >= 100 else f"{v:,.1f}/s"
