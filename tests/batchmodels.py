"""Dynamic-batch variants of the reference models: the first dimension of every graph input and output becomes the
symbolic `batch`, and the inferred shapes inside are dropped so ONNX Runtime infers them again.

resnet8, digits_cnn and fc_autoencoder_ad have committed variants (models/<name>/<name>_int8_dynamic.onnx, written by
models/build.py:write_dynamic_batch, checked against the manifest): `dynamic_batch` copies those. For any other ONNX
file it makes one here with onnx tools, the same way (safe only for models whose ops keep the batch axis: Conv, Gemm,
Flatten(axis=1), Softmax, Q/DQ)."""

from __future__ import annotations

import shutil
from pathlib import Path


def committed_dynamic(src: Path) -> Path | None:
    """The committed dynamic-batch variant of the committed fixed-batch `src` (`x_int8.onnx` -> `x_int8_dynamic.onnx`
    beside it), or None where there is none."""
    made = src.with_name(f"{src.stem}_dynamic{src.suffix}")
    return made if src.suffix == ".onnx" and made.is_file() else None


def dynamic_batch(src: Path, dst: Path) -> Path:
    """Write `src` with a dynamic first dimension on every input and output to `dst`; return `dst`."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    committed = committed_dynamic(src)
    if committed is not None:
        # the same bytes as the derivation below (tests/runtime/test_dynamic_models.py checks)
        shutil.copyfile(committed, dst)
        return dst
    import onnx

    m = onnx.load(str(src))
    for v in (*m.graph.input, *m.graph.output):
        dim = v.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_value")
        dim.dim_param = "batch"
    del m.graph.value_info[:]
    onnx.checker.check_model(m)
    onnx.save(m, str(dst))
    return dst
