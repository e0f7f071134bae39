"""Dynamic-batch variants of the reference models, made with onnx tools (the committed models all have a fixed batch
of 1): the first dimension of every graph input and output becomes the symbolic `batch`, and the inferred shapes
inside are dropped so ONNX Runtime infers them again. Safe for models whose ops keep the batch axis (resnet8,
digits_cnn, fc_autoencoder_ad: Conv, Gemm, Flatten(axis=1), Softmax, Q/DQ), which the tests use."""

from __future__ import annotations

from pathlib import Path


def dynamic_batch(src: Path, dst: Path) -> Path:
    """Write `src` with a dynamic first dimension on every input and output to `dst`; return `dst`."""
    import onnx

    m = onnx.load(str(src))
    for v in (*m.graph.input, *m.graph.output):
        dim = v.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_value")
        dim.dim_param = "batch"
    del m.graph.value_info[:]
    onnx.checker.check_model(m)
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(dst))
    return dst
