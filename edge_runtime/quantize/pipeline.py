"""`quantize.run`: the order of a quantization, from checks to written files. Everything is built and measured in a
temporary folder; the outputs are written at the end, each atomically."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

from edge_runtime.errors import UserError
from edge_runtime.files.outputs import Output, check_distinct, plan_output, write_output
from edge_runtime.quantize.config import FEW_SAMPLES, METHODS, QuantizeConfig, Result
from edge_runtime.quantize.data import check_label_range, load_labels, load_samples
from edge_runtime.quantize.evaluate import compare, latency_us, predict
from edge_runtime.quantize.manifest import manifest_entry
from edge_runtime.quantize.nncf_path import PRESETS, nncf_plain, nncf_quantize
from edge_runtime.quantize.ort_path import (
    already_quantized,
    choose_activations,
    choose_flavour,
    mixed_precision,
    ort_quantize,
    preprocess,
    quantizable_nodes,
)
from edge_runtime.runtime.model import file_sha256, onnx_external_files
from edge_runtime.system.environment import installed_version


def no_vendor_telemetry() -> None:
    """NNCF and OpenVINO's model converter report usage through `openvino_telemetry`, which forks a sender process
    from a thread (it can hang the exit, and its children inherit our signal handlers) and writes an ID under
    ~/intel. Both fall back to a stub when the package cannot be imported: make it so, for this process. ONNX Runtime's
    own telemetry is stopped by its backend (ORT_DISABLE_TELEMETRY)."""
    if "openvino_telemetry" not in sys.modules:
        sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]  # import now raises ImportError


def plan_outputs(cfg: QuantizeConfig, json_dest: str | None = None) -> dict[str, Output]:
    """Every file `run` will write, checked now: the model (and an IR's .bin), its manifest, the JSON report. None may
    be an input (the model, calibration, validation or label files) or another of them."""
    out = Path(cfg.out)
    outs = {"--out": plan_output("--out", cfg.out, regular_only=True)}
    if out.suffix == ".xml":
        outs["weights"] = plan_output(
            "--out (its .bin)", str(out.with_suffix(".bin")), regular_only=True, follow_links=False
        )
    outs["manifest"] = plan_output(
        "--out (its manifest)", cfg.out + ".manifest.toml", regular_only=True, follow_links=False
    )
    if json_dest is not None:
        outs["--json"] = plan_output("--json", json_dest)
    inputs: list[tuple[str, object]] = [("the model", cfg.model)]
    if os.path.isfile(cfg.model):
        try:
            inputs += [("the model's external data", e) for e in onnx_external_files(Path(cfg.model))]
        except UserError:
            pass  # refused with its reason when the model is read
    for flag, src in (("--calibration", cfg.calibration), ("--validation", cfg.validation), ("--labels", cfg.labels)):
        if not src:
            continue
        inputs.append((flag, src))
        if os.path.isdir(src):  # never raises (a 300-character name is checked, with its message, when read)
            inputs += [(f"a {flag} file", f) for f in Path(src).iterdir()]
    check_distinct(outs.values(), inputs)
    return outs


def _measured_flavour(fp32, pre, out, calib, val, labels, fp32_pred, cfg, doc, res, say, tmp):
    """`--activations auto`: quantize with U8 and with S8 activations, measure both against FP32 (interleaved), keep
    the faster within the accuracy budget (ort_path.choose_flavour). Returns (flavour, its accuracy)."""
    paths, accs = {}, {}
    for f in ("u8", "s8"):
        say(f"calibrating ({cfg.method}) and quantizing to QDQ, {f.upper()} activations")
        paths[f] = tmp / f"int8_{f}.onnx"
        ort_quantize(pre, paths[f], calib, cfg, f, [])
        accs[f] = compare(fp32_pred, predict(paths[f], "onnxruntime", val), labels)
    say("measuring FP32, U8S8 and S8S8 latency, interleaved, 3 rounds")
    lat: dict[str, list[float]] = {"fp32": [], "u8": [], "s8": []}
    for _ in range(3):
        for k, path in (("fp32", fp32), ("u8", paths["u8"]), ("s8", paths["s8"])):
            lat[k].append(latency_us(path, "onnxruntime", calib[0], cfg.bench_iterations))
    p50 = {k: float(np.median(v)) for k, v in lat.items()}
    choice = choose_flavour(p50, {f: accs[f].get("drop_points") for f in accs}, cfg.max_accuracy_drop)
    m = choice["measured"]
    say(f"U8S8 {m['u8_speedup']:.2f}x, S8S8 {m['s8_speedup']:.2f}x FP32: kept {choice['type'].upper()}S8 "
        f"({choice['why']})")  # fmt: skip
    if not choice["faster_than_fp32"]:
        speeds = f"U8S8 {m['u8_speedup']:.2f}x, S8S8 {m['s8_speedup']:.2f}x"
        res.warnings.append(f"neither INT8 flavour runs faster than FP32 here ({speeds}): the model is kept for its "
                            "size and accuracy, not its speed")  # fmt: skip
    doc["activations"] = choice
    out.write_bytes(paths[choice["type"]].read_bytes())
    return choice["type"], accs[choice["type"]]


def _measured_preset(fp32, out, calib, val, labels, fp32_pred, cfg, doc, res, say, tmp):
    """The OpenVINO path's `--activations auto`: NNCF's two presets quantized, measured against FP32 on OpenVINO
    (interleaved), the faster within the budget kept (the same chooser). The kept IR is written to `out`. Returns
    (preset, its accuracy)."""
    paths, accs = {}, {}
    for p in PRESETS:
        say(f"NNCF quantize ({PRESETS[p]})")
        paths[p] = tmp / f"int8_{p}.xml"
        nncf_plain(fp32, paths[p], calib, p)
        accs[p] = compare(fp32_pred, predict(paths[p], "openvino", val), labels)
    say("measuring FP32 and both presets' latency on OpenVINO, interleaved, 3 rounds")
    runs = {"fp32": fp32, **paths}
    lat: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(3):
        for k, path in runs.items():
            lat[k].append(latency_us(path, "openvino", calib[0], cfg.bench_iterations))
    p50 = {k: float(np.median(v)) for k, v in lat.items()}
    names = {p: p.capitalize() for p in PRESETS}
    choice = choose_flavour(p50, {p: accs[p].get("drop_points") for p in accs}, cfg.max_accuracy_drop, names)
    m = choice["measured"]
    speeds = ", ".join(f"{names[p]} {m[f'{p}_speedup']:.2f}x" for p in PRESETS)
    say(f"{speeds} FP32: kept {names[choice['type']]} ({choice['why']})")
    if not choice["faster_than_fp32"]:
        res.warnings.append(f"neither NNCF preset runs faster than FP32 here ({speeds}): the model is kept for its "
                            "size and accuracy, not its speed")  # fmt: skip
    doc["activations"] = choice
    for suffix in (".xml", ".bin"):
        out.with_suffix(suffix).write_bytes(paths[choice["type"]].with_suffix(suffix).read_bytes())
    return choice["type"], accs[choice["type"]]


class Data(NamedTuple):
    """The samples a quantization reads: calibration, validation (the first calibration samples when none is given)
    and the validation labels (None: compared with FP32)."""

    calib: list
    val: list
    labels: np.ndarray | None


def run(cfg: QuantizeConfig, say=lambda _m: None, outputs: dict[str, Output] | None = None) -> Result:
    """Quantize as `cfg` says. Everything is built and measured in a temporary folder; the outputs are written at the
    end, each atomically, so a failure half-way leaves no half-written model and no manifest pointing to nothing."""
    from edge_runtime.runtime.model import inspect_model

    no_vendor_telemetry()
    res = Result()
    mf = inspect_model(cfg.model)
    want_suffix = _check_config(cfg, mf)
    outs = outputs if outputs is not None else plan_outputs(cfg)
    inputs, classes = _check_model(cfg, mf)
    data = _read_data(cfg, inputs, classes, res, say)
    fp32_pred = predict(mf.path, "onnxruntime" if cfg.backend == "onnxruntime" else "openvino", data.val)
    doc: dict = {
        "schema": "edge-runtime/quantize/1",
        "model": {"path": str(mf.path), "sha256": mf.sha256},
        "backend": cfg.backend,
        "method": cfg.method,
        "per_channel": cfg.per_channel,
        "calibration_samples": len(data.calib),
        "validation_samples": len(data.val),
    }
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        out = tmp / f"quantized{want_suffix}"
        if cfg.backend == "onnxruntime":
            acc, kept, plain_int8 = _quantize_onnxruntime(mf, out, data, fp32_pred, cfg, doc, res, say, tmp)
        elif cfg.backend == "openvino":
            acc, kept, plain_int8 = _quantize_openvino(mf, out, data, fp32_pred, cfg, doc, res, say, tmp)
        else:
            raise UserError(f"--backend {cfg.backend!r}: quantize supports onnxruntime and openvino")
        doc["kept_fp32"] = kept
        doc["precision"] = "mixed" if kept else "int8"
        doc["meets_budget"] = (
            None if cfg.max_accuracy_drop is None else acc.get("drop_points", 0.0) <= cfg.max_accuracy_drop + 1e-9
        )
        doc["size_bytes"] = _sizes(mf, out, tmp)
        models = {"fp32": mf.path, "int8": plain_int8 if kept else out}
        if kept:
            models["mixed"] = out
        say(f"measuring {', '.join(models)} latency, interleaved, 3 rounds")
        doc["latency_us"] = _latencies(models, cfg.backend, data.calib[0], cfg, final="mixed" if kept else "int8")
        doc["faster_than_fp32"] = doc["latency_us"]["speedup"] > 1.0
        doc["out"] = {"path": cfg.out, "sha256": file_sha256(out)}
        if out.suffix == ".xml":
            doc["out"]["weights_sha256"] = file_sha256(out.with_suffix(".bin"))
        dists = ("onnxruntime", "onnx", "openvino", "nncf", "numpy")
        doc["versions"] = {d: installed_version(d) or "not installed" for d in dists}
        doc["manifest_entry"] = manifest_entry(doc)
        doc["manifest_file"] = outs["manifest"].dest
        _write(outs, out, doc)
    res.doc = doc
    return res


def _check_config(cfg: QuantizeConfig, mf) -> str:
    """What `cfg` asks that no quantization could do, refused before anything is read; returns the suffix of --out."""
    if mf.format != "onnx":
        raise UserError(f"model {cfg.model!r}: quantize takes an FP32 ONNX model (got {mf.format})")
    if cfg.method not in METHODS:
        raise UserError(f"--method {cfg.method!r}: not known", hint=f"choose one of: {', '.join(METHODS)}")
    want_suffix = ".onnx" if cfg.backend == "onnxruntime" else ".xml"
    if Path(cfg.out).suffix != want_suffix:
        raise UserError(f"--out {cfg.out!r}: the {cfg.backend} path writes a {want_suffix} file")
    if cfg.max_accuracy_drop is not None and not (0.0 <= cfg.max_accuracy_drop <= 100.0):  # NaN fails both
        raise UserError(f"--max-accuracy-drop {cfg.max_accuracy_drop}: must be a number of points from 0 to 100")
    if cfg.max_accuracy_drop is not None and not cfg.validation:
        raise UserError("--max-accuracy-drop needs --validation data to measure the drop on")
    return want_suffix


def _check_model(cfg: QuantizeConfig, mf) -> tuple[list, int]:
    """The model loaded once (in the crash-check child) and refused if INT8 has nothing to do on it; returns its
    inputs and its number of classes (the first output's elements)."""
    from edge_runtime.runtime.load import load

    if cfg.backend == "openvino":  # imported by NNCF below, outside load(): a library that crashes is refused first
        from edge_runtime.runtime.sandbox import require_usable

        require_usable("openvino")
    # The first load runs in the crash-check child: a corrupted file (or a crashing library) is refused with one line.
    with load(mf.path, backend="onnxruntime") as s:
        inputs = list(s.inputs)
        classes = int(np.prod([d or 1 for d in s.outputs[0].shape]))
    if already_quantized(mf.path):
        raise UserError(
            f"model {cfg.model!r}: already quantized (it has QuantizeLinear/DequantizeLinear or integer ops)",
            hint="quantize the FP32 model",
        )
    if not quantizable_nodes(mf.path):
        raise UserError(
            f"model {cfg.model!r}: no Conv, Gemm, MatMul or ConvTranspose layer to quantize: INT8 would change nothing",
        )
    return inputs, classes


def _read_data(cfg: QuantizeConfig, inputs: list, classes: int, res: Result, say) -> Data:
    calib = load_samples(cfg.calibration, inputs, notes=res.warnings)
    if len(calib) < FEW_SAMPLES:
        res.warnings.append(f"only {len(calib)} calibration samples: representative sets are usually 100-500")
    val = (
        load_samples(cfg.validation, inputs, "validation data", notes=res.warnings)
        if cfg.validation
        else calib[: min(100, len(calib))]
    )
    labels = load_labels(cfg.validation, cfg.labels, len(val)) if cfg.validation else None
    if labels is not None:
        check_label_range(labels, classes, f"--labels {cfg.labels!r}" if cfg.labels else "labels")
    say(
        f"{len(calib)} calibration samples, {len(val)} validation samples"
        + (" with labels" if labels is not None else " (no labels: compared with FP32)")
    )
    return Data(calib, val, labels)


def _quantize_onnxruntime(mf, out: Path, data: Data, fp32_pred, cfg: QuantizeConfig, doc: dict, res: Result, say,
                          tmp: Path) -> tuple[dict, list[str], Path]:  # fmt: skip
    """QDQ with ONNX Runtime into `out`, layers given back to FP32 if the accuracy budget asks. Returns the accuracy
    kept, the layers kept in FP32 and the plain INT8 model (for the three-way latency)."""
    calib, val, labels = data
    kept: list[str] = []
    pre = preprocess(mf.path, tmp)
    if cfg.activations == "auto":  # both flavours, measured against FP32: the faster one within budget
        act, acc = _measured_flavour(mf.path, pre, out, calib, val, labels, fp32_pred, cfg, doc, res, say, tmp)
    else:
        act, why = choose_activations(cfg.activations)
        doc["activations"] = {"type": act, "weights": "s8", "why": why}
        say(f"activations {act.upper()}, weights S8: {why}")
        say(f"calibrating ({cfg.method}) and quantizing to QDQ")
        ort_quantize(pre, out, calib, cfg, act, [])
        acc = compare(fp32_pred, predict(out, "onnxruntime", val), labels)
    doc["accuracy_int8"] = acc
    plain_int8 = tmp / "int8.onnx"
    plain_int8.write_bytes(out.read_bytes())  # kept for the three-way latency if layers go back to FP32
    if cfg.max_accuracy_drop is not None and acc.get("drop_points", 0) > cfg.max_accuracy_drop:
        kept, acc = mixed_precision(pre, out, calib, val, labels, fp32_pred, cfg, act, acc, say, tmp)
        doc["accuracy_mixed"] = acc
    return acc, kept, plain_int8


def _quantize_openvino(mf, out: Path, data: Data, fp32_pred, cfg: QuantizeConfig, doc: dict, res: Result, say,
                       tmp: Path) -> tuple[dict, list[str], Path]:  # fmt: skip
    """NNCF into an IR at `out` (with its .bin), its own scheme; the same returns as _quantize_onnxruntime."""
    calib, val, labels = data
    kept: list[str] = []
    ignored = [
        f
        for f, on in (
            ("--method", cfg.method != "minmax"),
            ("--per-tensor", not cfg.per_channel),
            ("--activations", cfg.activations != "auto"),
        )
        if on
    ]
    if ignored:
        res.warnings.append(f"{', '.join(ignored)}: the openvino path uses NNCF's own scheme (ignored)")
    doc["method"], doc["per_channel"] = "nncf", True
    plain_int8 = tmp / "int8.xml"
    if cfg.activations == "auto":  # both presets, measured against FP32 as on the ONNX Runtime path
        preset, acc = _measured_preset(mf.path, out, calib, val, labels, fp32_pred, cfg, doc, res, say, tmp)
    else:
        preset = "performance"
        doc["activations"] = {"type": preset, "weights": "s8", "why": f"NNCF {PRESETS[preset]}"}
    if (cfg.max_accuracy_drop is not None and labels is not None) or cfg.activations != "auto":
        acc, kept = nncf_quantize(mf.path, out, calib, val, labels, fp32_pred, cfg, say, plain_int8, preset)
    doc["accuracy_int8"] = acc
    return acc, kept, plain_int8


def _sizes(mf, out: Path, tmp: Path) -> dict:
    """The FP32 and the quantized model's sizes, like with like."""
    if out.suffix == ".xml":
        # Like with like: the FP32 model as IR too. The weights (.bin) are what shrinks; the .xml topology of a
        # quantized IR grows (FakeQuantize and shape sub-graphs), which dominates on a model of ~25k weights.
        import openvino as ov

        ir32 = tmp / "fp32.xml"
        ov.save_model(ov.convert_model(str(mf.path)), str(ir32), compress_to_fp16=False)
        w32, w8 = ir32.with_suffix(".bin").stat().st_size, out.with_suffix(".bin").stat().st_size
        t32, t8 = w32 + ir32.stat().st_size, w8 + out.stat().st_size
    else:
        # ONNX: graph and weights in one file (the FP32 model's external data counted with it)
        w32, w8 = mf.size + sum(e.stat().st_size for e in mf.external), out.stat().st_size
        t32, t8 = w32, w8
    return {
        "fp32": w32,
        "quantized": w8,
        "ratio": round(w8 / w32, 3),
        "fp32_total": t32,
        "quantized_total": t8,
        "what": "weights (.bin)" if out.suffix == ".xml" else "model file",
    }


def _latencies(models: dict[str, Path], runner: str, sample, cfg: QuantizeConfig, final: str) -> dict[str, float]:
    """Each model's p50 in µs, measured interleaved in 3 rounds (drift falls on all alike), and the speedup of
    `final` (the model written) over FP32."""
    lat: dict[str, list[float]] = {k: [] for k in models}
    for _ in range(3):
        for k, path in models.items():
            lat[k].append(latency_us(path, runner, sample, cfg.bench_iterations))
    p50 = {f"{k}_p50": float(np.median(v)) for k, v in lat.items()}
    p50["quantized_p50"] = p50[f"{final}_p50"]
    p50["speedup"] = p50["fp32_p50"] / p50["quantized_p50"]
    return p50


def _write(outs: dict[str, Output], out: Path, doc: dict) -> None:
    """Weights first, model, then the manifest that points to them: never a manifest without its model."""
    if "weights" in outs:
        write_output(outs["weights"], out.with_suffix(".bin").read_bytes())
    write_output(outs["--out"], out.read_bytes())
    write_output(outs["manifest"], doc["manifest_entry"])
