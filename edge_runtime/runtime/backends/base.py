"""The small interface every backend implements, and the typed records it returns.

A backend loads one model file on one device and runs it with inputs bound once. It never decides silently: a
device or delegate it cannot use raises `DeviceError`, unless `LoadOptions.fallback` allows CPU, and then
`fallback_reason` says why.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

import numpy as np

from edge_runtime.runtime.model import ModelFile


@dataclass(frozen=True)
class Quantization:
    """Affine quantization of a tensor: real = scale * (q - zero_point). Per-tensor (scalars) or per-axis (arrays)."""

    scale: float | np.ndarray
    zero_point: int | np.ndarray
    axis: int | None = None

    def _params(self, ndim: int) -> tuple[np.ndarray, np.ndarray]:
        """Scale and zero point shaped to broadcast along `axis` (per-axis) or as scalars (per-tensor)."""
        scale, zero = np.asarray(self.scale, dtype=np.float64), np.asarray(self.zero_point, dtype=np.float64)
        if self.axis is not None and scale.ndim == 1 and ndim:
            shape = [1] * ndim
            shape[self.axis] = -1
            scale, zero = scale.reshape(shape), zero.reshape(shape)
        return scale, zero

    def quantize(self, x: np.ndarray, dtype: np.dtype) -> np.ndarray:
        info = np.iinfo(dtype)
        x = np.asarray(x, dtype=np.float64)
        scale, zero = self._params(x.ndim)
        return np.clip(np.round(x / scale) + zero, info.min, info.max).astype(dtype)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q, dtype=np.float64)
        scale, zero = self._params(q.ndim)
        return ((q - zero) * scale).astype(np.float32)


@dataclass(frozen=True)
class TensorInfo:
    """One model input or output: name, shape (None for a dynamic dimension), dtype and quantization if any."""

    name: str
    shape: tuple[int | None, ...]
    dtype: np.dtype
    quantization: Quantization | None = None

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """Real values -> this tensor's integer type (for full-integer models); a plain cast when not quantized."""
        if self.quantization is None:
            return np.asarray(x, dtype=self.dtype)
        return self.quantization.quantize(x, self.dtype)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        """This tensor's values -> float32 real values."""
        if self.quantization is None:
            return np.asarray(q, dtype=np.float32)
        return self.quantization.dequantize(q)

    def to_dict(self) -> dict:
        d: dict = {"name": self.name, "shape": list(self.shape), "dtype": str(self.dtype)}
        if self.quantization is not None:
            q = self.quantization
            d["quantization"] = {
                "scale": np.asarray(q.scale).tolist(),
                "zero_point": np.asarray(q.zero_point).tolist(),
                "axis": q.axis,
            }
        return d


@dataclass(frozen=True)
class LoadOptions:
    """What the caller asked for. Backend-specific keys go in `options` (ORT provider options, OpenVINO properties)."""

    device: str | None = None
    delegate: str | None = None
    delegate_options: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, str] = field(default_factory=dict)
    threads: int | None = None
    cpus: tuple[int, ...] | None = None
    fallback: bool = False


def require(module: str, backend: str, extra: str):
    """Import a backend's library, or say which extra installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        from edge_runtime.errors import BackendNotInstalledError

        raise BackendNotInstalledError(
            f"backend {backend!r} is not installed ({err})", hint=f"pip install 'edge-runtime[{extra}]'"
        ) from err


class FastHandles(NamedTuple):
    """For a model with one input: `set_input(array)` (None when a bound array is read in place), `run()`, and per
    output a zero-argument callable returning an array the caller owns. (A NamedTuple, not a frozen dataclass: built
    the same way, and its class costs a quarter as much to create, on the path of every one-shot run: issue 22.)"""

    set_input: Callable[[np.ndarray], object] | None
    run: Callable[[], object]
    outputs: tuple[tuple[str, Callable[[], np.ndarray]], ...]


@contextlib.contextmanager
def filtered_stderr(drop: Callable[[str], bool]):
    """Native libraries print on file descriptor 2 where Python cannot catch it: capture it for the call, and pass on
    every line `drop` does not match (a library's noise goes, its warnings and errors stay visible)."""
    import os
    import sys

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    with _scratch_file() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [ln for ln in tmp.read().decode(errors="replace").splitlines(True) if not drop(ln)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def _scratch_file():
    """An anonymous file in memory (memfd) for what a library prints: no tempfile module, whose import (random,
    shutil, bz2, lzma: ~3 ms) was part of every LiteRT and OpenVINO load; a temporary file where memfd is missing."""
    import os

    try:
        return open(os.memfd_create("edge-runtime-stderr", os.MFD_CLOEXEC), "w+b")
    except (AttributeError, OSError):
        import tempfile

        return tempfile.TemporaryFile()


def distribution_version(dist: str) -> str:
    """The installed version of a distribution (`pip show`'s), or "unknown"; one lookup for every backend."""
    from edge_runtime.system.environment import installed_version  # here: a backend loaded never asks

    return installed_version(dist) or "unknown"


class Backend(abc.ABC):
    """A loaded model on one engine. Subclasses set the class attributes and implement the abstract methods.

    What every backend needs and would otherwise repeat lives here: the refuse-or-fallback rule for a device or
    delegate it cannot use (`refuse_or_fallback`), the installed version by distribution name, and `status()` for
    `edge-runtime info`, built on the backend's own `describe()`.
    """

    name: ClassVar[str]
    extra: ClassVar[str]  # the pip extra that installs the library: edge-runtime[<extra>]
    # The pip distributions of the library, in the order tried; their versions go into every result's environment.
    distributions: ClassVar[tuple[str, ...]] = ()
    formats: ClassVar[frozenset[str]]  # model formats it reads (edge_runtime.runtime.model.FORMATS values)
    # True when bind_input must be called before every run (the backend copies inputs in, e.g. TFLite set_tensor);
    # False when a bound array's memory is read by each run, so rebinding the same array object is skipped.
    rebind_each_run: ClassVar[bool] = False
    # True when output() already returns a fresh array the caller may keep (TFLite get_tensor copies).
    output_is_copy: ClassVar[bool] = False

    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    device: str  # what actually runs, in the backend's words (provider, device name)
    delegate: str | None = None
    fallback_reason: str | None = None
    details: dict  # backend-specific facts worth reporting (provider, XNNPACK on/off, library flavour)

    @classmethod
    @abc.abstractmethod
    def library_version(cls) -> str:
        """The installed library's version; raises BackendNotInstalledError when it is not installed."""

    @classmethod
    @abc.abstractmethod
    def describe(cls) -> dict:
        """What `edge-runtime info` shows: `version`, `devices` (the names --device takes), `summary` (one line for
        people: providers, device names, delegates found) and any backend-specific keys."""

    @classmethod
    def status(cls) -> dict:
        """`describe()` with `installed: True`, or why the library cannot be used and which extra installs it."""
        install = f"pip install 'edge-runtime[{cls.extra}]'"
        try:
            return {"installed": True, **cls.describe()}
        except Exception as err:  # noqa: BLE001 - a missing or broken install is reported, never fatal to `info`
            message = getattr(err, "message", None) or f"{type(err).__name__}: {err}"
            return {"installed": False, "error": message, "install": install}

    def refuse_or_fallback(self, options: LoadOptions, why: str, *, device_in_message: bool = True) -> None:
        """A device or delegate that cannot be used: DeviceError, or, when the caller allowed fallback, note why and
        go on (the caller then loads on CPU and the Session reports `fallback`)."""
        from edge_runtime.errors import DeviceError

        if not options.fallback:
            what = f"device {options.device!r}: {why}" if device_in_message else why
            raise DeviceError(what, hint="pass --allow-fallback to run on CPU instead")
        self.fallback_reason = why

    @abc.abstractmethod
    def __init__(self, model: ModelFile, options: LoadOptions) -> None: ...

    @abc.abstractmethod
    def bind_input(self, index: int, array: np.ndarray) -> None:
        """Make `array` (already the right dtype, shape and C-contiguous) the input `index` of the next runs."""

    @abc.abstractmethod
    def run(self) -> None:
        """One inference on the bound inputs."""

    @abc.abstractmethod
    def output(self, index: int) -> np.ndarray:
        """The last run's output `index`. May be memory the backend reuses: the Session copies it for the caller."""

    def fast_handles(self) -> FastHandles | None:
        """Optional: zero-argument callables for the hot path of `Session.infer`, valid while inputs stay bound.

        Returning None (the default) keeps the general path. Only worth it where the Python layer is a measurable
        part of a call: the reference small models run in 5-20 us.
        """
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release native resources early; the object is unusable afterwards."""
