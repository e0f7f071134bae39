"""A server run tied to a model file (`--model FILE`, a campaign's [[model]] path) is paired with board runs of that
file by its hash (bench/scenarios/record.py, `served_model`): so the server must serve that model. Its inputs and
outputs (names, datatypes, shapes; -1 or a named dimension matches any size) must be the file's, or the run is
refused before it starts, in one line naming the first difference (issue 24):

    input 'x': the server says FP32 [1,1,28,28], digits_cnn_int8.onnx says INT8 [1,1,28,28]

What this reads, and why so little: ONNX files, through the `onnx` package's protobuf reader when it is installed
(no session, no native kernel touches the file), else ONNX Runtime's session; an OpenVINO IR or a TFLite file is
not read (it would need the whole runtime on the host): `file_io` returns None and the caller says the check was
not made. Never raises for a file it cannot read: the hash check of the record already names a bad path."""

from __future__ import annotations

from pathlib import Path

# onnx.TensorProto.DataType -> the KServe v2 datatype
ONNX_TYPES = {1: "FP32", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64", 8: "BYTES",
              9: "BOOL", 10: "FP16", 11: "FP64", 12: "UINT32", 13: "UINT64", 16: "BF16"}  # fmt: skip
ORT_TYPES = {"tensor(float)": "FP32", "tensor(uint8)": "UINT8", "tensor(int8)": "INT8", "tensor(uint16)": "UINT16",
             "tensor(int16)": "INT16", "tensor(int32)": "INT32", "tensor(int64)": "INT64", "tensor(string)": "BYTES",
             "tensor(bool)": "BOOL", "tensor(float16)": "FP16", "tensor(double)": "FP64", "tensor(uint32)": "UINT32",
             "tensor(uint64)": "UINT64", "tensor(bfloat16)": "BF16"}  # fmt: skip

Tensors = list[tuple[str, str, list[int]]]  # (name, KServe datatype, shape with -1 for any)


def file_io(path: str | Path) -> tuple[Tensors, Tensors] | None:
    """An ONNX file's graph inputs (initializers left out) and outputs; None for another format or an unreadable
    file."""
    if Path(path).suffix.lower() != ".onnx":
        return None
    try:
        import onnx
    except ImportError:
        return _ort_io(path)
    try:
        m = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - whatever a malformed file raises: not checked, the run's own checks say why
        return None
    inits = {i.name for i in m.graph.initializer}

    def one(v) -> tuple[str, str, list[int]]:
        t = v.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
        return v.name, ONNX_TYPES.get(t.elem_type, f"onnx type {t.elem_type}"), dims

    return [one(v) for v in m.graph.input if v.name not in inits], [one(v) for v in m.graph.output]


def _ort_io(path) -> tuple[Tensors, Tensors] | None:
    try:
        import onnxruntime as ort

        s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - no ONNX Runtime, or a file it refuses: not checked
        return None

    def one(v) -> tuple[str, str, list[int]]:
        return v.name, ORT_TYPES.get(v.type, v.type), [d if isinstance(d, int) else -1 for d in v.shape]

    return [one(v) for v in s.get_inputs()], [one(v) for v in s.get_outputs()]


def shown(datatype: str, shape) -> str:
    return f"{datatype} [" + ",".join(str(d) for d in shape) + "]"


def difference(meta: dict, io: tuple[Tensors, Tensors], label: str) -> str | None:
    """The first way the server's metadata (inputs and outputs) differs from the file's, in one line; None if none."""
    for kind, theirs, ours in (("input", meta.get("inputs") or [], io[0]), ("output", meta.get("outputs") or [],
                                                                            io[1])):  # fmt: skip
        server = {str(t.get("name")): (str(t.get("datatype")), [int(d) for d in t.get("shape") or []]) for t in theirs}
        mine = {name: (dt, shape) for name, dt, shape in ours}
        for name in sorted(set(server) | set(mine)):
            if name not in mine:
                return f"{kind} {name!r}: the server has it, {label} does not (it has: {_names(mine)})"
            if name not in server:
                return f"{kind} {name!r}: {label} has it, the server does not (it has: {_names(server)})"
            (sdt, sshape), (fdt, fshape) = server[name], mine[name]
            if sdt != fdt or not same_shape(sshape, fshape):
                return f"{kind} {name!r}: the server says {shown(sdt, sshape)}, {label} says {shown(fdt, fshape)}"
    return None


def same_shape(a: list[int], b: list[int]) -> bool:
    """Same rank, each dimension equal or -1 on either side. A server that batches (Triton's max_batch_size > 0)
    says -1 for the batch dimension, which matches the file's 1."""
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=True))


def _names(tensors: dict) -> str:
    return ", ".join(repr(n) for n in sorted(tensors)) or "none"


def check_served(url: str, meta: dict, path: str | None, served: str) -> str | None:
    """Refuses (TargetError, a user error: exit 2) a run tied to model file `path` on a server whose model differs
    from it; returns a warning when the file's format is not read here. No file, or the served name: nothing to do."""
    from bench.targets.base import TargetError

    if not path or path == served:
        return None
    label = Path(path).name
    io = file_io(path)
    if io is None:
        return f"{label}: its inputs and outputs were not compared with the server's (only ONNX files are read here)"
    diff = difference(meta, io, label)
    if diff:
        raise TargetError(f"{url}: the server's model is not {label}: {diff}", "user-error")
    return None
