"""Accuracy helpers shared by the model build and the tests: top-1 of a classifier on a labelled split."""

from __future__ import annotations

import os

import numpy as np


def classify(model: str | os.PathLike[str], x: np.ndarray, backend: str | None = None, **load_kwargs) -> np.ndarray:
    """Top-1 class of each sample of `x` (N, ...) run one at a time, quantizing inputs for full-integer models."""
    from edge_runtime.runtime.load import load

    with load(model, backend=backend, **load_kwargs) as s:
        inp, out = s.inputs[0], s.outputs[0]
        buf = np.empty((1, *x.shape[1:]), dtype=inp.dtype)
        feeds = {inp.name: buf}
        preds = np.empty(len(x), dtype=np.int64)
        for i in range(len(x)):
            buf[...] = inp.quantize(x[i : i + 1])
            y = out.dequantize(s.infer(feeds)[out.name])
            preds[i] = int(np.argmax(y))
    return preds
