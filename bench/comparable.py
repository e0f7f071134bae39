"""What two runs have in common, and whether their numbers answer one question.

Comparing configurations is a first-class use (issue 25): runs of the same model on the same board with different
backends, backend versions, devices, delegates, threads, CPUs, precisions, model formats or targets compare as they
are; what differs is said above the table (`differs`). Two different targets on different boards or CPUs (a board
against its sibling or against a GPU server: the edge-versus-server question) compare too, the boards said in
`differs`. A comparison is refused (exit 2 unless --force) when the runs are of different models, input shapes
(samples per inference), scenarios or rates, or of one target whose board or CPU changed: those answer another
question.

Decided here:
- Device names compare case-insensitively ('cpu' and 'CPU' are one device: ONNX Runtime and OpenVINO spell it so).
- "The same model" is the same sha256, or the same model in another precision or format: the file names (the
  store's model name, else the file's) equal once the extension and the precision words (int8, fp32, qdq, ...) are
  dropped, and the records' precision or format differs (digits_cnn_int8.onnx, digits_cnn_int8.xml and
  digits_cnn_fp32.tflite are one model). Same name, precision and format but another hash is another model (new
  weights): refused.
- The input shape is what the record holds of it: samples per inference (config.batch, absent: 1) and, where a
  record lists them, its inputs' shapes.
"""

from __future__ import annotations

import os
import re

PRECISION_WORDS = {"int8", "uint8", "u8s8", "s8s8", "fp32", "float32", "fp16", "float16", "bf16", "qdq", "quant",
                   "quantized", "int16", "mixed"}  # fmt: skip


def _kind(result: dict) -> str:
    return (result.get("scenario") or {}).get("kind") or "single-stream"


def model_family(result: dict, name: str | None = None) -> str:
    """`digits_cnn_int8.onnx` -> `digits_cnn`: the model's name without its precision words and extension."""
    base = os.path.basename(str(name or (result.get("model") or {}).get("path") or ""))
    stem = re.sub(r"\.(onnx|xml|bin|tflite|lite|pb|engine|plan)$", "", base.lower())
    words = [w for w in re.split(r"[_\-.]+", stem) if w and w not in PRECISION_WORDS]
    return "_".join(words)


def _shape(result: dict) -> tuple:
    model = result.get("model") or {}
    inputs = model.get("inputs") or result.get("inputs") or []
    shapes = tuple(tuple(i.get("shape") or ()) for i in inputs if isinstance(i, dict))
    return (int((result.get("config") or {}).get("batch") or 1), shapes)


def _norm(value):
    return value.lower() if isinstance(value, str) else value


def refusals(a: dict, b: dict, name_a: str | None = None, name_b: str | None = None,
             targets: tuple[str | None, str | None] = (None, None)) -> list[str]:  # fmt: skip
    """Why two results answer different questions (one line each); empty when they may be compared. `targets`: the
    runs' target names; two different targets on different boards or CPUs are the comparison itself (a board against
    its sibling, a board against a server), said in `differences`; one target whose board changed is refused."""
    why = []
    ma, mb = a.get("model") or {}, b.get("model") or {}
    if ma.get("sha256") != mb.get("sha256"):
        fa, fb = model_family(a, name_a), model_family(b, name_b)
        other_form = (ma.get("precision"), ma.get("format")) != (mb.get("precision"), mb.get("format"))
        if fa != fb or not fa or not other_form:
            shown = f"{fa or str(ma.get('sha256'))[:12]} vs {fb or str(mb.get('sha256'))[:12]}"
            if fa == fb:
                shown = f"{fa}: sha256 {str(ma.get('sha256'))[:12]} vs {str(mb.get('sha256'))[:12]}"
            why.append(f"different models ({shown})")
    if _shape(a) != _shape(b):
        why.append(f"different input shapes (batch {_shape(a)[0]} vs {_shape(b)[0]})")
    ea, eb = a.get("environment") or {}, b.get("environment") or {}
    two_targets = targets[0] is not None and targets[1] is not None and targets[0] != targets[1]
    for key, what in (("board", "boards"), ("cpu_model", "CPUs")):
        if ea.get(key) != eb.get(key) and not two_targets:
            why.append(f"different {what} ({ea.get(key)!r} vs {eb.get(key)!r})")
    sa, sb = a.get("scenario") or {}, b.get("scenario") or {}
    if _kind(a) != _kind(b):
        why.append(f"different scenarios ({_kind(a)} vs {_kind(b)})")
    elif sa.get("rate_qps") != sb.get("rate_qps"):
        why.append(f"different rates ({sa.get('rate_qps')} vs {sb.get('rate_qps')} queries/s)")
    return why


def differences(a: dict, b: dict, target_a: str | None = None, target_b: str | None = None) -> dict[str, list]:
    """What differs between two comparable runs' configurations: {what: [A's, B's]} (devices compared ignoring
    case, shown as recorded)."""
    ba, bb = a.get("backend") or {}, b.get("backend") or {}
    ca, cb = a.get("config") or {}, b.get("config") or {}
    ma, mb = a.get("model") or {}, b.get("model") or {}
    ea, eb = a.get("environment") or {}, b.get("environment") or {}
    pairs = {
        "target": (target_a, target_b),
        "board": (ea.get("board"), eb.get("board")),
        "CPU": (ea.get("cpu_model"), eb.get("cpu_model")),
        "backend": (ba.get("name"), bb.get("name")),
        "backend version": (ba.get("version"), bb.get("version")),
        "device": (ba.get("device"), bb.get("device")),
        "delegate": (ba.get("delegate"), bb.get("delegate")),
        "threads": (ca.get("threads"), cb.get("threads")),
        "cpus": (ca.get("cpus"), cb.get("cpus")),
        "precision": (ma.get("precision"), mb.get("precision")),
        "model format": (ma.get("format"), mb.get("format")),
        "model file": (os.path.basename(str(ma.get("path") or "")), os.path.basename(str(mb.get("path") or ""))),
    }
    return {k: [x, y] for k, (x, y) in pairs.items() if _norm(x) != _norm(y)}
