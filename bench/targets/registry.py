"""Targets by URL scheme: the one place a URL becomes a target. The built-in targets are registered as "module:Class"
strings and imported when a URL of theirs is first used; third-party targets register through the
`edge_bench.targets` entry-point group (name = scheme, value = "module:Class"), read only when a scheme is not a
built-in one. A scheme registered twice is an error, as a backend's name is (edge_runtime.runtime.backends).

Never: import a target module at import time (`edge-bench targets local:` does not pay for tritonclient or numpy)."""

from __future__ import annotations

import importlib
import re

from bench.targets.base import Target, TargetOptions
from edge_runtime.errors import UserError
from edge_runtime.wire.endpoint import SCHEMES

ENTRY_POINT_GROUP = "edge_bench.targets"
# The agent's URL forms as `parse_endpoint` reads them ("" is a device path): one list, in edge_runtime/wire/endpoint.py
BOARD_SCHEMES = SCHEMES

_REGISTRY: dict[str, str | type[Target]] = {}
_ENTRY_POINTS_LOADED = False


def register(scheme: str, target: str | type[Target]) -> None:
    """Register a target class (or a lazy "module:Class") for URLs of `scheme` ("" is a device path)."""
    if scheme in _REGISTRY:
        raise ValueError(f"target scheme {scheme!r} is already registered ({_name(_REGISTRY[scheme])})")
    _REGISTRY[scheme] = target


register("local", "bench.targets.local:LocalTarget")
register("kserve+http", "bench.targets.kserve:KServeTarget")
register("kserve+grpc", "bench.targets.kserve:KServeTarget")
for _scheme in BOARD_SCHEMES:
    register(_scheme, "bench.targets.agent:AgentTarget")


def _load_entry_points() -> None:
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED = True
    from importlib.metadata import entry_points  # here: ~25 ms of imports a built-in scheme never pays

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            register(ep.name, ep.value)
        except ValueError:  # a plugin that takes a scheme already taken: the user's installation to fix
            dist = getattr(ep.dist, "name", None) or "a package"
            raise UserError(f"target scheme {ep.name!r}: {dist} registers {ep.value}, but it is "
                            f"{_name(_REGISTRY[ep.name])}'s", hint="uninstall one of the two") from None  # fmt: skip


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
    if scheme not in _REGISTRY:
        _load_entry_points()
    target = _REGISTRY.get(scheme) if scheme is not None else None
    if target is None:
        shown = f"{scheme}://" if scheme else "(none)"
        raise UserError(f"target {url!r}: unknown scheme {shown}", hint="; ".join(summaries()))
    if isinstance(target, str):
        module, _, name = target.partition(":")
        try:
            target = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as err:  # a plugin installed without what it needs
            raise UserError(f"target scheme {scheme!r}: {module}:{name} cannot be loaded ({type(err).__name__}: "
                            f"{err})") from None  # fmt: skip
        if not (isinstance(target, type) and issubclass(target, Target)) or scheme not in target.schemes:
            raise UserError(f"target scheme {scheme!r}: {module}:{name} is not a bench.targets.base.Target that "
                            "declares it in its schemes")  # fmt: skip
        _REGISTRY[scheme] = target
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
    _load_entry_points()
    return {s: _name(t) for s, t in _REGISTRY.items()}


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


def _name(t: str | type) -> str:
    return t if isinstance(t, str) else f"{t.__module__}:{t.__qualname__}"
