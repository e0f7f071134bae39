"""The runtime: `load()` a model file on a backend plugin and get a `Session` with inputs bound once.

Layer: imports `edge_runtime.system` and `edge_runtime.errors` only; never measure, quantize or cli. A model is first
loaded in the crash-check child (`sandbox`) so a file that crashes a native library cannot take the caller down.
"""

from edge_runtime.runtime.load import FallbackWarning, OversubscriptionWarning, load
from edge_runtime.runtime.session import BackendInfo, Session

__all__ = ["BackendInfo", "FallbackWarning", "OversubscriptionWarning", "Session", "load"]
