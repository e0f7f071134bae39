"""Flags of edge-bench that read a small language of their own: `--slo KEY=VALUE` (a campaign's [slo] table as flags)
and `--header 'NAME: VALUE'` (a server target's HTTP/gRPC headers). A malformed one is one UsageError naming the flag;
the SLO itself and its verdicts are bench/slo.py's, which raises nothing of the command line."""

from __future__ import annotations

import math
import re

from bench.slo import SLO
from edge_runtime.errors import UsageError


def slo_flags(values: list[str] | None) -> SLO:
    """`--slo p99=10ms --slo p50=800us --slo error_budget=0.001` as an SLO (the campaign's `[slo]` table in flags).
    A bound without a unit is in ms (s, ms, us). One-line UsageError naming the flag otherwise."""
    bounds: dict[str, float] = {}
    budget = None
    names = {"p50": "p50_ms", "p90": "p90_ms", "p99": "p99_ms", "p999": "p999_ms", "p99.9": "p999_ms", "max": "max_ms"}
    for text in values or []:
        key, sep, value = text.partition("=")
        key = key.strip().lower()
        if not sep:
            raise UsageError(f"--slo {text!r}: KEY=VALUE (p50 p90 p99 p99.9 max = 10ms | 800us; error_budget=0.001)")
        if key == "error_budget":
            try:
                budget = float(value)
            except ValueError:
                budget = math.nan
            if not 0 <= budget < 1:
                raise UsageError(f"--slo error_budget={value}: a share from 0 to below 1 (0.001 = 0.1%)")
            continue
        if key not in names:
            raise UsageError(f"--slo {text!r}: unknown key {key!r} (p50, p90, p99, p99.9, max, error_budget)")
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(s|ms|us)?\s*", value)
        ms = float(m.group(1)) * {"s": 1000, "us": 1e-3}.get(m.group(2) or "ms", 1) if m else math.nan
        if not (math.isfinite(ms) and 0 < ms <= 3.6e6):
            raise UsageError(f"--slo {text!r}: a latency above 0 and at most an hour, e.g. 10ms, 800us or 1s")
        if names[key] in bounds:
            raise UsageError(f"--slo {key} given twice")
        bounds[names[key]] = ms
    return SLO(bounds, budget)


def header_flags(values: list[str] | None) -> dict[str, str]:
    """--header 'NAME: VALUE' flags as a dict; one line for a malformed one."""
    out: dict[str, str] = {}
    for text in values or []:
        name, sep, value = text.partition(":")
        if not sep or not name.strip() or any(c.isspace() for c in name.strip()):
            raise UsageError(f"--header {text!r}: 'NAME: VALUE' (e.g. 'triton-access-token: ${{TOKEN}}')")
        out[name.strip()] = value.strip()
    return out
