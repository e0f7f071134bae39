"""Backend registry: name -> plugin class, imported only when asked for.

Built-in backends are registered as "module:Class" strings so `import edge_runtime` imports no backend library.
Third-party backends register through the `edge_runtime.backends` entry-point group. A duplicate name is an error.
"""

from __future__ import annotations

import importlib

from edge_runtime.errors import UnknownBackendError
from edge_runtime.runtime.backends.base import Backend, LoadOptions, Quantization, TensorInfo

__all__ = ["Backend", "LoadOptions", "Quantization", "TensorInfo", "available", "get", "names", "register"]

_REGISTRY: dict[str, str | type[Backend]] = {}
_ENTRY_POINTS_LOADED = False


def register(name: str, target: str | type[Backend]) -> None:
    """Register a backend class (or a lazy "module:Class" path) under `name`."""
    if name in _REGISTRY:
        raise ValueError(f"backend {name!r} is already registered")
    _REGISTRY[name] = target


register("onnxruntime", "edge_runtime.runtime.backends.onnxruntime_backend:OnnxRuntimeBackend")
register("openvino", "edge_runtime.runtime.backends.openvino_backend:OpenVinoBackend")
register("tflite", "edge_runtime.runtime.backends.tflite_backend:TfliteBackend")


def _load_entry_points() -> None:
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED = True
    from importlib.metadata import entry_points  # here, not at import: it pulls in email, zipfile, csv, ast (~25 ms)

    for ep in entry_points(group="edge_runtime.backends"):
        register(ep.name, ep.value)


def names() -> list[str]:
    _load_entry_points()
    return list(_REGISTRY)


def get(name: str) -> type[Backend]:
    """The backend class registered as `name` (its module imported now); the library itself is imported on load.
    A built-in name needs no entry-point scan (a plugin cannot take a built-in's name anyway)."""
    if name not in _REGISTRY:
        _load_entry_points()
    target = _REGISTRY.get(name)
    if target is None:
        raise UnknownBackendError(f"backend {name!r} is not known", hint=f"choose one of: {', '.join(_REGISTRY)}")
    if isinstance(target, str):
        module, _, cls = target.partition(":")
        target = getattr(importlib.import_module(module), cls)
        _REGISTRY[name] = target
    return target


def available() -> dict[str, type[Backend]]:
    """Backends whose library is installed here."""
    out = {}
    for name in names():
        cls = get(name)
        try:
            cls.library_version()
        except Exception:  # noqa: BLE001 - any failure to import means "not available"; info shows why
            continue
        out[name] = cls
    return out
