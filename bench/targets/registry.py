"""Targets by URL scheme: the one place a URL becomes a target. The built-in targets are registered as "module:Class"
strings and imported when a URL of theirs is first used; third-party targets register through the
`edge_bench.targets` entry-point group (name = scheme, value = "module:Class"), read only when a scheme is not a
built-in one. A scheme registered twice is an error, as a backend's name is: both registries are an
edge_runtime.plugins.LazyRegistry.

Never: import a target module at import time (`edge-bench targets local:` does not pay for tritonclient or numpy)."""

from __future__ import annotations

import re

from bench.targets.base import Target, TargetOptions
from edge_runtime.errors import UserError
from edge_runtime.plugins import LazyRegistry
from edge_runtime.wire.endpoint import SCHEMES

ENTRY_POINT_GROUP = "edge_bench.targets"
# The agent's URL forms as `parse_endpoint` reads them ("" is a device path): one list, in edge_runtime/wire/endpoint.py
BOARD_SCHEMES = SCHEMES

_TARGETS: LazyRegistry[Target] = LazyRegistry(
    "target scheme", ENTRY_POINT_GROUP, lambda scheme, cls: issubclass(cls, Target) and scheme in cls.schemes,
    "a bench.targets.base.Target that declares it in its schemes",
)  # fmt: skip
_REGISTRY = _TARGETS.items  # scheme -> "module:Class" or the class once imported
register = _TARGETS.register

register("local", "bench.targets.local:LocalTarget")
register("labgrid", "bench.targets.labgrid:LabgridTarget")  # a board in a labgrid farm (issue 28)
register("kserve+http", "bench.targets.kserve:KServeTarget")
register("kserve+grpc", "bench.targets.kserve:KServeTarget")
for _scheme in ("eembc", "eembc+socket", "eembc+rfc2217"):  # MLPerf Tiny firmware (issue 27)
    register(_scheme, "bench.targets.eembc:EembcTarget")
for _scheme in BOARD_SCHEMES:
    register(_scheme, "bench.targets.agent:AgentTarget")


def scheme_of(url: str) -> str | None:
    """The scheme a URL is registered under (as urllib reads it, even from a URL it cannot split): "" for a device
    path, None for a URL with no scheme."""
    if url.startswith("/"):
        return ""
    m = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", url)
    return m.group(1).lower() if m else None


def target_class(url: str) -> type[Target]:
    """The class for `url`'s scheme, its module imported now; one UserError line for a scheme nobody registered."""
    scheme = scheme_of(url)
    target = _TARGETS.get(scheme) if scheme is not None else None
    if target is None:
        shown = f"{scheme}://" if scheme else "(none)"
        raise UserError(f"target {url!r}: unknown scheme {shown}", hint="; ".join(summaries()))
    return target


def check(url: str) -> type[Target]:
    """The URL refused now if it names nothing (a campaign is checked when read, not when a run's turn comes)."""
    cls = target_class(url)
    cls.check_url(url)
    return cls


def target_for(url: str, options: TargetOptions | None = None) -> Target:
    return check(url)(url, options)


def schemes() -> dict[str, str]:
    """scheme -> "module:Class", built-in and entry points (`edge-bench targets --schemes`)."""
    return _TARGETS.spelled()


def classes() -> list[type[Target]]:
    """Every registered target class, once each, in the order registered: imports every target module. A plugin that
    cannot be imported is left out (it does not hide the others; naming its scheme says what is wrong with it)."""
    seen: dict[str, type[Target]] = {}
    for scheme, name in schemes().items():
        try:
            seen.setdefault(name, target_class(scheme + ":" if scheme else "/"))
        except Exception:  # noqa: BLE001 - whatever a broken plugin raises, the others are still listed
            continue
    return list(seen.values())


def summaries(takes: str | None = None) -> list[str]:
    """Each registered kind's URL form (those that take option `takes`, if given): for hints, on errors only."""
    return [cls.info.summary for cls in classes() if takes is None or takes in cls.info.takes]
