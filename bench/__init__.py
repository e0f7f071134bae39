"""bench: the host-side harness. Drives targets (boards, local, GPU servers), keeps results, compares and reports.

It may import edge_runtime (wire protocol, result schema, local target); edge_runtime never imports it.
"""

__version__ = "0.1.0"
