"""edge_runtime: load INT8 models on ONNX Runtime, OpenVINO or TFLite/LiteRT and measure them on the board.

Importing this package imports no backend library (each is an extra), never the host package `bench`, and not even
the runtime until it is used: `load`, `Session` and the record types are resolved on first access (PEP 562), so a CLI
call or an agent start that needs only a part pays only for that part (on a Cortex-A53 every 10 ms counts).
"""

from typing import TYPE_CHECKING

from edge_runtime.errors import (
    BackendNotInstalledError,
    CheckFailedError,
    DeviceError,
    EdgeRuntimeError,
    FeedError,
    InferenceError,
    Interrupted,
    MemoryLockError,
    ModelError,
    PinningError,
    SchedulingError,
    SessionClosedError,
    UnknownBackendError,
    UserError,
)

if TYPE_CHECKING:
    from edge_runtime.runtime.backends.base import Quantization, TensorInfo
    from edge_runtime.runtime.load import FallbackWarning, load
    from edge_runtime.runtime.session import BackendInfo, Session

_LAZY = {
    "Quantization": "edge_runtime.runtime.backends.base",
    "TensorInfo": "edge_runtime.runtime.backends.base",
    "FallbackWarning": "edge_runtime.runtime.load",
    "load": "edge_runtime.runtime.load",
    "BackendInfo": "edge_runtime.runtime.session",
    "Session": "edge_runtime.runtime.session",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'edge_runtime' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__version__ = "0.1.0"

__all__ = [
    "BackendInfo",
    "BackendNotInstalledError",
    "CheckFailedError",
    "DeviceError",
    "EdgeRuntimeError",
    "FallbackWarning",
    "FeedError",
    "InferenceError",
    "Interrupted",
    "MemoryLockError",
    "ModelError",
    "PinningError",
    "Quantization",
    "SchedulingError",
    "Session",
    "SessionClosedError",
    "TensorInfo",
    "UnknownBackendError",
    "UserError",
    "__version__",
    "load",
]
