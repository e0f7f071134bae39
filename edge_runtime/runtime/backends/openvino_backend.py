"""OpenVINO backend: devices CPU/GPU/NPU/AUTO, performance hint, cache dir, threads; inputs shared, not copied.

Reads OpenVINO IR (.xml + .bin) and also ONNX and TFLite files through OpenVINO's frontends.
"""

from __future__ import annotations

import functools
import sys

import numpy as np

from edge_runtime.errors import DeviceError, ModelError, UserError
from edge_runtime.runtime.backends.base import (
    Backend,
    FastHandles,
    LoadOptions,
    TensorInfo,
    filtered_stderr,
    require,
)
from edge_runtime.runtime.model import ModelFile

DEVICES = ("CPU", "GPU", "NPU", "AUTO")
# Properties of the OpenVINO core rather than of a device plugin, accepted by compile_model for any device.
CORE_PROPERTIES = {"CACHE_DIR", "CACHE_MODE", "ENABLE_MMAP", "FORCE_TBB_TERMINATE", "CACHE_ENCRYPTION_CALLBACKS"}


def _arm_noise():
    """On ARM, OpenVINO's CPU plugin (oneDNN's xbyak_aarch64) prints "<file>, <line>: Can't open MIDR_EL1 sysfs
    entry" on stderr where /sys has no midr_el1 (containers, emulation, some kernels) at every load: dropped, so an
    error stays one line."""
    return filtered_stderr(lambda line: "Can't open MIDR_EL1 sysfs entry" in line)


def _ov():
    # OpenVINO reports usage through `openvino_telemetry` (an ID written under ~/intel, a sender process) whenever
    # the package is there: never from a board. Without it, openvino falls back to a stub.
    if "openvino_telemetry" not in sys.modules:
        sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]  # import now raises ImportError
    with _arm_noise():
        return require("openvino", "openvino", "openvino")


def _core():
    ov = _ov()
    with _arm_noise():
        return ov, ov.Core()


def _version(ov) -> str:
    return ov.get_version().split("-")[0]


class OpenVinoBackend(Backend):
    name = "openvino"
    extra = "openvino"
    distributions = ("openvino",)
    formats = frozenset({"openvino", "onnx", "tflite"})

    @classmethod
    def library_version(cls) -> str:
        return _version(_ov())

    @classmethod
    def describe(cls) -> dict:
        ov, core = _core()
        devices = {}
        with _arm_noise():
            for d in core.available_devices:
                try:
                    devices[d] = str(core.get_property(d, "FULL_DEVICE_NAME"))
                except Exception:  # noqa: BLE001 - a device that cannot name itself is still listed
                    devices[d] = ""
        return {
            "version": _version(ov),
            "devices": list(devices),
            "device_names": devices,
            "summary": ", ".join(f"{d}: {n}" for d, n in devices.items()),
        }

    def __init__(self, model: ModelFile, options: LoadOptions) -> None:
        with _arm_noise():  # the CPU plugin prints it when first loaded, by whichever call comes first
            self._init(model, options)

    def _init(self, model: ModelFile, options: LoadOptions) -> None:
        ov, core = _core()
        self._ov = ov
        if options.delegate:
            raise DeviceError("openvino takes no --delegate (delegates are TFLite's)", hint="use --device CPU|GPU|NPU")
        device = (options.device or "CPU").upper()
        base = device.split(":", 1)[0].split(".", 1)[0]
        if base not in DEVICES and base not in ("HETERO", "MULTI", "BATCH"):
            raise DeviceError(
                f"openvino device {options.device!r} is not known", hint=f"choose one of: {', '.join(DEVICES)}"
            )
        self.fallback_reason = None
        available = core.available_devices
        if base in ("GPU", "NPU") and not any(d.split(".")[0] == base for d in available):
            self.refuse_or_fallback(
                options, f"openvino {_version(ov)} sees no {base} here (available: {', '.join(available)})"
            )
            device = "CPU"

        user = {key.upper(): value for key, value in options.options.items()}
        if device == "CPU":
            config = _cpu_config(
                options, self._user_options_for_cpu(core, user, options, fallback=self.fallback_reason is not None)
            )
        else:
            config = {"PERFORMANCE_HINT": "LATENCY", **user}

        try:
            ov_model = core.read_model(str(model.path))
        except Exception as err:
            raise ModelError(f"model {str(model.path)!r}: openvino cannot read it: {_short(err)}") from err
        try:
            compiled = core.compile_model(ov_model, device, config)
        except Exception as err:
            if device == "CPU":
                raise _compile_error(model, err) from err
            self.refuse_or_fallback(options, f"openvino could not compile for {device}: {_short(err)}")
            device = "CPU"
            config = _cpu_config(options, self._user_options_for_cpu(core, user, options, fallback=True))
            try:
                compiled = core.compile_model(ov_model, "CPU", config)
            except Exception as err2:
                raise _compile_error(model, err2) from err2
        self._compiled = compiled
        self.details = {"performance_hint": str(config.get("PERFORMANCE_HINT", ""))}
        try:
            precision = compiled.get_property("INFERENCE_PRECISION_HINT")
            self.details["inference_precision"] = getattr(precision, "to_string", precision.__str__)()
        except Exception:  # noqa: BLE001 - not every device reports it
            pass
        self.device = device
        if device == "AUTO":
            try:
                self.device = "AUTO:" + ",".join(compiled.get_property("EXECUTION_DEVICES"))
            except Exception:  # noqa: BLE001 - older plugins do not report it
                pass

        self.inputs = [_info(p, "input") for p in compiled.inputs]
        self.outputs = [_info(p, "output") for p in compiled.outputs]
        self._request = compiled.create_infer_request()
        self._bound: list[object] = [None] * len(self.inputs)
        # InferRequest.infer() in Python dispatches its inputs argument and wraps the result in an OVDict, copying
        # the outputs: ~1.5 us a call. Inputs are already set and outputs are read from the output tensors, so call
        # the pybind method under it with no inputs and shared outputs when this OpenVINO has it.
        base = getattr(type(self._request), "__mro__", (None, None))[1]
        self._run = self._request.infer
        if base is not None and hasattr(base, "infer"):
            self._run = functools.partial(base.infer, self._request, {}, True, False)

    def _user_options_for_cpu(self, core, user: dict, options: LoadOptions, fallback: bool) -> dict:
        """The user's --option properties the CPU plugin knows. Asked for CPU, an unknown one is an error; after a
        fallback from another device, the ones meant for that device are dropped, and the fallback reason says so."""
        try:
            known = set(core.get_property("CPU", "SUPPORTED_PROPERTIES")) | CORE_PROPERTIES
        except Exception:  # noqa: BLE001 - cannot tell: let compile_model judge
            return user
        unknown = [k for k in user if k not in known]
        if unknown and not fallback:
            raise UserError(
                f"openvino option(s) {', '.join(map(repr, unknown))}: not a property of the CPU plugin",
                hint="see `benchmark_app -h` or OpenVINO's CPU device properties",
            )
        if unknown:
            self.fallback_reason = f"{self.fallback_reason}; option(s) {', '.join(unknown)} dropped for CPU"
        return {k: v for k, v in user.items() if k in known}

    def bind_input(self, index: int, array: np.ndarray) -> None:
        # shared_memory=True: the tensor reads the array's memory, so in-place changes are seen by each run.
        tensor = self._ov.Tensor(array, shared_memory=True)
        self._request.set_input_tensor(index, tensor)
        self._bound[index] = (array, tensor)

    def run(self) -> None:
        self._run()

    def output(self, index: int) -> np.ndarray:
        return self._request.get_output_tensor(index).data

    def fast_handles(self) -> FastHandles | None:
        if any(None in o.shape for o in self.outputs):
            return None  # dynamic outputs may be reallocated by a run
        # Output tensors of a static model keep their memory across runs: a view taken once stays valid.
        views = [self._request.get_output_tensor(i).data for i in range(len(self.outputs))]
        outs = tuple((o.name, v.copy) for o, v in zip(self.outputs, views, strict=True))
        return FastHandles(None, self._run, outs)

    def close(self) -> None:
        self._request = None
        self._compiled = None


def _cpu_config(options: LoadOptions, user: dict) -> dict[str, object]:
    config: dict[str, object] = {
        "PERFORMANCE_HINT": "LATENCY",
        "NUM_STREAMS": 1,
        # OpenVINO runs FP32 layers in bf16 on CPUs with AMX/AVX512-BF16 unless told otherwise; keep f32 so a result
        # does not change meaning with the CPU it ran on. --option INFERENCE_PRECISION_HINT=bf16 opts in.
        "INFERENCE_PRECISION_HINT": "f32",
    }
    if options.threads:
        config["INFERENCE_NUM_THREADS"] = options.threads
    if options.cpus:
        # OpenVINO keeps its workers inside the process affinity mask (set by the Session); pinning each worker to a
        # core of that mask is what ENABLE_CPU_PINNING does.
        config["ENABLE_CPU_PINNING"] = True
    config.update(user)
    return config


def _short(err: Exception) -> str:
    """OpenVINO messages start with C++ source locations and check expressions; keep the sentences for people."""
    noise = ("Exception from ", "Check '", "FrontEnd API failed")
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    kept = [ln for ln in lines if not ln.startswith(noise)] or lines
    return " ".join(" ".join(kept).split())[:400]


def _compile_error(model: ModelFile, err: Exception) -> ModelError:
    return ModelError(f"model {str(model.path)!r}: openvino cannot compile it: {_short(err)}")


def _info(port, kind: str) -> TensorInfo:
    ps = port.get_partial_shape()
    shape = tuple(d.get_length() if d.is_static else None for d in ps)
    dtype = np.dtype(port.get_element_type().to_dtype())
    name = port.get_any_name() if port.get_names() else f"{kind}{port.get_index()}"
    return TensorInfo(name, shape, dtype)
