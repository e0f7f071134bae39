"""`edge-runtime quantize`: FP32 -> INT8 with representative calibration data, checked against FP32, with the most
sensitive layers kept in FP32 when INT8 costs more accuracy than allowed.

ONNX Runtime path: `onnxruntime.quantization` (pre-processing, static QDQ calibration: not reinvented here). OpenVINO
path: NNCF (`nncf.quantize`, or `nncf.quantize_with_accuracy_control` given validation data and a budget), saved as IR.
Heavy libraries are imported only here, only when asked for (extra `edge-runtime[quantize]`).
"""

from __future__ import annotations

import hashlib
import os
import platform
import stat
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

from edge_runtime.errors import ModelError, UserError
from edge_runtime.runtime.model import onnx_external_files
from edge_runtime.system.files import Output, check_distinct, check_input, load_npy, load_npz, plan_output, write_output

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


# ------------------------------------------------------------------------------------------------------------ data
def _load_file(path: Path, what: str) -> dict[str, np.ndarray] | list[np.ndarray]:
    if path.suffix == ".npy":
        return [load_npy(path, what)]
    return load_npz(path, what)


def load_samples(
    source: str, inputs, what: str = "calibration data", skip_keys=("y", "labels"), notes: list[str] | None = None
) -> list[dict]:
    """A .npy/.npz file or a folder of them -> one feed dict per sample, checked against the model's inputs.

    Arrays are stacked along axis 0 (N samples); keyed by input name, else taken in input order (a single-input
    model also accepts any one array, e.g. "x"). Each sample must have the input's shape (batch 1 added when the
    model's first dimension is 1 and the array lacks it).
    """
    files = data_files(source, what, notes)
    names = [t.name for t in inputs]
    per_input: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for f in files:
        data = _load_file(f, what)
        if isinstance(data, dict):
            arrays = {k: v for k, v in data.items() if k not in skip_keys}
            if all(n in arrays for n in names):
                chosen = [arrays[n] for n in names]
            elif len(arrays) == len(names):
                chosen = list(arrays.values())
            else:
                raise UserError(
                    f"{what} {str(f)!r}: holds {', '.join(arrays)}; the model's inputs are {', '.join(names)}"
                )
        else:
            if len(names) != 1:
                raise UserError(
                    f"{what} {str(f)!r}: one array for a model with {len(names)} inputs; use .npz keyed by input name"
                )
            chosen = data
        for t, arr in zip(inputs, chosen, strict=True):
            want = tuple(t.shape)
            arr = np.asarray(arr)
            if arr.shape[1:] == want[1:] and (want[0] in (None, 1) or arr.shape[0] % (want[0] or 1) == 0):
                samples = [arr[i : i + 1] for i in range(arr.shape[0])]
            elif arr.shape == want:
                samples = [arr]
            else:
                shown = "(" + ", ".join("?" if d is None else str(d) for d in want) + ")"
                raise UserError(
                    f"{what} {str(f)!r}: input {t.name!r} expects samples of shape {shown}, got an "
                    f"array of shape {arr.shape}"
                )
            if arr.dtype.kind not in "fiu":
                raise UserError(f"{what} {str(f)!r}: input {t.name!r} has dtype {arr.dtype}, not numbers")
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                bad = int(np.count_nonzero(~np.isfinite(arr)))
                rows = np.flatnonzero(~np.isfinite(arr.reshape(arr.shape[0], -1)).all(axis=1)) if arr.ndim else [0]
                raise UserError(
                    f"{what} {str(f)!r}: input {t.name!r} holds {bad} value(s) that are NaN or infinite "
                    f"(first in sample {int(rows[0])}); {what} must be finite numbers"
                )
            per_input[t.name] += [s.astype(t.dtype) for s in samples]
    counts = {len(v) for v in per_input.values()}
    if len(counts) != 1:
        raise UserError(f"{what} {source!r}: inputs have different sample counts {sorted(counts)}")
    n = counts.pop()
    if n == 0:
        raise UserError(f"{what} {source!r}: no samples")
    return [{name: per_input[name][i] for name in names} for i in range(n)]


def data_files(source: str, what: str, notes: list[str] | None = None) -> list[Path]:
    """A .npy/.npz file, or the .npy/.npz files of a folder (hidden ones left out), each checked to be a regular file
    before it is read. What a folder holds besides is named in `notes`, not used silently."""
    st = check_input(source, what, directory=None)
    p = Path(source)
    if not stat.S_ISDIR(st.st_mode):
        if p.suffix not in (".npy", ".npz"):
            raise UserError(f"{what} {source!r}: not a .npy or .npz file")
        return [p]
    entries = sorted(p.iterdir())
    files = [f for f in entries if f.suffix in (".npy", ".npz") and not f.name.startswith(".")]
    if not files:
        raise UserError(f"{what} {source!r}: the folder holds no .npy or .npz files")
    skipped = [f.name for f in entries if f not in files]
    if skipped and notes is not None:
        shown = ", ".join(skipped[:5]) + (" ..." if len(skipped) > 5 else "")
        notes.append(f"{what} {source!r}: {len(skipped)} entr{'y' if len(skipped) == 1 else 'ies'} not used ({shown})")
    for f in files:
        check_input(f, what)
    return files


def load_labels(validation: str, labels: str | None, n: int) -> np.ndarray | None:
    """Labels from --labels (.npy), or the "y"/"labels" array of the validation .npz; None when there are none."""
    arr = None
    where = f"--labels {labels!r}" if labels else f"validation data {validation!r}"
    if labels:
        arr = load_npy(labels, "--labels")
    elif Path(validation).suffix == ".npz":
        z = load_npz(validation, "validation data")
        for k in ("y", "labels"):
            if k in z:
                arr = z[k]
    if arr is None:
        return None
    arr = np.asarray(arr)
    if arr.ndim == 2 and arr.shape[1] > 1:
        arr = arr.argmax(axis=1)  # one-hot
    elif arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise UserError(f"{where}: expected one class index per sample (or one-hot rows), got shape {arr.shape}")
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all() or not np.array_equal(arr, np.round(arr)):
            raise UserError(f"{where}: labels are {arr.dtype} values that are not whole numbers (class indices are)")
    elif arr.dtype.kind not in "iub":
        raise UserError(f"{where}: labels of dtype {arr.dtype} are not class indices")
    if len(arr) != n:
        raise UserError(f"{where}: {len(arr)} labels for {n} validation samples")
    return arr.astype(np.int64)


def check_label_range(labels: np.ndarray, classes: int, source: str) -> None:
    """Every label names one of the model's outputs: a label of -100 or 1000 for 10 classes is a mistake that would
    read as 0% top-1 and pass any budget."""
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= classes:
        raise UserError(
            f"{source}: labels run from {lo} to {hi}, but the model has {classes} classes (0 to {classes - 1})"
        )


# ------------------------------------------------------------------------------------------------------ the CPU
def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def choose_activations(requested: str, machine: str | None = None, flags: set[str] | None = None) -> tuple[str, str]:
    """(u8|s8, why). ONNX Runtime's x86 kernels run U8S8 faster than S8S8 without VNNI; with VNNI or on ARM, S8S8
    (the ORT default) costs nothing extra (onnxruntime.ai/docs: performance/model-optimizations/quantization)."""
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


# -------------------------------------------------------------------------------------------------- ORT path
def _ort_quantize(
    fp32: Path, out: Path, samples: list[dict], cfg: QuantizeConfig, act: str, exclude: list[str]
) -> None:
    from edge_runtime.runtime.backends.onnxruntime_backend import _ort

    _ort()  # telemetry off before onnxruntime initialises (see there)
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(samples)

        def get_next(self):
            return next(self.it, None)

    method = {
        "minmax": CalibrationMethod.MinMax,
        "entropy": CalibrationMethod.Entropy,
        "percentile": CalibrationMethod.Percentile,
    }[cfg.method]
    quantize_static(
        str(fp32),
        str(out),
        Reader(),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8 if act == "u8" else QuantType.QInt8,
        weight_type=QuantType.QInt8,
        per_channel=cfg.per_channel,
        calibrate_method=method,
        nodes_to_exclude=exclude or None,
    )


def _preprocess(model: Path, tmp: Path) -> Path:
    from edge_runtime.runtime.backends.onnxruntime_backend import _ort

    _ort()
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


# ------------------------------------------------------------------------------------------------ evaluation
def predict(model: Path, backend: str, samples: list[dict]) -> list[np.ndarray]:
    """Outputs (first output) of every sample, run one by one on the real backend."""
    from edge_runtime.runtime.session import load

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
    from edge_runtime.runtime.session import load

    with load(model, backend=backend, threads=1, sandbox=False) as s:
        s.bind(sample)
        m = measure(s.runner(), iterations=iterations, warmup=20)
    return float(np.median(m.samples_ns)) / 1e3


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _v(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


# ---------------------------------------------------------------------------------------------------------- main
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
        outs["weights"] = plan_output("--out (its .bin)", str(out.with_suffix(".bin")), regular_only=True)
    outs["manifest"] = plan_output("--out (its manifest)", cfg.out + ".manifest.toml", regular_only=True)
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


def run(cfg: QuantizeConfig, say=lambda _m: None, outputs: dict[str, Output] | None = None) -> Result:
    """Quantize as `cfg` says. Everything is built and measured in a temporary folder; the outputs are written at the
    end, each atomically, so a failure half-way leaves no half-written model and no manifest pointing to nothing."""
    from edge_runtime.runtime.model import inspect_model
    from edge_runtime.runtime.session import load

    no_vendor_telemetry()
    res = Result()
    mf = inspect_model(cfg.model)
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
    outs = outputs if outputs is not None else plan_outputs(cfg)
    # The first load runs in the crash-check child: a corrupted file is refused with one line, never a crash here.
    with load(mf.path, backend="onnxruntime") as s:
        inputs = list(s.inputs)
        classes = int(np.prod([d or 1 for d in s.outputs[0].shape]))
    if already_quantized(mf.path):
        raise UserError(
            f"model {cfg.model!r}: already quantized (it has QuantizeLinear/DequantizeLinear or integer ops)",
            hint="quantize the FP32 model",
        )
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

    fp32_pred = predict(mf.path, "onnxruntime" if cfg.backend == "onnxruntime" else "openvino", val)
    doc: dict = {
        "schema": "edge-runtime/quantize/1",
        "model": {"path": str(mf.path), "sha256": mf.sha256},
        "backend": cfg.backend,
        "method": cfg.method,
        "per_channel": cfg.per_channel,
        "calibration_samples": len(calib),
        "validation_samples": len(val),
    }
    kept: list[str] = []
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        out = tmp / f"quantized{want_suffix}"
        if cfg.backend == "onnxruntime":
            act, why = choose_activations(cfg.activations)
            doc["activations"] = {"type": act, "weights": "s8", "why": why}
            say(f"activations {act.upper()}, weights S8: {why}")
            pre = _preprocess(mf.path, tmp)
            say(f"calibrating ({cfg.method}) and quantizing to QDQ")
            _ort_quantize(pre, out, calib, cfg, act, [])
            acc = compare(fp32_pred, predict(out, "onnxruntime", val), labels)
            doc["accuracy_int8"] = acc
            plain_int8 = tmp / "int8.onnx"
            plain_int8.write_bytes(out.read_bytes())  # kept for the three-way latency if layers go back to FP32
            if cfg.max_accuracy_drop is not None and acc.get("drop_points", 0) > cfg.max_accuracy_drop:
                kept, acc = _mixed_precision(pre, out, calib, val, labels, fp32_pred, cfg, act, acc, say, tmp)
                doc["accuracy_mixed"] = acc
            runner = "onnxruntime"
        elif cfg.backend == "openvino":
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
            acc, kept = _nncf(mf.path, out, calib, val, labels, fp32_pred, cfg, say, plain_int8)
            doc["accuracy_int8"] = acc
            doc["activations"] = {"type": "u8/s8 per NNCF preset", "weights": "s8", "why": "NNCF performance preset"}
            runner = "openvino"
        else:
            raise UserError(f"--backend {cfg.backend!r}: quantize supports onnxruntime and openvino")
        doc["kept_fp32"] = kept
        doc["precision"] = "mixed" if kept else "int8"
        doc["meets_budget"] = (
            None if cfg.max_accuracy_drop is None else acc.get("drop_points", 0.0) <= cfg.max_accuracy_drop + 1e-9
        )
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
        doc["size_bytes"] = {
            "fp32": w32,
            "quantized": w8,
            "ratio": round(w8 / w32, 3),
            "fp32_total": t32,
            "quantized_total": t8,
            "what": "weights (.bin)" if out.suffix == ".xml" else "model file",
        }
        models = {"fp32": mf.path, "int8": plain_int8 if kept else out}
        if kept:
            models["mixed"] = out
        say(f"measuring {', '.join(models)} latency, interleaved, 3 rounds")
        lat: dict[str, list[float]] = {k: [] for k in models}
        for _ in range(3):
            for k, path in models.items():
                lat[k].append(latency_us(path, runner, calib[0], cfg.bench_iterations))
        doc["latency_us"] = {f"{k}_p50": float(np.median(v)) for k, v in lat.items()}
        final = "mixed" if kept else "int8"
        doc["latency_us"]["quantized_p50"] = doc["latency_us"][f"{final}_p50"]
        doc["latency_us"]["speedup"] = doc["latency_us"]["fp32_p50"] / doc["latency_us"]["quantized_p50"]
        doc["out"] = {"path": cfg.out, "sha256": _sha(out)}
        if out.suffix == ".xml":
            doc["out"]["weights_sha256"] = _sha(out.with_suffix(".bin"))
        doc["versions"] = {d: _v(d) for d in ("onnxruntime", "onnx", "openvino", "nncf", "numpy")}
        doc["manifest_entry"] = manifest_entry(doc)
        doc["manifest_file"] = outs["manifest"].dest
        # Weights first, model, then the manifest that points to them: never a manifest without its model.
        if "weights" in outs:
            write_output(outs["weights"], out.with_suffix(".bin").read_bytes())
        write_output(outs["--out"], out.read_bytes())
        write_output(outs["manifest"], doc["manifest_entry"])
    res.doc = doc
    return res


def _mixed_precision(pre, out, calib, val, labels, fp32_pred, cfg, act, int8_acc, say, tmp):
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
            _ort_quantize(pre, trial, calib, cfg, act, [*kept, node])
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
        _ort_quantize(pre, out, calib, cfg, act, kept)
        acc = compare(fp32_pred, predict(out, "onnxruntime", val), labels)
    first_round.sort(key=lambda g: -g[0])
    acc["sensitivity"] = [{"layer": n, "recovered_alone_points": round(g, 3)} for g, n in first_round]
    acc["trials"] = trials
    return kept, acc


def _nncf(model: Path, out: Path, calib, val, labels, fp32_pred, cfg, say, plain_out: Path):
    try:
        import nncf
        import openvino as ov
    except ImportError as err:
        raise UserError(f"the openvino path needs NNCF ({err})", hint="pip install 'edge-runtime[quantize]'") from err
    ov_model = ov.Core().read_model(str(model))
    input_names = [p.get_any_name() for p in ov_model.inputs]
    to_ov = lambda feeds: {n: feeds[n] for n in input_names if n in feeds} or list(feeds.values())  # noqa: E731
    calib_ds = nncf.Dataset(calib, to_ov)
    preset = nncf.QuantizationPreset.PERFORMANCE
    kept: list[str] = []
    if cfg.max_accuracy_drop is not None and labels is not None:
        val_items = list(zip(val, labels, strict=True))
        val_ds = nncf.Dataset(val_items, lambda item: to_ov(item[0]))

        def validate(compiled, items) -> float:
            out_port = compiled.outputs[0]
            hits = [int(np.argmax(compiled(to_ov(f))[out_port])) == int(y) for f, y in items]
            return float(np.mean(hits))

        say(f"NNCF quantize_with_accuracy_control (max drop {cfg.max_accuracy_drop:g} points)")
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
        say("NNCF quantize (performance preset)")
        q = nncf.quantize(ov_model, calib_ds, preset=preset, subset_size=len(calib))
    ov.save_model(q, str(out), compress_to_fp16=False)
    acc = compare(fp32_pred, predict(out, "openvino", val), labels)
    if kept:  # the all-INT8 model too, to price the layers kept in FP32
        plain = nncf.quantize(ov.Core().read_model(str(model)), calib_ds, preset=preset, subset_size=len(calib))
        ov.save_model(plain, str(plain_out), compress_to_fp16=False)
    return acc, kept


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
        f"calibration_samples = {doc['calibration_samples']}",
        f'provenance = "{how}"',
        "kept_fp32 = [" + ", ".join(f'"{k}"' for k in doc["kept_fp32"]) + "]",
    ]
    acc_keys = ("fp32_top1", "int8_top1", "top1_agreement", "sqnr_db", "max_abs_error")
    parts = [f"{k} = {round(acc[k], 6)}" for k in acc_keys if acc.get(k) is not None and np.isfinite(acc[k])]
    lines.append("accuracy = { " + ", ".join(parts) + " }")
    return "\n".join(lines) + "\n"
