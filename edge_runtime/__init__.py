"""edge_runtime: load INT8 models on ONNX Runtime, OpenVINO or TFLite/LiteRT and measure them on the board.

Importing this package imports no backend library (each is an extra) and never imports the host package `bench`.
"""

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
from edge_runtime.runtime.backends.base import Quantization, TensorInfo
from edge_runtime.runtime.load import FallbackWarning, load
from edge_runtime.runtime.session import BackendInfo, Session

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
