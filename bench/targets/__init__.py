"""Targets by URL scheme: the agent (a board over serial or TCP) now; local, KServe v2 and the others plug in here."""

from __future__ import annotations

from bench.targets.agent import SCHEMES as AGENT_SCHEMES
from bench.targets.agent import AgentTarget, TargetError

__all__ = ["AGENT_SCHEMES", "AgentTarget", "TargetError"]
