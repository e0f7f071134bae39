"""The bad-input corpus: broken model files made from the good reference models, for every backend.

Each case is (name, how it is made, what the user should be told). Built into a folder by `build_corpus`.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path

MODELS = Path(__file__).resolve().parent.parent / "models"


@dataclass(frozen=True)
class BadModel:
    name: str
    path: Path
    backend: str
    expect: str  # a phrase the one-line error must contain (besides the file name)


def flip_bytes(data: bytes, seed: int, count: int, start: int = 16) -> bytes:
    rng = random.Random(seed)
    b = bytearray(data)
    for _ in range(count):
        i = rng.randrange(start, len(b))
        b[i] ^= 0xFF
    return bytes(b)


def build_corpus(out: Path) -> list[BadModel]:
    """Write the corpus under `out` and return its cases."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1234)
    cases: list[BadModel] = []
    sources = {
        "onnx": (MODELS / "digits_cnn" / "digits_cnn_int8.onnx", "onnxruntime"),
        "tflite": (MODELS / "digits_cnn" / "digits_cnn_int8.tflite", "tflite"),
        "xml": (MODELS / "digits_cnn" / "digits_cnn_int8.xml", "openvino"),
    }
    for ext, (src, backend) in sources.items():
        data = src.read_bytes()

        def add(name: str, content: bytes, expect: str, ext=ext, backend=backend, src=src) -> Path:
            p = out / f"{name}.{ext}"
            p.write_bytes(content)
            if ext == "xml" and name != "xml_no_bin":
                shutil.copyfile(src.with_suffix(".bin"), p.with_suffix(".bin"))
            cases.append(BadModel(f"{ext}:{name}", p, backend, expect))
            return p

        add(f"{ext}_empty", b"", "empty")
        add(f"{ext}_random", bytes(rng.randrange(256) for _ in range(4096)), "not")
        add(f"{ext}_truncated", data[: len(data) // 2], "cannot")
        add(f"{ext}_header_only", data[:64], "cannot")
        if ext != "xml":
            add(f"{ext}_bitflips", flip_bytes(data, seed=7, count=64), "cannot")
    # OpenVINO IR specific: .bin missing, .bin truncated, .bin of another model.
    xml, xml_bin = sources["xml"][0], sources["xml"][0].with_suffix(".bin")
    p = out / "xml_no_bin.xml"
    shutil.copyfile(xml, p)
    cases.append(BadModel("xml:no_bin", p, "openvino", "weights file"))
    p = out / "xml_short_bin.xml"
    shutil.copyfile(xml, p)
    p.with_suffix(".bin").write_bytes(xml_bin.read_bytes()[:100])
    cases.append(BadModel("xml:short_bin", p, "openvino", "cannot"))
    # A file whose name lies about its type.
    p = out / "tflite_named_onnx.onnx"
    shutil.copyfile(sources["tflite"][0], p)
    cases.append(BadModel("onnx:is_tflite", p, "onnxruntime", "not an ONNX"))
    p = out / "onnx_named_tflite.tflite"
    shutil.copyfile(sources["onnx"][0], p)
    cases.append(BadModel("tflite:is_onnx", p, "tflite", "not a TFLite"))
    # Unknown extension, and no extension at all.
    p = out / "model.pb"
    shutil.copyfile(sources["onnx"][0], p)
    cases.append(BadModel("unknown_extension", p, "onnxruntime", "unknown file type"))
    return cases
