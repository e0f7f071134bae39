"""`edge-runtime ops` (issue 29): per-op placement and time for any engine, in one table.

Two sessions per run: one with profiling off, timed by the same loop as `edge-runtime bench` (the total the report
stands on), then a second one with the engine's profiler on (per-op times, placement). Nothing of the profiler
enters the first session or its loop. One module per engine, found by the backend's name; an engine without one
is refused in one line.

LiteRT is placement only (litert_ops.py: the DELEGATE nodes of the run's interpreter; no op profiler in its
Python package). ONNX Runtime's partial case: OpenVINO's provider (the onnxruntime-ep-openvino plugin) on the
reference model models/partial_fastgelu, FastGelu on the CPU between two OpenVINO subgraphs, its share measured.
Still to come (issue 29): OpenVINO HETERO/AUTO per-node affinity as partitions.
"""

from edge_runtime.ops.profile import ENGINES, profile_model
from edge_runtime.ops.record import SCHEMA, Counted, OpRow, OpsReport, Partition

__all__ = ["ENGINES", "SCHEMA", "Counted", "OpRow", "OpsReport", "Partition", "profile_model"]
