"""The runtime: `load()` a model file on a backend plugin and get a `Session` with inputs bound once.

Layer: imports `edge_runtime.system` and `edge_runtime.errors` only; never measure, quantize or cli. A model is first
loaded in the crash-check child (`sandbox`) so a file that crashes a native library cannot take the caller down.

The names below resolve on first use (PEP 562): importing a submodule (`runtime.model`, `runtime.sandbox`) must not
import numpy, whose thread pools would make the command line's process unsafe to fork for its crash check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["BackendInfo", "FallbackWarning", "OversubscriptionWarning", "Session", "load"]

_WHERE = {
    "FallbackWarning": "edge_runtime.runtime.load",
    "OversubscriptionWarning": "edge_runtime.runtime.load",
    "load": "edge_runtime.runtime.load",
    "BackendInfo": "edge_runtime.runtime.session",
    "Session": "edge_runtime.runtime.session",
}

if TYPE_CHECKING:
    from edge_runtime.runtime.load import FallbackWarning, OversubscriptionWarning, load
    from edge_runtime.runtime.session import BackendInfo, Session


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value
