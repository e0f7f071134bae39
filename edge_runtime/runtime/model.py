"""Model files: which format a file is, and cheap structural checks before any native library sees it.

The checks here catch the common mistakes (missing, empty, wrong type, not the format its name claims) with a clear
message. They cannot prove a file is safe for a native parser: that is what the crash check in a child process
(`edge_runtime.runtime.sandbox`) is for.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from edge_runtime.errors import ModelError, UserError
from edge_runtime.files.inputs import check_input, open_input

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
    external: tuple[Path, ...] = ()  # ONNX: external-data files the model names
    _sha: list[str] = field(default_factory=list, compare=False, repr=False)

    @property
    def sha256(self) -> str:
        """sha256 of the model file (and, for IR, of the .xml followed by the .bin), computed once."""
        if not self._sha:
            self._sha.append(sha256_of_files((self.path, self.weights, *self.external)))
        return self._sha[0]


def sha256_of_files(
    paths: Iterable[str | os.PathLike[str] | None],
    *,
    each: Callable[[Path, str], None] | None = None,
    what: str = "model",
    error: type[UserError] = ModelError,
) -> str:
    """The one model hash of the house: sha256 over the files' bytes in order (a model's: the file, an IR's .bin, an
    ONNX model's external data), read 1 MiB at a time through `open_input` (a regular file, or `error` naming it).
    `each(path, its own sha256)` is called after each file (an upload declares every file's hash). The board, the
    agent's store, the host's upload and a server run's record all call it, so a model has one hash everywhere."""
    parts = [Path(p) for p in paths if p is not None]
    whole = _sha256(sum(_size(p) for p in parts))
    for p in parts:
        own = _sha256(_size(p)) if each is not None else None
        with open_input(p, what, error=error) as f:
            for chunk in iter(lambda f=f: f.read(1 << 20), b""):
                whole.update(chunk)
                if own is not None:
                    own.update(chunk)
        if each is not None:
            each(p, own.hexdigest())
    return whole.hexdigest()


def file_sha256(path: str | os.PathLike[str], *, what: str = "file", error: type[UserError] = ModelError) -> str:
    """sha256 of one file (sha256_of_files of it alone)."""
    return sha256_of_files((path,), what=what, error=error)


def model_sha256(path: str | os.PathLike[str]) -> str:
    """A model's sha256 from its path, as `ModelFile.sha256` has it (the .xml and its .bin, an ONNX model and its
    external data), without the structural checks of `inspect_model`: for a model another machine runs."""
    return sha256_of_files(p for _what, p in model_files(path))


# Up to this many bytes the interpreter's built-in SHA-256 hashes a model in less time than importing hashlib takes:
# hashlib loads OpenSSL and builds a constructor for each of its algorithms (~3 ms, a tenth of what a one-shot `run`
# added to the library's own start: issue 22), then hashes ~5x faster (SHA extensions), which pays from about 1 MB.
SMALL_MODEL_BYTES = 1 << 20


def _sha256(size: int):
    """A sha256 object for `size` bytes: the built-in one for a small model unless hashlib is already loaded, else
    hashlib's (also where the interpreter was built without its own hashes)."""
    import sys

    if size <= SMALL_MODEL_BYTES and "hashlib" not in sys.modules:
        try:
            from _sha2 import sha256  # Python 3.12+
        except ImportError:
            try:
                from _sha256 import sha256  # Python 3.10, 3.11
            except ImportError:
                sha256 = None
        if sha256 is not None:
            return sha256()
    import hashlib

    return hashlib.sha256()


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0  # opening it says what is wrong


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


def _fields(buf, start: int, end: int):
    """(field number, wire type, value start, value end) of a protobuf message in buf[start:end]; stops at garbage."""
    pos = start
    while pos < end:
        try:
            key, pos = _read_varint(buf, pos)
            wire = key & 7
            if wire == 0:
                _, pos = _read_varint(buf, pos)
                continue
            if wire == 1:
                pos += 8
                continue
            if wire == 5:
                pos += 4
                continue
            if wire != 2:
                return
            length, pos = _read_varint(buf, pos)
        except ValueError:
            return
        if pos + length > end:
            return
        yield key >> 3, wire, pos, pos + length
        pos += length


# onnx.proto field numbers: ModelProto.graph 7; GraphProto.node 1, initializer 5, sparse_initializer 15;
# NodeProto.attribute 5; AttributeProto.t 5, g 6, tensors 10, graphs 11; TensorProto.external_data 13;
# StringStringEntryProto key 1, value 2; SparseTensorProto values 1, indices 2.
def _external_locations(buf, start: int, end: int, kind: str, out: set[str], depth: int = 0) -> None:
    if depth > 64:
        return
    for num, _, a, b in _fields(buf, start, end):
        if kind == "model" and num == 7:
            _external_locations(buf, a, b, "graph", out, depth + 1)
        elif kind == "graph" and num in (5, 15):
            _external_locations(buf, a, b, "tensor" if num == 5 else "sparse", out, depth + 1)
        elif kind == "graph" and num == 1:
            _external_locations(buf, a, b, "node", out, depth + 1)
        elif kind == "node" and num == 5:
            _external_locations(buf, a, b, "attribute", out, depth + 1)
        elif kind == "attribute" and num in (5, 10):
            _external_locations(buf, a, b, "tensor", out, depth + 1)
        elif kind == "attribute" and num in (6, 11):
            _external_locations(buf, a, b, "graph", out, depth + 1)
        elif kind == "sparse" and num in (1, 2):
            _external_locations(buf, a, b, "tensor", out, depth + 1)
        elif kind == "tensor" and num == 13:
            entry = {n: bytes(buf[x:y]) for n, _, x, y in _fields(buf, a, b)}
            if entry.get(1) == b"location" and 2 in entry:
                out.add(entry[2].decode(errors="replace"))


def onnx_external_files(path: Path) -> tuple[Path, ...]:
    """The external-data files an ONNX model names (TensorProto.external_data "location", relative to the model's
    folder), read from the protobuf without the onnx package. They are inputs of a command like the model itself."""
    with open_input(path, "model", error=ModelError) as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return ()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            found: set[str] = set()
            # Every external-data entry has the key "location" in plain bytes: a file without those bytes names no
            # external file, and a search in C costs a fraction of the walk in Python (~3 ms for a 300 KB model).
            if buf.find(b"location") >= 0:
                _external_locations(buf, 0, size, "model", found)
    return tuple(sorted(path.parent / loc for loc in found))


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
    external: tuple[Path, ...] = ()
    if fmt == "tflite":
        # FlatBuffers file identifier at bytes 4..8 (tensorflow/lite/schema/schema.fbs: file_identifier "TFL3").
        if len(head) < 8 or head[4:8] != b"TFL3":
            raise ModelError(f"model {shown!r}: not a TFLite flatbuffer (no 'TFL3' identifier)")
    elif fmt == "onnx":
        if not _looks_like_onnx(head):
            raise ModelError(f"model {shown!r}: not an ONNX protobuf (the first bytes are no ModelProto field)")
        external = onnx_external_files(p)
        for e in external:
            if not os.path.lexists(e):
                raise ModelError(f"model {shown!r}: external data file {str(e)!r} is missing")
            check_input(e, f"model {shown!r}: external data file", error=ModelError)
    elif fmt == "openvino":
        text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
        if not (text.startswith(b"<?xml") or text.startswith(b"<net")):
            raise ModelError(f"model {shown!r}: not an OpenVINO IR .xml (no XML header)")
        weights = p.with_suffix(".bin")
        if not os.path.lexists(weights):
            raise ModelError(f"model {shown!r}: weights file {str(weights)!r} is missing (an IR is an .xml and a .bin)")
        check_input(weights, f"model {shown!r}: weights file", error=ModelError)
    return ModelFile(path=p, format=fmt, size=size, weights=weights, external=external)


def model_files(path: str | os.PathLike[str]) -> list[tuple[str, Path]]:
    """Every file a model is made of, as (what, path): the file, an IR's .bin, an ONNX model's external data. Outputs
    of a command must never be one of them. Best effort on a file that cannot be read (it is refused when loaded)."""
    p = Path(path)
    found: list[tuple[str, Path]] = [("the model", p)]
    if p.suffix.lower() == ".xml":
        found.append(("the model's weights", p.with_suffix(".bin")))
    elif p.suffix.lower() == ".onnx" and os.path.isfile(p):
        try:
            found += [("the model's external data", e) for e in onnx_external_files(p)]
        except ModelError:
            pass
    return found
