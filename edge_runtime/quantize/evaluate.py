"""How a quantized model compares with FP32: outputs of every validation sample on the real backend, top-1 and
agreement, SQNR and maximum error, and latency measured with the same engine as `edge-runtime bench`."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def predict(model: Path, backend: str, samples: list[dict]) -> list[np.ndarray]:
    """Outputs (first output) of every sample, run one by one on the real backend."""
    from edge_runtime.runtime.load import load

    with load(model, backend=backend, sandbox=False) as s:
        name = s.outputs[0].name
        return [s.infer(feeds)[name].copy() for feeds in samples]


def compare(fp32: list[np.ndarray], int8: list[np.ndarray], labels: np.ndarray | None) -> dict:
    """Top-1 and agreement with labels; SQNR (dB) and max abs error of the outputs always."""
    a = np.concatenate([x.reshape(1, -1) for x in fp32]).astype(np.float64)
    b = np.concatenate([x.reshape(1, -1) for x in int8]).astype(np.float64)
    noise = np.sum((a - b) ** 2)
    with np.errstate(all="ignore"):
        sqnr = float(10 * np.log10(np.sum(a**2) / noise)) if noise > 0 else None
        max_err = float(np.max(np.abs(a - b)))
    out = {
        "samples": len(fp32),
        # None when the outputs are identical (infinite SQNR is not valid JSON), or not finite numbers at all
        "sqnr_db": sqnr if sqnr is not None and np.isfinite(sqnr) else None,
        "max_abs_error": max_err if np.isfinite(max_err) else None,
    }
    if a.shape[1] > 1:
        p32, p8 = a.argmax(1), b.argmax(1)
        out["top1_agreement"] = float(np.mean(p32 == p8))
        if labels is not None:
            out["fp32_top1"] = float(np.mean(p32 == labels))
            out["int8_top1"] = float(np.mean(p8 == labels))
            out["drop_points"] = (out["fp32_top1"] - out["int8_top1"]) * 100
        else:
            out["drop_points"] = (1.0 - out["top1_agreement"]) * 100  # against FP32's own answers
    return out


def latency_us(model: Path, backend: str, sample: dict, iterations: int) -> float:
    """Median latency with the measurement engine (inputs bound once, one thread)."""
    from edge_runtime.measure.loop import measure
    from edge_runtime.runtime.load import load

    with load(model, backend=backend, threads=1, sandbox=False) as s:
        s.bind(sample)
        m = measure(s.runner(), iterations=iterations, warmup=20)
    return float(np.median(m.samples_ns)) / 1e3
