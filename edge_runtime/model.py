"""Model files: which format a file is, and cheap structural checks before any native library sees it.

The checks here catch the common mistakes (missing, empty, wrong type, not the format its name claims) with a clear
message. They cannot prove a file is safe for a native parser: that is what the child-process probe in
`edge_runtime.probe` is for.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from edge_runtime.errors import ModelError
from edge_runtime.files import check_input, open_input

# File suffix -> format name. The format picks the default backend (DESIGN.md).
FORMATS = {".onnx": "onnx", ".xml": "openvino", ".tflite": "tflite"}
DEFAULT_BACKEND = {"onnx": "onnxruntime", "openvino": "openvino", "tflite": "tflite"}

# ONNX ModelProto top-level fields (onnx/onnx.proto): ir_version=1, producer_name=2, producer_version=3, domain=4,
# model_version=5, doc_string=6, graph=7, opset_import=8, metadata_props=14, training_info=20, functions=25,
# configuration=26. A serialized model starts with one of their tags.
_ONNX_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}


@dataclass(frozen=True)
class ModelFile:
    path: Path
    format: str
    size: int
    weights: Path | None = None  # OpenVINO IR: the .bin beside the .xml
    _sha: list[str] = field(default_factory=list, compare=False, repr=False)

    @property
    def sha256(self) -> str:
        """sha256 of the model file (and, for IR, of the .xml followed by the .bin), computed once."""
        if not self._sha:
            h = hashlib.sha256()
            for p in (self.path, self.weights):
                if p is not None:
                    with open_input(p, "model", error=ModelError) as f:
                        for chunk in iter(lambda f=f: f.read(1 << 20), b""):
                            h.update(chunk)
            self._sha.append(h.hexdigest())
        return self._sha[0]


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while pos < len(data) and shift < 64:
        b = data[pos]
        value |= (b & 0x7F) << shift
        pos += 1
        if not b & 0x80:
            return value, pos
        shift += 7
    raise ValueError("truncated varint")


def _looks_like_onnx(head: bytes) -> bool:
    try:
        tag, _ = _read_varint(head, 0)
    except ValueError:
        return False
    return _ONNX_FIELDS.get(tag >> 3) == tag & 7


def inspect_model(path: str | os.PathLike[str]) -> ModelFile:
    """Check that `path` is a model file this runtime knows, and say clearly what is wrong when it is not."""
    p = Path(path)
    shown = str(path)
    # Regular file, not larger than memory, checked on the open descriptor: a fifo or a device never blocks here.
    check_input(path, "model", error=ModelError)
    fmt = FORMATS.get(p.suffix.lower())
    if fmt is None:
        known = ", ".join(sorted(FORMATS))
        raise ModelError(f"model {shown!r}: unknown file type {p.suffix or '(none)'!r}", hint=f"known types: {known}")
    with open_input(path, "model", error=ModelError) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(64)
    if size == 0:
        raise ModelError(f"model {shown!r}: file is empty")
    weights = None
    if fmt == "tflite":
        # FlatBuffers file identifier at bytes 4..8 (tensorflow/lite/schema/schema.fbs: file_identifier "TFL3").
        if len(head) < 8 or head[4:8] != b"TFL3":
            raise ModelError(f"model {shown!r}: not a TFLite flatbuffer (no 'TFL3' identifier)")
    elif fmt == "onnx":
        if not _looks_like_onnx(head):
            raise ModelError(f"model {shown!r}: not an ONNX protobuf (the first bytes are no ModelProto field)")
    elif fmt == "openvino":
        text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
        if not (text.startswith(b"<?xml") or text.startswith(b"<net")):
            raise ModelError(f"model {shown!r}: not an OpenVINO IR .xml (no XML header)")
        weights = p.with_suffix(".bin")
        if not os.path.lexists(weights):
            raise ModelError(f"model {shown!r}: weights file {str(weights)!r} is missing (an IR is an .xml and a .bin)")
        check_input(weights, f"model {shown!r}: weights file", error=ModelError)
    return ModelFile(path=p, format=fmt, size=size, weights=weights)
