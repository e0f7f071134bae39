"""The OpenVINO path: NNCF (`nncf.quantize`, or `nncf.quantize_with_accuracy_control` given labelled validation data
and a budget), saved as IR; the layers NNCF reverted to floating point are read back from the IR."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import numpy as np

from edge_runtime.errors import UserError
from edge_runtime.quantize.evaluate import compare, predict

# NNCF's two presets: symmetric activations (PERFORMANCE, the one OpenVINO documents for CPU) or asymmetric ones
# (MIXED, a zero point per tensor: more accurate where activations are not centred, sometimes slower).
PRESETS = {
    "performance": "performance preset (symmetric activations)",
    "mixed": "mixed preset (asymmetric activations)",
}


@contextlib.contextmanager
def _progress_to_stderr():
    """NNCF draws its progress bars (rich) on stdout, where `--json -` writes the result: send them to stderr."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def _imports():
    try:
        import nncf
        import openvino as ov
    except ImportError as err:
        raise UserError(f"the openvino path needs NNCF ({err})", hint="pip install 'edge-runtime[quantize]'") from err
    return nncf, ov


def _dataset(nncf, ov_model, calib):
    input_names = [p.get_any_name() for p in ov_model.inputs]
    to_ov = lambda feeds: {n: feeds[n] for n in input_names if n in feeds} or list(feeds.values())  # noqa: E731
    return nncf.Dataset(calib, to_ov), to_ov


def nncf_plain(model: Path, out: Path, calib, preset: str) -> None:
    """`nncf.quantize` with one of PRESETS, saved as IR."""
    nncf, ov = _imports()
    ov_model = ov.Core().read_model(str(model))
    calib_ds, _ = _dataset(nncf, ov_model, calib)
    with _progress_to_stderr():
        q = nncf.quantize(ov_model, calib_ds, preset=nncf.QuantizationPreset(preset), subset_size=len(calib))
    ov.save_model(q, str(out), compress_to_fp16=False)


def nncf_quantize(
    model: Path, out: Path, calib, val, labels, fp32_pred, cfg, say, plain_out: Path, preset="performance"
):
    nncf, ov = _imports()
    ov_model = ov.Core().read_model(str(model))
    calib_ds, to_ov = _dataset(nncf, ov_model, calib)
    preset_name, preset = preset, nncf.QuantizationPreset(preset)
    kept: list[str] = []
    if cfg.max_accuracy_drop is not None and labels is not None:
        val_items = list(zip(val, labels, strict=True))
        val_ds = nncf.Dataset(val_items, lambda item: to_ov(item[0]))

        def validate(compiled, items) -> float:
            out_port = compiled.outputs[0]
            hits = [int(np.argmax(compiled(to_ov(f))[out_port])) == int(y) for f, y in items]
            return float(np.mean(hits))

        say(f"NNCF quantize_with_accuracy_control (max drop {cfg.max_accuracy_drop:g} points)")
        with _progress_to_stderr():
            q = nncf.quantize_with_accuracy_control(
                ov_model,
                calib_ds,
                val_ds,
                validate,
                max_drop=cfg.max_accuracy_drop / 100.0,
                preset=preset,
                subset_size=len(calib),
            )
        # NNCF stores quantized weights as an int8 Constant -> Convert -> Multiply chain; a layer it reverted to
        # floating point reads its weights straight from a float Constant.
        kept = []
        for op in q.get_ops():
            if op.get_type_name() in ("Convolution", "GroupConvolution", "MatMul") and len(op.inputs()) > 1:
                src = op.input(1).get_source_output().get_node()
                if src.get_type_name() == "Constant" and src.get_element_type().is_real():
                    kept.append(op.get_friendly_name().removesuffix("/WithoutBiases"))
        kept.sort()
    else:
        say(f"NNCF quantize ({PRESETS[preset_name]})")
        with _progress_to_stderr():
            q = nncf.quantize(ov_model, calib_ds, preset=preset, subset_size=len(calib))
    ov.save_model(q, str(out), compress_to_fp16=False)
    acc = compare(fp32_pred, predict(out, "openvino", val), labels)
    if kept:  # the all-INT8 model too, to price the layers kept in FP32
        with _progress_to_stderr():
            plain = nncf.quantize(ov.Core().read_model(str(model)), calib_ds, preset=preset, subset_size=len(calib))
        ov.save_model(plain, str(plain_out), compress_to_fp16=False)
    return acc, kept
