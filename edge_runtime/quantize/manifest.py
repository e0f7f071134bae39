"""The `[[artifact]]` entry of models/manifest.toml written beside a quantized model."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np


def _flavour(doc: dict) -> list[str]:
    """The INT8 flavour, as models/manifest.toml says it (ONNX Runtime: activations and weights; OpenVINO: NNCF's
    preset), and the speed-up over FP32 measured when it was written."""
    act = doc.get("activations") or {}
    kind = act.get("type", "")
    lines = [f'activations = "{kind}"', 'weights = "s8"'] if kind in ("u8", "s8") else [f'nncf_preset = "{kind}"']
    speedup = (doc.get("latency_us") or {}).get("speedup")
    if speedup is not None and np.isfinite(speedup):
        lines.append(f"speedup = {round(float(speedup), 3)}")
    return lines


def manifest_entry(doc: dict) -> str:
    """A [[artifact]] block in models/manifest.toml's layout."""
    out = doc["out"]
    acc = doc.get("accuracy_mixed") or doc["accuracy_int8"]
    lines = ["[[artifact]]", f'file = "{Path(out["path"]).name}"', f'sha256 = "{out["sha256"]}"']
    if "weights_sha256" in out:
        lines += [
            f'weights_file = "{Path(out["path"]).with_suffix(".bin").name}"',
            f'weights_sha256 = "{out["weights_sha256"]}"',
        ]
    fmt = "openvino" if out["path"].endswith(".xml") else "onnx"
    how = (
        f"edge-runtime quantize --backend {doc['backend']} --method {doc['method']} "
        f"{'--per-channel' if doc['per_channel'] else '--per-tensor'} from {Path(doc['model']['path']).name} "
        f"(sha256 {doc['model']['sha256'][:12]}); {time.strftime('%Y-%m-%d')}"
    )
    lines += [
        f'format = "{fmt}"',
        f'precision = "{doc["precision"]}"',
        *_flavour(doc),
        f"calibration_samples = {doc['calibration_samples']}",
        f'provenance = "{how}"',
        "kept_fp32 = [" + ", ".join(f'"{k}"' for k in doc["kept_fp32"]) + "]",
    ]
    acc_keys = ("fp32_top1", "int8_top1", "top1_agreement", "sqnr_db", "max_abs_error")
    parts = [f"{k} = {round(acc[k], 6)}" for k in acc_keys if acc.get(k) is not None and np.isfinite(acc[k])]
    lines.append("accuracy = { " + ", ".join(parts) + " }")
    return "\n".join(lines) + "\n"
