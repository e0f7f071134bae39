"""The per-op placement model: a tiny FP32 .tflite, ADD -> CUMSUM -> MUL, that LiteRT's XNNPACK delegate can take
only in part (XNNPACK has no CUMSUM), so a run has two delegated partitions and one op left on the CPU.

Written with the flatbuffer schema and writer that ship inside ai_edge_litert (`schema_py_generated`,
`tools.flatbuffer_utils`), without TensorFlow: `make models` writes it with the other reference models, and
`models/build.py --placement-only` writes it alone. The graph and its constants are fixed, so the bytes are the same
on every build. It is not one of the reference networks (no ONNX or OpenVINO flavour, nothing trained): it exists
for `edge_runtime.ops` and its tests (issue 29).

Why a built model when the reference models already place in part: under ai-edge-litert 2.3 XNNPACK does not take
INT8 SOFTMAX, so resnet8, dscnn_kws and mobilenet_v1_025_vww INT8 leave their last op on the CPU (one partition
before it), while tflite-runtime 2.14 delegates no INT8 model at all. That depends on the version; this model is
FP32 and splits the same way on both (research 29): two partitions around the one op XNNPACK has no kernel for.

output = cumsum(input + 1, axis=1) * 0.5, input float32 [1, 64].
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

MODEL = "partial_cumsum"
FILE = f"{MODEL}/{MODEL}_fp32.tflite"
WIDTH = 64
ADDEND, SCALE = 1.0, 0.5
PROVENANCE = (
    "models/partial_tflite.py with the flatbuffer schema inside ai_edge_litert (no TensorFlow): ADD -> CUMSUM -> MUL "
    "on float32 [1, 64], constants 1.0 and 0.5; a placement test model (XNNPACK takes no CUMSUM), not a reference "
    "network"
)


def expected(x: np.ndarray) -> np.ndarray:
    """What the model computes, in numpy."""
    return np.cumsum(x + np.float32(ADDEND), axis=1, dtype=np.float32) * np.float32(SCALE)


def model_bytes() -> bytes:
    """The .tflite file's bytes."""
    from ai_edge_litert import schema_py_generated as S
    from ai_edge_litert.tools import flatbuffer_utils

    buffers = [S.BufferT()]  # buffer 0 is the empty buffer, by the schema's convention

    def tensor(name: str, shape: list[int], ttype: int, data: np.ndarray | None = None):
        t = S.TensorT()
        t.name, t.shape, t.type = name, shape, ttype
        b = S.BufferT()
        if data is not None:
            b.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), np.uint8)
        buffers.append(b)
        t.buffer = len(buffers) - 1
        return t

    codes = []

    def opcode(builtin: int) -> int:
        c = S.OperatorCodeT()
        # Codes above 127 keep 127 (PLACEHOLDER_FOR_GREATER_OP_CODES) in the deprecated int8 field: CUMSUM is 128.
        c.builtinCode, c.deprecatedBuiltinCode, c.version = builtin, min(builtin, 127), 1
        codes.append(c)
        return len(codes) - 1

    def op(code: int, inputs: list[int], outputs: list[int], options_type: int, options):
        o = S.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = code, inputs, outputs
        o.builtinOptionsType, o.builtinOptions = options_type, options
        return o

    f32, i32 = S.TensorType.FLOAT32, S.TensorType.INT32
    sg = S.SubGraphT()
    sg.name = "main"
    sg.tensors = [
        tensor("input", [1, WIDTH], f32),
        tensor("addend", [1, WIDTH], f32, np.full((1, WIDTH), ADDEND, np.float32)),
        tensor("added", [1, WIDTH], f32),
        tensor("axis", [], i32, np.array(1, np.int32)),
        tensor("cumsum", [1, WIDTH], f32),
        tensor("scale", [1, WIDTH], f32, np.full((1, WIDTH), SCALE, np.float32)),
        tensor("output", [1, WIDTH], f32),
    ]
    sg.inputs, sg.outputs = [0], [6]
    add, cumsum, mul = (opcode(c) for c in (S.BuiltinOperator.ADD, S.BuiltinOperator.CUMSUM, S.BuiltinOperator.MUL))
    sg.operators = [
        op(add, [0, 1], [2], S.BuiltinOptions.AddOptions, S.AddOptionsT()),
        op(cumsum, [2, 3], [4], S.BuiltinOptions.CumsumOptions, S.CumsumOptionsT()),
        op(mul, [4, 5], [6], S.BuiltinOptions.MulOptions, S.MulOptionsT()),
    ]
    m = S.ModelT()
    m.version = 3
    m.description = "edge_runtime placement test: ADD, CUMSUM (not in XNNPACK), MUL"
    m.operatorCodes, m.subgraphs, m.buffers = codes, [sg], buffers
    return bytes(flatbuffer_utils.convert_object_to_bytearray(m))


def write(outdir: Path) -> Path:
    """Write the model under `outdir` (models/) and return its path."""
    path = outdir / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model_bytes())
    return path
