"""Targets: what a URL names and the harness benches. base.py says what every target is and declares (Target,
TargetInfo, TargetError, TargetResult), registry.py maps URL schemes to them (built-in: `local:` this machine,
the agent on a board over serial or TCP, KServe v2 servers, MLPerf Tiny firmware; others through the
`edge_bench.targets` entry points), one module per kind: local.py, agent.py, kserve.py, eembc.py."""

from __future__ import annotations

from bench.targets.base import Target, TargetError, TargetInfo, TargetOptions, TargetResult
from bench.targets.registry import check, target_class, target_for

__all__ = ["Target", "TargetError", "TargetInfo", "TargetOptions", "TargetResult", "check", "target_class",
           "target_for"]  # fmt: skip
