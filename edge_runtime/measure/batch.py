"""Batches: N samples per inference (`BenchRequest.batch`, `local:?batch=N`), the way a GPU server runs a model.

What a batch means in a record (issue 24): every inference runs `batch` samples; latency is per inference, so per
batch; throughput counts samples (inferences x batch) per second; `config.batch` says the batch. A query of an
open-loop scenario holds `samples_per_query` samples (by default one batch) and runs as samples_per_query / batch
inferences, so offline with batch=32 sends each query as one batch of 32, the way MLPerf's offline SUT batches its
samples; a samples_per_query that is not a whole number of batches is refused (a partial batch would need a second
binding and would time two shapes as one).

The batch is the first dimension of every input: a model whose inputs have a dynamic first dimension (ONNX
`dim_param`, TFLite's -1) takes any batch; a fixed first dimension takes only its own size. Anything else is refused
in one line naming the model's input shape: rerunning a batch-1 model N times is not a batch, and calling it one
would claim a throughput the model cannot give.

This module never imports a backend: it works on TensorInfo and numpy arrays.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from edge_runtime.errors import UserError


def _shape_text(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def check_batch(inputs: Iterable, batch: int, model: str) -> None:
    """Refuse a batch the model's inputs cannot take: a first dimension fixed at another size, or no dimension."""
    if batch == 1:
        return
    for t in inputs:
        first = t.shape[0] if len(t.shape) else "none"
        if first is None or first == batch:
            continue
        what = "no batch dimension" if first == "none" else f"a fixed batch of {first}"
        raise UserError(
            f"batch {batch}: model {model!r} has {what} (input {t.name!r} shape {_shape_text(t.shape)}): a batch "
            "needs a dynamic first dimension or one of that size",
            hint="export the model with a dynamic first dimension (an ONNX dim_param)",
        )


def batched(feeds: Mapping[str, np.ndarray], batch: int) -> dict[str, np.ndarray]:
    """`feeds` with `batch` samples each: an array of one sample (first dimension 1) repeated along its first axis;
    one that already holds `batch` samples as it is. Anything else is a one-line error naming the input."""
    if batch == 1:
        return dict(feeds)
    out = {}
    for name, arr in feeds.items():
        arr = np.asarray(arr)
        if arr.ndim and arr.shape[0] == batch:
            out[name] = arr
        elif arr.ndim and arr.shape[0] == 1:
            out[name] = np.ascontiguousarray(np.repeat(arr, batch, axis=0))
        else:
            raise UserError(f"batch {batch}: input {name!r} has shape {list(arr.shape)}: give one sample (first "
                            f"dimension 1) or {batch}")  # fmt: skip
    return out


def queries_split(samples_per_query: int, batch: int) -> int:
    """Inferences per query: samples_per_query is a whole number of batches (refused otherwise)."""
    if samples_per_query % batch:
        raise UserError(f"samples_per_query {samples_per_query} is not a whole number of batches of {batch}: give "
                        f"a multiple of {batch}, or leave it out (one batch per query)")  # fmt: skip
    return samples_per_query // batch


def bind_batch(session, feeds: Mapping[str, np.ndarray], batch: int, model: str) -> Mapping[str, np.ndarray]:
    """Bind `feeds` to `session` as batches of `batch` samples (checked against the model's inputs first); returns
    what was bound (a second session of the same model gets the same: `bench --ops`)."""
    if batch > 1:
        check_batch(session.inputs, batch, model)
        feeds = batched(feeds, batch)
    session.bind(feeds)
    return feeds
