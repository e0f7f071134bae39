"""TFLite / LiteRT backend: `ai_edge_litert` first, `tflite_runtime` where it is the one installed; XNNPACK by default;
external delegates (libvx_delegate.so, libedgetpu.so.1, libarmnnDelegate.so, ...) by path with key=value options.

`load_delegate` fails with ValueError, OSError or AttributeError depending on how the library is wrong, and applying
a delegate can fail later with RuntimeError: all of them are a delegate that cannot be used.
"""

from __future__ import annotations

import functools
import os
import re

import numpy as np

from edge_runtime.errors import BackendNotInstalledError, DeviceError, FeedError, ModelError, UserError
from edge_runtime.files.inputs import check_input
from edge_runtime.runtime.backends.base import (
    Backend,
    FastHandles,
    LoadOptions,
    Quantization,
    TensorInfo,
    distribution_version,
    filtered_stderr,
)
from edge_runtime.runtime.model import ModelFile

# Which flavour to use can be forced, e.g. to test tflite_runtime on a machine that has both.
IMPL_ENV = "EDGE_RUNTIME_TFLITE_IMPL"
_DELEGATE_ERRORS = (ValueError, OSError, AttributeError, RuntimeError)


def _impl() -> tuple[str, object]:
    """(distribution name, interpreter module)."""
    wanted = os.environ.get(IMPL_ENV, "")
    if wanted and wanted not in ("ai-edge-litert", "tflite-runtime"):
        from edge_runtime.errors import UserError

        raise UserError(f"{IMPL_ENV}={wanted!r}: not one of ai-edge-litert, tflite-runtime")
    errors = []
    order = [wanted] if wanted else ["ai-edge-litert", "tflite-runtime"]
    for dist in order:
        try:
            if dist == "ai-edge-litert":
                from ai_edge_litert import interpreter as mod
            elif dist == "tflite-runtime":
                from tflite_runtime import interpreter as mod
            else:
                raise ImportError(f"{IMPL_ENV}={dist!r} is not one of ai-edge-litert, tflite-runtime")
            return dist, mod
        except ImportError as err:
            errors.append(str(err))
    raise BackendNotInstalledError(
        f"backend 'tflite' is not installed ({'; '.join(errors)})", hint="pip install 'edge-runtime[tflite]'"
    )


def _numpy_major() -> int:
    return int(np.__version__.split(".")[0])


_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
# --option keys this backend understands (delegate options go to --delegate-option).
OPTIONS = {"xnnpack": "1|0: apply LiteRT's default XNNPACK CPU delegate (default 1)"}

# Where board images put NPU delegates (boards/ profiles name the exact path per board).
KNOWN_DELEGATES = (
    "/usr/lib/libvx_delegate.so",  # NXP i.MX8M Plus VX (VeriSilicon) delegate
    "/usr/lib/libethosu_delegate.so",  # NXP i.MX93 Ethos-U
    "/usr/lib/libedgetpu.so.1",  # Coral Edge TPU
    "/usr/lib/aarch64-linux-gnu/libedgetpu.so.1",
    "/usr/lib/libarmnnDelegate.so",  # Arm NN
    "/usr/lib/aarch64-linux-gnu/libarmnnDelegate.so",
)


class TfliteBackend(Backend):
    name = "tflite"
    extra = "tflite"
    distributions = ("ai-edge-litert", "tflite-runtime")
    formats = frozenset({"tflite"})
    rebind_each_run = True  # set_tensor copies the input into the interpreter: it is the binding
    output_is_copy = True  # get_tensor returns a copy

    @classmethod
    def library_version(cls) -> str:
        import sys

        dist, _ = _impl()
        # The package's own __version__ when it has one (both do): importlib.metadata costs ~10 ms a process
        top = sys.modules.get(dist.replace("-", "_"))
        version = getattr(top, "__version__", None)
        return version if isinstance(version, str) and version else distribution_version(dist)

    @classmethod
    def describe(cls) -> dict:
        dist, _ = _impl()
        from edge_runtime.system.root import SystemRoot

        root = SystemRoot("/")
        found = [p for p in KNOWN_DELEGATES if root.path(p).exists()]
        return {
            "version": distribution_version(dist),
            "library": dist,
            "devices": ["cpu"],
            "delegates": found,
            "summary": f"{dist}; delegates found: {', '.join(found) or 'none'}",
        }

    def __init__(self, model: ModelFile, options: LoadOptions) -> None:
        dist, mod = _impl()
        self.details = {"library": dist}
        device = (options.device or "").lower()
        if device not in ("", "cpu") and not options.delegate:
            raise DeviceError(
                f"tflite device {options.device!r} needs a delegate",
                hint="TFLite reaches an NPU or GPU through --delegate PATH (e.g. /usr/lib/libvx_delegate.so)",
            )
        self.fallback_reason = None
        delegates = []
        self.delegate = None
        if options.delegate:
            try:
                if os.sep in options.delegate:  # a path (not a soname for dlopen to find): a regular file, or no load
                    try:
                        check_input(options.delegate, "delegate", error=DeviceError)
                    except DeviceError as err:
                        raise OSError(err.message.partition(": ")[2] or err.message) from err
                _check_delegate_library(options.delegate)
                delegates = [mod.load_delegate(options.delegate, dict(options.delegate_options))]
                self.delegate = options.delegate
            except _DELEGATE_ERRORS as err:
                self.refuse_or_fallback(
                    options, device_in_message=False, why=f"delegate {options.delegate!r} does not load: {_short(err)}"
                )
        unknown = [k for k in options.options if k not in OPTIONS]
        if unknown:
            raise UserError(
                f"tflite option(s) {', '.join(map(repr, unknown))} not known",
                hint=f"tflite options: {', '.join(f'{k} ({v})' for k, v in OPTIONS.items())}",
            )
        flag = str(options.options.get("xnnpack", "1")).strip().lower()
        if flag not in _ON + _OFF:
            raise UserError(
                f"tflite option xnnpack={options.options['xnnpack']!r}: not one of {', '.join(_ON + _OFF)}",
                hint=f"xnnpack: {OPTIONS['xnnpack']}",
            )
        xnnpack = flag in _ON
        resolver = mod.OpResolverType.AUTO if xnnpack else mod.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        self.details["xnnpack"] = xnnpack
        try:
            self._interp = self._create(mod, model, options, delegates, resolver)
        except _DELEGATE_ERRORS as err:
            if not delegates:
                raise
            self.refuse_or_fallback(
                options,
                device_in_message=False,
                why=f"delegate {options.delegate!r} cannot run this model: {_short(err)}",
            )
            self.delegate = None
            self._interp = self._create(mod, model, options, [], resolver)
        if self.delegate:
            self.device = device or "delegate"
        else:
            self.device = "cpu"

        self.inputs = [_info(d) for d in self._interp.get_input_details()]
        self.outputs = [_info(d) for d in self._interp.get_output_details()]
        self._in_idx = [d["index"] for d in self._interp.get_input_details()]
        self._in_shapes = [tuple(int(x) for x in d["shape"]) for d in self._interp.get_input_details()]
        self._out_idx = [d["index"] for d in self._interp.get_output_details()]
        self._resized = False  # inputs resized since the last allocation
        self._pending: dict[int, np.ndarray] = {}
        # The public set_tensor/invoke/get_tensor each wrap one pybind call in a Python frame, and invoke() first
        # checks that no numpy view of interpreter memory is alive (_ensure_safe). This backend never takes such a
        # view (SetTensor and GetTensor copy), so it calls the entry points the wrappers call: on a ~5 us model the
        # wrappers are measurable. Holding them makes the public methods' check fail, so resize goes through them too.
        # ai_edge_litert and tflite_runtime 2.14 both have these; otherwise the public methods are used.
        raw = getattr(self._interp, "_interpreter", None)
        if raw is not None and all(
            hasattr(raw, n) for n in ("SetTensor", "Invoke", "GetTensor", "ResizeInputTensor", "AllocateTensors")
        ):
            self._set, self._invoke, self._get_fn, self._get_extra = raw.SetTensor, raw.Invoke, raw.GetTensor, (0,)
            self._resize = lambda i, shape: raw.ResizeInputTensor(i, np.array(shape, dtype=np.int32), False)
            self._allocate = raw.AllocateTensors
        else:
            self._set, self._invoke, self._get_fn, self._get_extra = (
                self._interp.set_tensor,
                self._interp.invoke,
                self._interp.get_tensor,
                (),
            )
            self._resize, self._allocate = self._interp.resize_tensor_input, self._interp.allocate_tensors

    def _create(self, mod, model: ModelFile, options: LoadOptions, delegates, resolver):
        try:
            with _drop_info_logs():
                interp = mod.Interpreter(
                    model_path=str(model.path),
                    experimental_delegates=delegates or None,
                    num_threads=options.threads,
                    experimental_op_resolver_type=resolver,
                )
        except _DELEGATE_ERRORS as err:
            if delegates:
                raise
            self._explain_numpy(err)
            raise ModelError(f"model {str(model.path)!r}: tflite cannot load it: {_short(err)}") from err
        except Exception as err:
            self._explain_numpy(err)
            raise ModelError(f"model {str(model.path)!r}: tflite cannot load it: {_short(err)}") from err
        try:
            with _drop_info_logs():
                interp.allocate_tensors()  # XNNPACK is applied here and says so on stderr
        except RuntimeError as err:
            raise ModelError(f"model {str(model.path)!r}: tflite cannot allocate its tensors: {_short(err)}") from err
        return interp

    def _explain_numpy(self, err: Exception) -> None:
        if self.details["library"] == "tflite-runtime" and _numpy_major() >= 2:
            raise BackendNotInstalledError(
                f"tflite_runtime {distribution_version('tflite-runtime')} cannot run with numpy {np.__version__} "
                "(it was built for numpy < 2)",
                hint="install ai-edge-litert (pip install 'edge-runtime[tflite]') or use numpy<2",
            ) from err

    def bind_input(self, index: int, array: np.ndarray) -> None:
        if array.shape != self._in_shapes[index]:  # a dynamic dimension changed: resize now, allocate once in run()
            self._resize(self._in_idx[index], list(array.shape))
            self._in_shapes[index] = tuple(array.shape)
            self._resized = True
        if self._resized:
            self._pending[index] = array  # tensors move when reallocated: set after allocation
        else:
            self._set(self._in_idx[index], array)

    def run(self) -> None:
        if self._resized:
            try:
                self._allocate()
            except RuntimeError as err:
                shapes = ", ".join(f"{t.name} {s}" for t, s in zip(self.inputs, self._in_shapes, strict=True))
                raise FeedError(f"tflite cannot run with input shapes {shapes}: {_short(err)}") from err
            self._resized = False
            for index, array in self._pending.items():
                self._set(self._in_idx[index], array)
            self._pending.clear()
        self._invoke()

    def output(self, index: int) -> np.ndarray:
        return self._get_fn(self._out_idx[index], *self._get_extra)

    def fast_handles(self) -> FastHandles | None:
        if len(self.inputs) != 1:
            return None
        outs = tuple(
            (o.name, functools.partial(self._get_fn, i, *self._get_extra))
            for o, i in zip(self.outputs, self._out_idx, strict=True)
        )
        return FastHandles(functools.partial(self._set, self._in_idx[0]), self._invoke, outs)

    def close(self) -> None:
        self._set = self._invoke = self._get_fn = self._resize = self._allocate = None  # type: ignore[assignment]
        self._interp = None


def _drop_info_logs():
    """LiteRT prints "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." on stderr for every interpreter, which
    breaks the one-line error promise of the CLI and no environment variable silences it: drop INFO lines (warnings
    and errors stay visible)."""
    return filtered_stderr(lambda line: line.startswith("INFO: "))


def _check_delegate_library(path: str) -> None:
    """Refuse a library without the external-delegate entry points before LiteRT wraps it: its Delegate.__del__
    raises AttributeError on such a library and prints "Exception ignored" noise (tensorflow/lite/delegates/external).
    """
    import ctypes

    lib = ctypes.CDLL(path)  # OSError when missing or not a shared library for this machine
    for symbol in ("tflite_plugin_create_delegate", "tflite_plugin_destroy_delegate"):
        if not hasattr(lib, symbol):
            raise AttributeError(f"not a TFLite external delegate: no {symbol} symbol")


def _short(err: BaseException) -> str:
    """LiteRT's messages, one line. Its C++ reporter appends each message to the last without a separator
    ("... (2 != 4)Node number 0 (CONV_2D) failed to prepare.Failed to apply ..."): put one back between them."""
    text = " ".join(str(err).split())
    text = re.sub(r"\)(?=[A-Z][a-z])", "); ", text)
    text = re.sub(r"\.(?=[A-Z][a-z])", ". ", text)
    return text[:400] or type(err).__name__


def _info(d: dict) -> TensorInfo:
    sig = d.get("shape_signature")
    dims = sig if sig is not None and len(sig) else d["shape"]
    shape = tuple(int(x) if int(x) >= 0 else None for x in dims)
    q = None
    qp = d.get("quantization_parameters") or {}
    scales = np.asarray(qp.get("scales", []), dtype=np.float64)
    zps = np.asarray(qp.get("zero_points", []), dtype=np.int64)
    if scales.size == 1:
        q = Quantization(float(scales[0]), int(zps[0]))
    elif scales.size > 1:
        q = Quantization(scales, zps, int(qp.get("quantized_dimension", 0)))
    return TensorInfo(d["name"], shape, np.dtype(d["dtype"]), q)
