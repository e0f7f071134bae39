"""Calibration and validation data: .npy/.npz files or folders of them, read through the checked loaders, matched to
the model's inputs, and refused with one line (naming file and input) when they cannot be used: wrong shapes or
dtypes, NaN or infinite values, labels that name no class. Also the calibration reader ONNX Runtime's quantizer takes,
shared with models/build.py.
"""

from __future__ import annotations

import stat
from pathlib import Path

import numpy as np

from edge_runtime.errors import UserError
from edge_runtime.files.inputs import check_input, load_npy, load_npz


def _load_file(path: Path, what: str) -> dict[str, np.ndarray] | list[np.ndarray]:
    if path.suffix == ".npy":
        return [load_npy(path, what)]
    return load_npz(path, what)


def load_samples(
    source: str, inputs, what: str = "calibration data", skip_keys=("y", "labels"), notes: list[str] | None = None
) -> list[dict]:
    """A .npy/.npz file or a folder of them -> one feed dict per sample, checked against the model's inputs.

    Arrays are stacked along axis 0 (N samples); keyed by input name, else taken in input order (a single-input
    model also accepts any one array, e.g. "x"). Each sample must have the input's shape (batch 1 added when the
    model's first dimension is 1 and the array lacks it).
    """
    files = data_files(source, what, notes)
    names = [t.name for t in inputs]
    per_input: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for f in files:
        data = _load_file(f, what)
        if isinstance(data, dict):
            arrays = {k: v for k, v in data.items() if k not in skip_keys}
            if all(n in arrays for n in names):
                chosen = [arrays[n] for n in names]
            elif len(arrays) == len(names):
                chosen = list(arrays.values())
            else:
                raise UserError(
                    f"{what} {str(f)!r}: holds {', '.join(arrays)}; the model's inputs are {', '.join(names)}"
                )
        else:
            if len(names) != 1:
                raise UserError(
                    f"{what} {str(f)!r}: one array for a model with {len(names)} inputs; use .npz keyed by input name"
                )
            chosen = data
        for t, arr in zip(inputs, chosen, strict=True):
            want = tuple(t.shape)
            arr = np.asarray(arr)
            sample_shape = tuple(d or 1 for d in want)
            if arr.shape[1:] == want[1:] and (want[0] in (None, 1) or arr.shape[0] % (want[0] or 1) == 0):
                samples = [arr[i : i + 1] for i in range(arr.shape[0])]
            elif arr.ndim == len(want) + 1 and arr.shape[1:] == sample_shape:  # (N, *input shape): N samples
                samples = [arr[i] for i in range(arr.shape[0])]
            elif arr.shape == want:
                samples = [arr]
            else:
                shown = "(" + ", ".join("?" if d is None else str(d) for d in want) + ")"
                raise UserError(
                    f"{what} {str(f)!r}: input {t.name!r} expects samples of shape {shown}, got an "
                    f"array of shape {arr.shape}"
                )
            kinds = "fiub" if t.dtype.kind == "b" else "fiu"
            if arr.dtype.kind not in kinds:
                raise UserError(f"{what} {str(f)!r}: input {t.name!r} has dtype {arr.dtype}, not numbers")
            with np.errstate(over="ignore", invalid="ignore"):
                cast = arr.astype(t.dtype)  # checked after the cast: 1e300 in float64 is inf in float32
            if cast.dtype.kind == "f" and not np.isfinite(cast).all():
                bad = int(np.count_nonzero(~np.isfinite(cast)))
                rows = np.flatnonzero(~np.isfinite(cast.reshape(cast.shape[0], -1)).all(axis=1)) if cast.ndim else [0]
                raise UserError(
                    f"{what} {str(f)!r}: input {t.name!r} holds {bad} value(s) that are NaN or infinite as "
                    f"{t.dtype} (first in sample {int(rows[0])}); {what} must be finite numbers"
                )
            per_input[t.name] += [s.astype(t.dtype) for s in samples]
    counts = {len(v) for v in per_input.values()}
    if len(counts) != 1:
        raise UserError(f"{what} {source!r}: inputs have different sample counts {sorted(counts)}")
    n = counts.pop()
    if n == 0:
        raise UserError(f"{what} {source!r}: no samples")
    return [{name: per_input[name][i] for name in names} for i in range(n)]


def data_files(source: str, what: str, notes: list[str] | None = None) -> list[Path]:
    """A .npy/.npz file, or the .npy/.npz files of a folder (hidden ones left out), each checked to be a regular file
    before it is read. What a folder holds besides is named in `notes`, not used silently."""
    st = check_input(source, what, directory=None)
    p = Path(source)
    if not stat.S_ISDIR(st.st_mode):
        if p.suffix not in (".npy", ".npz"):
            raise UserError(f"{what} {source!r}: not a .npy or .npz file")
        return [p]
    entries = sorted(p.iterdir())
    files = [f for f in entries if f.suffix in (".npy", ".npz") and not f.name.startswith(".")]
    if not files:
        raise UserError(f"{what} {source!r}: the folder holds no .npy or .npz files")
    skipped = [f.name for f in entries if f not in files]
    if skipped and notes is not None:
        shown = ", ".join(skipped[:5]) + (" ..." if len(skipped) > 5 else "")
        notes.append(f"{what} {source!r}: {len(skipped)} entr{'y' if len(skipped) == 1 else 'ies'} not used ({shown})")
    for f in files:
        check_input(f, what)
    return files


def load_labels(validation: str, labels: str | None, n: int) -> np.ndarray | None:
    """Labels from --labels (.npy), or the "y"/"labels" array of the validation .npz; None when there are none."""
    arr = None
    where = f"--labels {labels!r}" if labels else f"validation data {validation!r}"
    if labels:
        arr = load_npy(labels, "--labels")
    elif Path(validation).suffix == ".npz":
        z = load_npz(validation, "validation data")
        for k in ("y", "labels"):
            if k in z:
                arr = z[k]
    if arr is None:
        return None
    arr = np.asarray(arr)
    if arr.ndim == 2 and arr.shape[1] > 1:
        arr = arr.argmax(axis=1)  # one-hot
    elif arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise UserError(f"{where}: expected one class index per sample (or one-hot rows), got shape {arr.shape}")
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all() or not np.array_equal(arr, np.round(arr)):
            raise UserError(f"{where}: labels are {arr.dtype} values that are not whole numbers (class indices are)")
    elif arr.dtype.kind not in "iub":
        raise UserError(f"{where}: labels of dtype {arr.dtype} are not class indices")
    if len(arr) != n:
        raise UserError(f"{where}: {len(arr)} labels for {n} validation samples")
    return arr.astype(np.int64)


def check_label_range(labels: np.ndarray, classes: int, source: str) -> None:
    """Every label names one of the model's outputs: a label of -100 or 1000 for 10 classes is a mistake that would
    read as 0% top-1 and pass any budget."""
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= classes:
        raise UserError(
            f"{source}: labels run from {lo} to {hi}, but the model has {classes} classes (0 to {classes - 1})"
        )


def calibration_reader(samples: list[dict]):
    """An onnxruntime.quantization.CalibrationDataReader over feed dicts, one sample a call (imported lazily: the
    quantizer is an extra)."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(samples)

        def get_next(self):
            return next(self.it, None)

    return Reader()
