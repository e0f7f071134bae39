"""The ONNX Runtime per-op placement model: a small FP32 .onnx, Add -> com.microsoft FastGelu -> Mul, that
OpenVINO's execution provider (the onnxruntime-ep-openvino plugin) takes only in part: it has no FastGelu, so a run
has two OpenVINO subgraphs and one node left on ONNX Runtime's CPU provider (research 29).

Written with onnx.helper from fixed constants, no download and no training: `make models` writes it with the other
reference models, and `models/build.py --placement-only` writes it alone; the bytes are the same on every build. It
is not one of the reference networks: it exists for `edge_runtime.ops` and its tests (issue 29).

The width makes each op take microseconds, not the profiler's zero: at [1, 16384] float32 FastGelu took about 15 us
of a 116 us profiled run here (at [1, 64], 3 us); the constants are one element each, broadcast, so the file is small.

output = fastgelu(input + 1) * 0.5, fastgelu(x) = x * sigmoid(1.702 x) as ONNX Runtime approximates it (tanh form).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

MODEL = "partial_fastgelu"
FILE = f"{MODEL}/{MODEL}_fp32.onnx"
WIDTH = 16384
ADDEND, SCALE = 1.0, 0.5
PROVENANCE = (
    "models/partial_onnx.py with onnx.helper: Add -> com.microsoft FastGelu -> Mul on float32 [1, 16384], "
    "broadcast constants 1.0 and 0.5; a placement test model (the OpenVINO execution provider takes no FastGelu), "
    "not a reference network"
)


def expected(x: np.ndarray) -> np.ndarray:
    """What the model computes, in numpy (FastGelu's tanh form, as com.microsoft defines it)."""
    a = x.astype(np.float64) + ADDEND
    gelu = 0.5 * a * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (a + 0.044715 * a**3)))
    return (gelu * SCALE).astype(np.float32)


def model_bytes() -> bytes:
    """The .onnx file's bytes."""
    from onnx import TensorProto, helper, numpy_helper

    shape = [1, WIDTH]
    nodes = [
        helper.make_node("Add", ["input", "addend"], ["added"], name="add"),
        helper.make_node("FastGelu", ["added"], ["gelu"], name="fastgelu", domain="com.microsoft"),
        helper.make_node("Mul", ["gelu", "scale"], ["output"], name="mul"),
    ]
    graph = helper.make_graph(
        nodes,
        MODEL,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)],
        [
            numpy_helper.from_array(np.full([1], ADDEND, np.float32), "addend"),
            numpy_helper.from_array(np.full([1], SCALE, np.float32), "scale"),
        ],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        ir_version=9,  # fixed, not the installed onnx's newest: the bytes stay the same across onnx releases
        producer_name="edge_runtime models/partial_onnx.py",
        doc_string="edge_runtime placement test: Add, FastGelu (not in OpenVINO's execution provider), Mul",
    )
    return model.SerializeToString()


def write(outdir: Path) -> Path:
    """Write the model under `outdir` (models/) and return its path."""
    path = outdir / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model_bytes())
    return path
