"""The ONNX Runtime path: pre-processing and static QDQ quantization with onnxruntime.quantization (not reinvented
here), the activation type for this CPU, and greedy mixed precision (layers kept in FP32 until a budget is met).
"""

from __future__ import annotations

import platform
from pathlib import Path

from edge_runtime.errors import ModelError, UserError
from edge_runtime.quantize.config import QUANTIZABLE, QuantizeConfig
from edge_runtime.quantize.data import calibration_reader
from edge_runtime.quantize.evaluate import compare, predict
from edge_runtime.runtime.model import onnx_external_files
from edge_runtime.system.root import SystemRoot


def cpu_flags(root: SystemRoot | None = None) -> set[str]:
    """The CPU's feature flags (x86 `flags`, ARM `Features`), read through the system root like every other read."""
    return (root or SystemRoot("/")).cpu_flags()


def choose_activations(requested: str, machine: str | None = None, flags: set[str] | None = None) -> tuple[str, str]:
    """(u8|s8, why) from the CPU alone: ONNX Runtime's x86 kernels run U8S8 faster than S8S8 without VNNI; with VNNI
    or on ARM, S8S8 (the ORT default) should cost nothing extra (onnxruntime.ai/docs: quantization). A guess, and a
    wrong one on some VNNI CPUs (an AMD EPYC ran S8S8 at 0.74x FP32, U8S8 at 1.57x): `--activations auto` measures
    both instead (`choose_flavour`); this rule only orders the two when their speeds tie."""
    if requested in ("u8", "s8"):
        return requested, f"--activations {requested}"
    machine = (machine or platform.machine()).lower()
    flags = cpu_flags() if flags is None else flags
    if machine in ("x86_64", "amd64", "i686"):
        vnni = sorted(flags & {"avx512_vnni", "avx_vnni", "amx_int8"})
        if vnni:
            return "s8", f"x86 with VNNI ({', '.join(vnni)}): S8S8 runs at full speed"
        return "u8", "x86 without VNNI: ONNX Runtime runs S8S8 slower than FP32 there, U8S8 is faster"
    return "s8", f"{machine}: S8S8 (ONNX Runtime's default)"


ORT_FLAVOURS = {"u8": "U8S8", "s8": "S8S8"}


def choose_flavour(
    p50_us: dict[str, float],
    drops: dict[str, float | None],
    budget: float | None,
    labels: dict[str, str] | None = None,
) -> dict:
    """The INT8 flavour to keep, from what was measured (a pure function: the chooser's tests inject both).

    `labels`: the two flavours and their names (ONNX Runtime's "u8" and "s8" activations by default; NNCF's presets on
    the OpenVINO path); `p50_us`: the median latency of "fp32" and of each flavour (interleaved rounds); `drops`: each
    flavour's accuracy drop in points (None: unknown, counted as 0); `budget`: the allowed drop, or None. The faster
    of the flavours within the budget is kept; when neither is within it, the one that drops least (mixed precision
    then works on it). Says whether the kept one beats FP32 at all."""
    labels = labels or ORT_FLAVOURS
    flavours = tuple(labels)
    within = [f for f in flavours if budget is None or (drops.get(f) or 0.0) <= budget + 1e-9]
    speed = {f: p50_us["fp32"] / p50_us[f] for f in flavours}
    if within:
        kept = min(within, key=lambda f: p50_us[f])
        other = next(f for f in flavours if f != kept)
        if len(within) == 2:
            why = f"{labels[kept]} measured faster ({speed[kept]:.2f}x FP32 against {speed[other]:.2f}x)"
        else:
            why = (f"{labels[kept]} is the one within the {budget:g}-point budget ({labels[other]} dropped "
                   f"{drops.get(other) or 0:.2f})")  # fmt: skip
    else:
        kept = min(flavours, key=lambda f: (drops.get(f) or 0.0, p50_us[f]))
        why = f"neither flavour is within the {budget:g}-point budget: {labels[kept]} drops least"
    faster = p50_us[kept] < p50_us["fp32"]
    return {
        "type": kept,
        "weights": "s8",
        "why": why,
        "measured": {
            "fp32_p50_us": p50_us["fp32"],
            **{f"{f}_p50_us": p50_us[f] for f in flavours},
            **{f"{f}_speedup": round(speed[f], 3) for f in flavours},
            **{f"{f}_drop_points": drops.get(f) for f in flavours},
        },
        "faster_than_fp32": faster,
    }


def ort_quantize(fp32: Path, out: Path, samples: list[dict], cfg: QuantizeConfig, act: str, exclude: list[str]) -> None:
    from edge_runtime.runtime.backends.onnxruntime_backend import import_ort

    import_ort()  # telemetry off before onnxruntime initialises (see there)
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    method = {
        "minmax": CalibrationMethod.MinMax,
        "entropy": CalibrationMethod.Entropy,
        "percentile": CalibrationMethod.Percentile,
    }[cfg.method]
    quantize_static(
        str(fp32),
        str(out),
        calibration_reader(samples),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8 if act == "u8" else QuantType.QInt8,
        weight_type=QuantType.QInt8,
        per_channel=cfg.per_channel,
        calibrate_method=method,
        nodes_to_exclude=exclude or None,
    )


def preprocess(model: Path, tmp: Path) -> Path:
    from edge_runtime.runtime.backends.onnxruntime_backend import import_ort

    import_ort()
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = tmp / "pre.onnx"
    src = model
    if onnx_external_files(model):
        # Weights in external files: ONNX Runtime's pre-processing looks for them beside its own temporary copy.
        # Quantize a single-file copy instead (a protobuf holds up to 2 GB, which INT8 board models are far below).
        import onnx

        src = tmp / "fp32_inline.onnx"
        try:
            onnx.save(onnx.load(str(model)), str(src))
        except (ValueError, OSError) as err:
            raise UserError(f"model {str(model)!r}: its external data cannot be put in one file: {err}") from err
    try:
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
    except Exception as err:
        raise UserError(f"model {str(model)!r}: ONNX Runtime pre-processing failed: {err}") from err
    # Layers are kept in FP32 by node name: give every unnamed node one (op type and position).
    import onnx

    m = onnx.load(str(pre))
    if any(not n.name for n in m.graph.node):
        for i, n in enumerate(m.graph.node):
            if not n.name:
                n.name = f"{n.op_type}_{i}"
        onnx.save(m, str(pre))
    return pre


def quantizable_nodes(model: Path) -> list[str]:
    import onnx

    return [n.name for n in onnx.load(str(model)).graph.node if n.op_type in QUANTIZABLE]


def already_quantized(model: Path) -> bool:
    if model.suffix == ".onnx":
        import onnx

        try:
            ops = {n.op_type for n in onnx.load(str(model), load_external_data=False).graph.node}
        except Exception as err:
            raise ModelError(f"model {str(model)!r}: not a valid ONNX model ({type(err).__name__}: {err})") from err
        return bool(
            ops & {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger"}
        )
    if model.suffix == ".xml":
        return "FakeQuantize" in model.read_text(errors="replace")
    return False


def mixed_precision(pre, out, calib, val, labels, fp32_pred, cfg, act, int8_acc, say, tmp):
    """Greedy forward selection: at each step keep in FP32 the one more layer that recovers the most accuracy, until
    the drop fits the budget. Plain one-at-a-time ranking misses layers that only help together (an outlier
    activation between two layers stays quantized unless both of them are kept), so each step re-tries them all."""
    nodes = quantizable_nodes(pre)
    say(f"INT8 drops {int8_acc['drop_points']:.2f} points > {cfg.max_accuracy_drop:g}: searching {len(nodes)} layers")
    kept: list[str] = []
    acc = int8_acc
    first_round: list[tuple[float, str]] = []
    trials = 0
    while acc["drop_points"] > cfg.max_accuracy_drop and len(kept) < len(nodes):
        best = None
        for node in (n for n in nodes if n not in kept):
            trials += 1
            trial = tmp / f"trial_{trials}.onnx"
            ort_quantize(pre, trial, calib, cfg, act, [*kept, node])
            t_acc = compare(fp32_pred, predict(trial, "onnxruntime", val), labels)
            if not kept:
                first_round.append((int8_acc["drop_points"] - t_acc["drop_points"], node))
            if best is None or t_acc["drop_points"] < best[0]["drop_points"]:
                best = (t_acc, node)
        assert best is not None
        acc, node = best
        kept.append(node)
        say(f"  keeping {', '.join(kept)} in FP32: drop {acc['drop_points']:.2f} points")
    if kept:
        ort_quantize(pre, out, calib, cfg, act, kept)
        acc = compare(fp32_pred, predict(out, "onnxruntime", val), labels)
    first_round.sort(key=lambda g: -g[0])
    acc["sensitivity"] = [{"layer": n, "recovered_alone_points": round(g, 3)} for g, n in first_round]
    acc["trials"] = trials
    return kept, acc
