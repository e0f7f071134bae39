"""`edge-runtime quantize`: FP32 ONNX -> INT8 with calibration data, checked against FP32, mixed precision.

Layer: imports runtime, measure (its latency figures come from the same engine as `bench`), system and errors.
"""

from edge_runtime.quantize.core import QuantizeConfig, Result, plan_outputs, run

__all__ = ["QuantizeConfig", "Result", "plan_outputs", "run"]
