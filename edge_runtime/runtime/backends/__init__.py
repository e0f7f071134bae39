"""Backend registry: name -> plugin class, imported only when asked for.

Built-in backends are registered as "module:Class" strings so `import edge_runtime` imports no backend library.
Third-party backends register through the `edge_runtime.backends` entry-point group. A duplicate name is an error.
The registry's rules are edge_runtime.plugins' (the host's targets follow the same ones).
"""

from __future__ import annotations

from edge_runtime.errors import UnknownBackendError
from edge_runtime.plugins import LazyRegistry
from edge_runtime.runtime.backends.base import Backend, LoadOptions, Quantization, TensorInfo

__all__ = ["Backend", "LoadOptions", "Quantization", "TensorInfo", "available", "get", "names", "register"]

_BACKENDS: LazyRegistry[Backend] = LazyRegistry(
    "backend", "edge_runtime.backends", lambda _name, cls: issubclass(cls, Backend),
    "an edge_runtime.runtime.backends.base.Backend",
)  # fmt: skip
register = _BACKENDS.register

register("onnxruntime", "edge_runtime.runtime.backends.onnxruntime_backend:OnnxRuntimeBackend")
register("openvino", "edge_runtime.runtime.backends.openvino_backend:OpenVinoBackend")
register("tflite", "edge_runtime.runtime.backends.tflite_backend:TfliteBackend")


def names() -> list[str]:
    return _BACKENDS.names()


def get(name: str) -> type[Backend]:
    """The backend class registered as `name` (its module imported now); the library itself is imported on load."""
    cls = _BACKENDS.get(name)
    if cls is None:
        raise UnknownBackendError(f"backend {name!r} is not known", hint=f"choose one of: {', '.join(_BACKENDS.items)}")
    return cls


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
