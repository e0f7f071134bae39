"""`edge-runtime quantize`: FP32 ONNX -> INT8 with calibration data, checked against FP32, mixed precision.

config (what is asked), data (calibration/validation/labels), ort_path (ONNX Runtime QDQ, mixed precision),
nncf_path (OpenVINO via NNCF), evaluate (accuracy and latency), manifest, pipeline (`run`, the order of it all).
Layer: imports runtime, measure (latency from the same engine as `bench`), system and errors.
"""

from edge_runtime.quantize.config import QuantizeConfig, Result
from edge_runtime.quantize.ort_path import choose_activations, cpu_flags
from edge_runtime.quantize.pipeline import no_vendor_telemetry, plan_outputs, run

__all__ = ["QuantizeConfig", "Result", "choose_activations", "cpu_flags", "no_vendor_telemetry", "plan_outputs", "run"]
