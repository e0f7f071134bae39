"""The one place edge_runtime touches the system: reads of the observed system through `SystemRoot` (a captured
tree or `/`), actions on this process (`process`), CPU lists, isolation, thermal sensors and the sampler, the tuning
audit and scripts, board profiles. System reads and actions only: general I/O (the files users name, the outputs
written, locks, Prometheus textfiles) is `edge_runtime.files`.

Layer: imports `edge_runtime.errors`, `edge_runtime.files` and `edge_runtime.limits` only.
"""

from edge_runtime.system.root import SystemRoot

__all__ = ["SystemRoot"]
