"""ONNX Runtime backend: execution providers as devices, inputs and outputs bound once through IOBinding.

ONNX Runtime itself falls back to CPU when an execution provider fails to initialise (it only logs). We compare the
providers the session really got with the ones asked for, so such a fallback is an error or a reported fallback.

A provider the onnxruntime wheel does not build in may come as a plugin library in its own package (PLUGINS: the
OpenVINO provider is `onnxruntime-ep-openvino`, extra `onnxruntime-openvino-ep`): registered with ONNX Runtime once
per process and added to the session by device (SessionOptions.add_provider_for_devices), the nodes it does not take
left to the CPU provider.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import re
from collections.abc import Callable

import numpy as np

from edge_runtime.errors import DeviceError, ModelError, UserError
from edge_runtime.runtime.backends.base import Backend, FastHandles, LoadOptions, TensorInfo, require
from edge_runtime.runtime.model import ModelFile

# --device name -> execution provider (onnxruntime.ai/docs/execution-providers).
PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "qnn": "QNNExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "dml": "DmlExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "migraphx": "MIGraphXExecutionProvider",
    "nnapi": "NnapiExecutionProvider",
    "xnnpack": "XnnpackExecutionProvider",
    "acl": "ACLExecutionProvider",
    "armnn": "ArmNNExecutionProvider",
    "rknpu": "RknpuExecutionProvider",
    "vitisai": "VitisAIExecutionProvider",
}
# A session config key (onnxruntime_session_options_config_keys.h): session. then dotted lowercase words.
_SESSION_KEY = re.compile(r"session(\.[a-z0-9_]+)+")
# TensorRT needs CUDA for the nodes it does not take.
_COMPANIONS = {"TensorrtExecutionProvider": ["CUDAExecutionProvider"]}
# Providers that come as plugin libraries (onnxruntime.ai/docs/execution-providers/plugin-ep-libraries), used where the
# onnxruntime wheel does not build them in: provider -> (Python module, its pip distribution, edge-runtime's extra).
# The module's get_library_path() names the library. onnxruntime-ep-openvino bundles its own OpenVINO runtime: it
# loads beside the `openvino` package in one process (both 2026.4.1 here, either first: research 29).
PLUGINS = {
    "OpenVINOExecutionProvider": ("onnxruntime_ep_openvino", "onnxruntime-ep-openvino", "onnxruntime-openvino-ep"),
}
# A plugin's bundled runtime that must not be the first of its soname in the process: the package to import first.
RUNTIME_FIRST = {"OpenVINOExecutionProvider": "openvino"}
# The plugin providers this process registered (ONNX Runtime refuses a second registration under one name).
_REGISTERED: set[str] = set()

_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(int16)": np.int16,
    "tensor(uint16)": np.uint16,
    "tensor(int32)": np.int32,
    "tensor(uint32)": np.uint32,
    "tensor(int64)": np.int64,
    "tensor(uint64)": np.uint64,
    "tensor(bool)": np.bool_,
}


def import_ort():
    """onnxruntime, imported with its telemetry off (every import of it in this package goes through here)."""
    # A board-side runtime sends nothing anywhere. ONNX Runtime 1.29+ starts its POSIX telemetry (an upload, and a
    # device ID written under ~/.cache) when it initialises, before disable_telemetry_events() can act: only this
    # variable, set before the import, stops it. It also stops the "Failed to persist telemetry device ID" line ORT
    # prints on stderr for a user whose home is not writable. A value the user set is left alone.
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    ort = require("onnxruntime", "onnxruntime", "onnxruntime")
    if hasattr(ort, "disable_telemetry_events"):
        ort.disable_telemetry_events()
    return ort


def _shape(dims) -> tuple[int | None, ...]:
    return tuple(d if isinstance(d, int) and d >= 0 else None for d in dims)


def _tensor_info(node, model: ModelFile, kind: str) -> TensorInfo:
    dtype = _DTYPES.get(node.type)
    if dtype is None:
        raise ModelError(
            f"model {str(model.path)!r}: {kind} {node.name!r} has type {node.type}, which edge_runtime does not "
            f"support (supported: {', '.join(sorted(t[7:-1] for t in _DTYPES))})"
        )
    return TensorInfo(node.name, _shape(node.shape), np.dtype(dtype))


def _installed(provider: str) -> bool:
    """Whether `provider`'s plugin package is installed (its module found, not imported)."""
    return importlib.util.find_spec(PLUGINS[provider][0]) is not None


def _load_first(provider: str) -> None:
    """Load the runtime the plugin bundles from its own package first, where that package is installed: the
    OpenVINO plugin carries a libopenvino.so with the openvino package's soname (2026.4.1: .2641) but only the ONNX
    and IR frontends beside it; loaded first, it is the one `import openvino` then binds to, and OpenVINO can no
    longer read .tflite (or PaddlePaddle, TensorFlow) models in that process. The package's library loaded first
    serves both."""
    module = RUNTIME_FIRST.get(provider)
    if module and importlib.util.find_spec(module) is not None:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - a broken openvino is the openvino backend's to report, not the plugin's
            pass


def plugin_devices(ort, provider: str, device_type: str | None) -> tuple[list, str | None]:
    """(the OrtEpDevices to add for `provider`'s plugin, None) with its library registered, or ([], why not): the
    package is not installed, does not register, or offers no device (`device_type`: the plugin's device, e.g. CPU
    or GPU for OpenVINO; else its first)."""
    module, dist, extra = PLUGINS[provider]
    try:
        pkg = importlib.import_module(module)
    except ImportError:
        available = ", ".join(ort.get_available_providers())
        return [], (
            f"onnxruntime {ort.__version__} has no {provider} here (available: {available}) and its plugin is not "
            f"installed (pip install 'edge-runtime[{extra}]', which installs {dist})"
        )
    if not hasattr(ort, "register_execution_provider_library"):
        return [], f"onnxruntime {ort.__version__} cannot load {dist}: plugin providers need onnxruntime 1.22 or later"
    if provider not in _REGISTERED:
        if not any(d.ep_name == provider for d in ort.get_ep_devices()):  # else registered by someone else
            _load_first(provider)
            try:
                ort.register_execution_provider_library(provider, pkg.get_library_path())
            except Exception as err:  # noqa: BLE001 - any failure of a vendor library is the device's, said in one line
                msg = " ".join(str(err).split())[:300]
                return [], f"{dist} did not register with onnxruntime {ort.__version__}: {msg}"
        _REGISTERED.add(provider)
    devices = [d for d in ort.get_ep_devices() if d.ep_name == provider]
    if device_type:
        devices = [d for d in devices if str(d.ep_metadata.get("ov_device", "")).upper() == device_type.upper()]
    if not devices:
        return [], f"{dist} offers no {device_type or ''} device for {provider} here".replace("  ", " ")
    return devices[:1], None


def _providers(provider: str, provider_options: dict[str, str]) -> list:
    """The providers list of an InferenceSession: the one asked for with its options, its companions, then CPU."""
    wanted = [provider, *_COMPANIONS.get(provider, [])]
    providers: list = [(p, provider_options) if p == provider and p != "CPUExecutionProvider" else p for p in wanted]
    if "device_id" in provider_options and len(wanted) > 1:  # TensorRT's CUDA companion runs on the same GPU
        providers[1] = (wanted[1], {"device_id": provider_options["device_id"]})
    if "CPUExecutionProvider" not in wanted:
        providers.append("CPUExecutionProvider")
    return providers


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    extra = "onnxruntime"
    distributions = ("onnxruntime",)
    formats = frozenset({"onnx"})

    @classmethod
    def library_version(cls) -> str:
        return import_ort().__version__

    @classmethod
    def describe(cls) -> dict:
        ort = import_ort()
        available = ort.get_available_providers()
        devices = [d for d, p in PROVIDERS.items() if p in available]
        # A plugin that is installed but not registered yet (found without loading its library).
        plugins = [d for d, p in PROVIDERS.items() if p in PLUGINS and p not in available and _installed(p)]
        summary = f"providers: {', '.join(available)}"
        if plugins:
            summary += "; plugins: " + ", ".join(f"{PROVIDERS[d]} ({PLUGINS[PROVIDERS[d]][1]})" for d in plugins)
        return {
            "version": ort.__version__,
            "devices": devices + plugins,
            "providers": available,
            "summary": summary,
        }

    def __init__(
        self, model: ModelFile, options: LoadOptions, *, configure: Callable[[object], None] | None = None
    ) -> None:
        """Load `model` on the provider `options.device` names. `configure`, when given, is called with each
        onnxruntime.SessionOptions after this backend has set it and before a session is made from it (the first try
        and a CPU fallback's alike): the public way to set what no flag reaches (edge_runtime.ops turns the profiler
        on with it)."""
        ort = self._ort = import_ort()
        self._configure = configure
        device = (options.device or "cpu").lower()
        provider = PROVIDERS.get(device)
        if provider is None:
            raise DeviceError(
                f"onnxruntime device {options.device!r} is not known",
                hint=f"choose one of: {', '.join(PROVIDERS)}",
            )
        if options.delegate:
            raise DeviceError("onnxruntime takes no --delegate (delegates are TFLite's)", hint="use --device PROVIDER")
        so, provider_options = self._session_options(options)
        if provider_options and provider == "CPUExecutionProvider":
            raise DeviceError(
                f"onnxruntime option(s) {', '.join(map(repr, provider_options))}: the CPU provider takes no options",
                hint="session config entries start with 'session.', e.g. session.intra_op.allow_spinning=0",
            )

        self.fallback_reason = None
        plugin = False  # the provider's devices added to `so` (a plugin): the session then takes no provider list
        if provider != "CPUExecutionProvider":
            available = ort.get_available_providers()
            if provider in PLUGINS and (provider not in available or provider in _REGISTERED):
                devices, why = plugin_devices(ort, provider, provider_options.pop("device_type", None))
                if why is None:
                    so.add_provider_for_devices(devices, provider_options)
                    plugin = True
                else:
                    self.refuse_or_fallback(options, why)
                    provider = "CPUExecutionProvider"
            elif provider not in available:
                self.refuse_or_fallback(
                    options, f"onnxruntime {ort.__version__} has no {provider} here (available: {', '.join(available)})"
                )
                provider = "CPUExecutionProvider"
            if provider == "CPUExecutionProvider":
                so, _ = self._session_options(options)  # a fresh one: no plugin device left in it
        providers = None if plugin else _providers(provider, provider_options)
        try:
            self._session = self._create(model, so, providers, provider)
        except DeviceError as err:
            self.refuse_or_fallback(options, err.message)
            provider = "CPUExecutionProvider"
            so, _ = self._session_options(options)
            self._session = self._create(model, so, ["CPUExecutionProvider"], provider)
        got = self._session.get_providers()
        if got[0] != provider:
            # ORT logs a provider that fails to start and goes on with the next one: make that visible.
            self.refuse_or_fallback(options, f"{provider} failed to initialise; onnxruntime runs on {got[0]}")
        by_provider = {p: d for d, p in PROVIDERS.items()}
        self.device = by_provider.get(got[0], got[0])
        self.details = {"provider": got[0], "providers": got}
        if plugin and got[0] == provider:
            self.details["plugin"] = PLUGINS[provider][1]

        self.inputs = [_tensor_info(i, model, "input") for i in self._session.get_inputs()]
        self.outputs = [_tensor_info(o, model, "output") for o in self._session.get_outputs()]
        self._binding = self._session.io_binding()
        self._out_arrays: list[np.ndarray | None] = []
        self._dynamic_outputs = [o.name for o in self.outputs if None in o.shape]
        for o in self.outputs:
            if None in o.shape:  # dynamic: ORT allocates each run (rebound before each run, see run())
                self._binding.bind_output(o.name, "cpu")
                self._out_arrays.append(None)
            else:
                arr = np.empty(o.shape, dtype=o.dtype)
                self._binding.bind_ortvalue_output(o.name, ort.OrtValue.ortvalue_from_numpy(arr))
                self._out_arrays.append(arr)
        self._bound: list[object] = [None] * len(self.inputs)

    def _session_options(self, options: LoadOptions):
        """(SessionOptions as the flags set them, the --option keys that are the provider's), `configure` applied."""
        ort = self._ort
        so = ort.SessionOptions()
        so.log_severity_level = 4  # fatal only: errors reach the user as one line through our exceptions
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.inter_op_num_threads = 1
        if options.threads:
            so.intra_op_num_threads = options.threads
        if options.cpus and (options.threads or len(options.cpus)) > 1:
            # One affinity per intra-op worker (the caller's thread is worker 0): "a;b;c" (ORT session option
            # session.intra_op_thread_affinities, onnxruntime_session_options_config_keys.h).
            n = options.threads or len(options.cpus)
            workers = [str(options.cpus[(i + 1) % len(options.cpus)] + 1) for i in range(n - 1)]
            so.intra_op_num_threads = n
            # ORT numbers logical processors from 1 in this option.
            so.add_session_config_entry("session.intra_op_thread_affinities", ";".join(workers))

        # --option keys: "session.*" are ORT session config entries (onnxruntime_session_options_config_keys.h);
        # the rest are options of the execution provider, which the CPU provider has none of.
        provider_options = {}
        for key, value in options.options.items():
            if key.startswith("session."):
                if not _SESSION_KEY.fullmatch(key):
                    raise UserError(
                        f"onnxruntime option {key!r}: not a session config key",
                        hint="e.g. session.intra_op.allow_spinning (onnxruntime_session_options_config_keys.h)",
                    )
                if key == "session.intra_op_thread_affinities" and options.cpus:
                    raise UserError(
                        f"onnxruntime option {key!r}: --cpus sets the workers' affinities; give one or the other"
                    )
                so.add_session_config_entry(key, str(value))
            else:
                provider_options[key] = str(value)
        if self._configure is not None:
            self._configure(so)
        return so, provider_options

    def _create(self, model: ModelFile, so, providers, provider: str):
        """The session; `providers` None where the provider's plugin devices are in `so`."""
        try:
            return self._ort.InferenceSession(str(model.path), sess_options=so, providers=providers)
        except Exception as err:
            msg = " ".join(str(err).split())
            if provider != "CPUExecutionProvider" and ("ExecutionProvider" in msg or "provider" in msg.lower()):
                raise DeviceError(f"onnxruntime could not start {provider}: {msg[:300]}") from err
            raise ModelError(f"model {str(model.path)!r}: onnxruntime cannot load it: {msg[:400]}") from err

    def bind_input(self, index: int, array: np.ndarray) -> None:
        # OrtValue.ortvalue_from_numpy shares the array's memory: later in-place changes are seen by each run.
        value = self._ort.OrtValue.ortvalue_from_numpy(array)
        self._binding.bind_ortvalue_input(self.inputs[index].name, value)
        self._bound[index] = (array, value)  # keep both alive while bound

    def run(self) -> None:
        for name in self._dynamic_outputs:  # else ORT keeps the first run's buffer and refuses another shape
            self._binding.bind_output(name, "cpu")
        self._session.run_with_iobinding(self._binding)

    def output(self, index: int) -> np.ndarray:
        arr = self._out_arrays[index]
        if arr is None:
            return self._binding.copy_outputs_to_cpu()[index]
        return arr

    def fast_handles(self) -> FastHandles | None:
        if any(a is None for a in self._out_arrays):
            return None  # dynamic output shapes: ORT allocates per run
        # InferenceSession.run_with_iobinding is a Python wrapper around the pybind call with the same arguments;
        # on a ~12 us model that frame shows, so call what it calls when this ORT has the same layout.
        inner, binding = getattr(self._session, "_sess", None), getattr(self._binding, "_iobinding", None)
        if inner is not None and binding is not None and hasattr(inner, "run_with_iobinding"):
            run = functools.partial(inner.run_with_iobinding, binding, None)
        else:
            run = functools.partial(self._session.run_with_iobinding, self._binding)
        outs = tuple((o.name, arr.copy) for o, arr in zip(self.outputs, self._out_arrays, strict=True))
        return FastHandles(None, run, outs)  # type: ignore[arg-type]

    def close(self) -> None:
        self._binding = None
        self._session = None
