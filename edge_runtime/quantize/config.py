"""What a quantization run is asked to do, and what it gives back."""

from __future__ import annotations

from dataclasses import dataclass, field

METHODS = ("minmax", "entropy", "percentile")
FEW_SAMPLES = 100  # representative sets are usually 100-500 samples
QUANTIZABLE = ("Conv", "Gemm", "MatMul", "ConvTranspose")


@dataclass
class QuantizeConfig:
    model: str
    calibration: str
    out: str
    backend: str = "onnxruntime"
    method: str = "minmax"
    per_channel: bool = True
    activations: str = "auto"  # auto | u8 | s8
    validation: str | None = None
    labels: str | None = None
    max_accuracy_drop: float | None = None  # points (percent)
    bench_iterations: int = 300


@dataclass
class Result:
    doc: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
