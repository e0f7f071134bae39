"""The one place edge_runtime touches the system: reads of the observed system through `SystemRoot` (a captured
tree or `/`), actions on this process (`process`), CPU lists, isolation, thermal sensors and the sampler, the tuning
audit and scripts, board profiles, Prometheus textfiles, and the files users name (inputs checked, outputs written).

Layer: imports `edge_runtime.errors` only.
"""

from edge_runtime.system.root import SystemRoot

__all__ = ["SystemRoot"]
