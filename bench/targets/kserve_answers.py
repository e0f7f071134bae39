"""Every answer of a KServe v2 server checked against what the model's metadata promised (issue 24): the outputs
asked for, by name, each with the model's datatype and shape (a -1 dimension matches anything; the batch dimension,
where the server batches, must be the one asked for), and its data: a `binary_data_size` that is exactly shape x
itemsize and that the body holds, or JSON `data` of exactly shape's element count. A body that is not a JSON object
is wrong too. A wrong answer is a failed query of its own kind (`WRONG`), with the first one's words kept.

Pure functions over what the server said, so every sender uses the same check: tritonclient's HTTP result
(`http_answer`), its gRPC protobuf (`grpc_answer`), or a raw HTTP reply's JSON header and the length of the body
after it (bench/targets/kserve_probe.py, a load engine of its own):

    expected = expected_outputs(meta["outputs"], config, batch=1)
    why = check_answer(expected, header, body_len)   # None when right, else one line

Never allocates from what the server declares (a declared 2^62 bytes is compared as a number, never read), never
raises on a malformed answer (it is a wrong answer, said in words), never imports tritonclient."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

WRONG = "wrong answer"  # the error kind of a query answered with what the model cannot have produced
ITEMSIZE = {"BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "FP16": 2, "BF16": 2, "UINT32": 4,
            "INT32": 4, "FP32": 4, "UINT64": 8, "INT64": 8, "FP64": 8}  # fmt: skip # BYTES: variable, unchecked
MAX_RANK = 64  # no model has more dimensions; a longer shape is nonsense, said rather than multiplied


@dataclass(frozen=True)
class Expected:
    """One output as the model's metadata gives it; -1 in `shape` matches any size. What the metadata leaves out
    is not checked: datatype "" (any), shape None (any)."""

    name: str
    datatype: str
    shape: tuple[int, ...] | None
    # the fast path (a right answer costs ~1 us): the shape as a JSON list when it has no -1, its binary size
    exact: list | None = field(init=False, compare=False, repr=False)
    nbytes: int | None = field(init=False, compare=False, repr=False)
    count: int | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        fixed = self.shape is not None and -1 not in self.shape and self.datatype in ITEMSIZE
        object.__setattr__(self, "exact", list(self.shape) if fixed else None)
        object.__setattr__(self, "count", math.prod(self.shape) if fixed else None)
        object.__setattr__(self, "nbytes", self.count * ITEMSIZE[self.datatype] if fixed else None)


def expected_outputs(outputs: Sequence[dict], config: dict | None = None, batch: int | None = None) -> tuple:
    """The metadata's outputs as `Expected`. Where the server batches (its config's max_batch_size > 0, Triton's
    -1 first dimension), that dimension must be the batch asked for (`batch`, the inputs' first dimension)."""
    batches = int((config or {}).get("max_batch_size") or 0) > 0
    out = []
    for t in outputs:
        shape = [int(d) for d in t["shape"]] if isinstance(t.get("shape"), list) else None
        if batches and batch is not None and shape and shape[0] == -1:
            shape[0] = int(batch)
        out.append(Expected(str(t.get("name")), str(t.get("datatype") or ""), None if shape is None else tuple(shape)))
    return tuple(out)


def shown(shape) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def check_answer(expected: Sequence[Expected], header, body_len: int | None) -> str | None:
    """None if `header` (the answer's JSON part) is what the model promised and the `body_len` bytes after it hold
    the binary outputs it declares (None: not known, not checked); else what is wrong, in one line."""
    if not isinstance(header, dict):
        return f"the answer is not a JSON object (a {type(header).__name__})"
    outputs = header.get("outputs")
    if outputs.__class__ is list and len(outputs) == len(expected):  # the outputs in the order asked: one pass
        declared = 0
        for e, o in zip(expected, outputs):  # noqa: B905 - equal lengths, checked above
            if o.__class__ is not dict or o.get("name") != e.name:
                break
            why, size = _check_output(e, o)
            if why:
                return f"output {e.name!r}: {why}"
            declared += size
        else:
            return _body(declared, body_len)
    if not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
        return "the answer has no list of outputs"
    by_name = {str(o.get("name")): o for o in outputs}
    want = {e.name for e in expected}
    extra = sorted(n for n in by_name if n not in want)
    declared = 0
    for e in expected:
        o = by_name.get(e.name)
        if o is None:
            said = f" (it has: {', '.join(repr(n) for n in extra)})" if extra else ""
            return f"no output {e.name!r} in the answer{said}"
        why, size = _check_output(e, o)
        if why:
            return f"output {e.name!r}: {why}"
        declared += size
    if extra and expected:  # a model whose metadata lists no outputs gets all of them, unnamed in advance
        return f"output {extra[0]!r} is not one of the model's ({', '.join(repr(e.name) for e in expected)})"
    return _body(declared, body_len)


def _body(declared: int, body_len: int | None) -> str | None:
    if body_len is not None and declared != body_len:
        return f"the outputs declare {declared:,} bytes of binary data, the body holds {body_len:,}"
    return None


def _check_output(e: Expected, o: dict) -> tuple[str | None, int]:
    """What is wrong with one output (or None) and the binary bytes it declares."""
    dt = o.get("datatype")
    if e.exact is not None and dt == e.datatype and o.get("shape") == e.exact:  # the usual right answer, at once
        params = o.get("parameters")
        if params.__class__ is dict and (size := params.get("binary_data_size")).__class__ is int:
            if size == e.nbytes:
                return None, size
        elif (
            (data := o.get("data")).__class__ is list
            and len(data) == e.count
            and (not data or data[0].__class__ is not list)
        ):
            return None, 0  # flat JSON data of the right length (its values are the decoder's to read)
    if dt != e.datatype and e.datatype:
        return f"datatype {dt}, the model says {e.datatype}", 0
    shape = o.get("shape")
    if (not isinstance(shape, list) or len(shape) > MAX_RANK
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):  # fmt: skip
        return f"shape {shape!r} is not a list of sizes", 0
    if e.shape is not None and (len(shape) != len(e.shape)
                                or any(w not in (-1, g) for g, w in zip(shape, e.shape, strict=True))):  # fmt: skip
        return f"shape {shown(shape)}, the model says {shown(e.shape)}", 0
    count = math.prod(shape)  # Python integers: a declared 2^62 is a number, never an allocation
    item = ITEMSIZE.get(str(dt))
    params = o.get("parameters")
    size = params.get("binary_data_size") if isinstance(params, dict) else None
    if size is not None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            return f"binary_data_size {size!r} is not a size", 0
        if item is not None and size != count * item:
            return f"binary_data_size {size:,}, its shape {shown(shape)} of {e.datatype} is {count * item:,} bytes", 0
        return None, size
    if "data" not in o:
        return "neither data nor binary_data_size", 0
    n = _length(o["data"])
    if n is None:
        return "data is not a list of values", 0
    if dt != "BYTES" and n != count:
        return f"{n:,} values in data, its shape {shown(shape)} holds {count:,}", 0
    return None, 0


def _length(data, depth: int = 0) -> int | None:
    """The number of values in JSON `data`, flat or nested row-major (None: not a list of values)."""
    if not isinstance(data, list) or depth > MAX_RANK:
        return None
    if not data or not isinstance(data[0], list):
        return len(data) if not any(isinstance(v, (list, dict)) for v in data) else None
    total = 0
    for row in data:
        n = _length(row, depth + 1)
        if n is None:
            return None
        total += n
    return total


def http_answer(result) -> tuple:
    """tritonclient.http's InferResult as (header, body length after it). The binary part is its `_buffer`, the one
    place tritonclient keeps it (an answer without Inference-Header-Content-Length has none: 0 bytes)."""
    return result.get_response(), len(getattr(result, "_buffer", b"") or b"")


def grpc_answer(response) -> tuple[dict, int]:
    """A gRPC ModelInferResponse as the HTTP header it stands for, and the bytes of its raw_output_contents: the
    i-th raw content is the i-th output's binary data (the KServe v2 gRPC protocol)."""
    raw = [len(b) for b in response.raw_output_contents]
    outputs = []
    for i, o in enumerate(response.outputs):
        out = {"name": o.name, "datatype": o.datatype, "shape": [int(d) for d in o.shape]}
        if i < len(raw):
            out["parameters"] = {"binary_data_size": raw[i]}
        else:
            fields = o.contents.ListFields() if o.HasField("contents") else []
            if fields:
                out["data"] = list(fields[0][1])
        outputs.append(out)
    return {"outputs": outputs}, sum(raw)


# A 200 answer tritonclient could not read raises one of these from its parser (rapidjson's error is a ValueError):
# an answer the server got wrong, not a failure of the network.
UNREADABLE = (ValueError, TypeError, KeyError, IndexError, AttributeError)


def unreadable(err: Exception) -> str | None:
    """The words of a wrong answer when `err` is tritonclient failing to read a 200 answer; None otherwise (a
    status, a timeout, a lost connection: those keep their own kind)."""
    if type(err).__name__ == "InferenceServerException" or isinstance(err, OSError):
        return None
    if isinstance(err, UNREADABLE):
        return f"the answer could not be read ({type(err).__name__}: {' '.join(str(err).split())[:160]})"
    return None
