"""Devices, execution providers and delegates that cannot be used: an error by default, a reported CPU fallback when
allowed. Real libraries only: providers and devices this machine lacks, and small delegate libraries compiled here."""

from __future__ import annotations

import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import artifact, need

import edge_runtime
from edge_runtime import DeviceError, FallbackWarning

DELEGATE_SOURCES = {
    # Loads, but creates no delegate: load_delegate raises ValueError.
    "null_delegate": "void* tflite_plugin_create_delegate(char** k, char** v, unsigned long n, void* e) { return 0; }\n"
    "void tflite_plugin_destroy_delegate(void* d) {}\n",
    # A vendor delegate with a bug: crashes the process that loads it.
    "crash_delegate": "#include <signal.h>\n"
    "void* tflite_plugin_create_delegate(char** k, char** v, unsigned long n, void* e) { raise(SIGSEGV); return 0; }\n"
    "void tflite_plugin_destroy_delegate(void* d) {}\n",
    # A shared library that is no delegate at all: no tflite_plugin_* symbols (AttributeError from ctypes).
    "not_a_delegate": "int answer(void) { return 42; }\n",
}


@pytest.fixture(scope="module")
def delegates(tmp_path_factory) -> dict[str, Path]:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build the test delegates: apt-get install gcc")
    out = tmp_path_factory.mktemp("delegates")
    libs = {}
    for name, src in DELEGATE_SOURCES.items():
        c = out / f"{name}.c"
        c.write_text(src)
        lib = out / f"lib{name}.so"
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(c)], check=True, capture_output=True)
        libs[name] = lib
    return libs


def _zeros(s):
    return {t.name: np.zeros(t.shape, t.dtype) for t in s.inputs}


def _cpu_reference(path, backend, x):
    with edge_runtime.load(path, backend=backend, sandbox=False) as s:
        return s.infer(x)


@pytest.mark.parametrize(
    ("backend", "suffix", "device"),
    [
        ("onnxruntime", "_int8.onnx", "cuda"),
        ("onnxruntime", "_int8.onnx", "tensorrt"),
        ("onnxruntime", "_int8.onnx", "qnn"),
        ("openvino", "_int8.xml", "NPU"),
        ("openvino", "_int8.xml", "GPU"),
    ],
)
def test_missing_device_is_an_error_or_a_reported_fallback(backend, suffix, device):
    need(backend)
    path = artifact("digits_cnn", suffix)
    with pytest.raises(DeviceError, match=rf"device '{device}'.*--allow-fallback"):
        edge_runtime.load(path, backend=backend, device=device, sandbox=False)
    with pytest.warns(FallbackWarning, match="falling back to CPU"):
        s = edge_runtime.load(path, backend=backend, device=device, fallback=True, sandbox=False)
    with s:
        assert s.backend.fallback is True
        assert s.backend.requested_device == device
        assert s.backend.device.lower() == "cpu"
        # The reason names what was missing, in the library's own words.
        if backend == "onnxruntime":
            from edge_runtime.runtime.backends.onnxruntime_backend import PROVIDERS

            assert f"has no {PROVIDERS[device]} here" in s.backend.fallback_reason
        else:
            assert f"sees no {device} here" in s.backend.fallback_reason
        x = _zeros(s)
        ref = _cpu_reference(path, backend, x)
        np.testing.assert_array_equal(s.infer(x)[s.outputs[0].name], ref[s.outputs[0].name])


@pytest.mark.parametrize(
    ("backend", "device", "needle"),
    [
        ("onnxruntime", "tpu9000", "choose one of: cpu, cuda, tensorrt"),
        ("openvino", "FPGA", "choose one of: CPU, GPU, NPU, AUTO"),
        ("tflite", "npu", "TFLite reaches an NPU or GPU through --delegate PATH"),
    ],
)
def test_unknown_or_unreachable_device_names_the_choices(backend, device, needle):
    need(backend)
    path = artifact(
        "digits_cnn", {"onnxruntime": "_int8.onnx", "openvino": "_int8.xml", "tflite": "_int8.tflite"}[backend]
    )
    with pytest.raises(DeviceError) as err:
        edge_runtime.load(path, backend=backend, device=device, sandbox=False)
    text = str(err.value)
    assert repr(device) in text
    assert needle in text


def test_cpu_device_is_no_fallback():
    need("onnxruntime")
    with edge_runtime.load(artifact("digits_cnn", "_int8.onnx"), device="cpu", sandbox=False) as s:
        assert s.backend.fallback is False and s.backend.fallback_reason is None
        assert s.backend.details["provider"] == "CPUExecutionProvider"


@pytest.mark.parametrize("which", ["missing", "not_a_delegate", "null_delegate"])
def test_delegate_that_does_not_load(which, delegates, tmp_path):
    need("tflite")
    path = artifact("digits_cnn", "_int8.tflite")
    lib = str(tmp_path / "libnope.so") if which == "missing" else str(delegates[which])
    with pytest.raises(DeviceError, match=rf"delegate '{lib}' does not load.*--allow-fallback"):
        edge_runtime.load(path, delegate=lib, delegate_options={"k": "v"}, sandbox=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = edge_runtime.load(path, delegate=lib, fallback=True, sandbox=False)
    assert [w.category for w in caught] == [FallbackWarning]
    with s:
        assert (s.backend.fallback, s.backend.delegate, s.backend.device) == (True, None, "cpu")
        assert s.backend.requested_delegate == lib
        s.infer(_zeros(s))


def test_delegate_that_crashes_is_caught_in_the_child(delegates):
    """The crash happens in the probe child: this process survives and gets an error, or a fallback when allowed."""
    need("tflite")
    path = artifact("digits_cnn", "_int8.tflite")
    lib = str(delegates["crash_delegate"])
    with pytest.raises(DeviceError, match=r"crashes the tflite backend \(SIGSEGV\)"):
        edge_runtime.load(path, delegate=lib)
    with pytest.warns(FallbackWarning, match="SIGSEGV"):
        s = edge_runtime.load(path, delegate=lib, fallback=True)
    with s:
        assert s.backend.fallback is True and s.backend.delegate is None
        assert "crashes" in s.backend.fallback_reason
        s.infer(_zeros(s))


def test_delegate_is_refused_by_backends_without_delegates():
    need("onnxruntime")
    with pytest.raises(DeviceError, match="no --delegate"):
        edge_runtime.load(artifact("digits_cnn", "_int8.onnx"), delegate="/usr/lib/libvx_delegate.so", sandbox=False)


def test_xnnpack_can_be_turned_off_and_results_stay_within_one_step():
    need("tflite")
    path = artifact("digits_cnn", "_int8.tflite")
    with (
        edge_runtime.load(path, sandbox=False) as a,
        edge_runtime.load(path, options={"xnnpack": "0"}, sandbox=False) as b,
    ):
        assert a.backend.details["xnnpack"] is True and b.backend.details["xnnpack"] is False
        x = {a.inputs[0].name: a.inputs[0].quantize(np.full(a.inputs[0].shape, 0.5, np.float32))}
        # XNNPACK and the built-in kernels round differently: at most one quantization step apart.
        qa, qb = a.infer(x)[a.outputs[0].name], b.infer(x)[b.outputs[0].name]
        assert np.max(np.abs(qa.astype(int) - qb.astype(int))) <= 1


def test_openvino_reports_f32_precision_by_default():
    need("openvino")
    with edge_runtime.load(artifact("digits_cnn", "_fp32.onnx"), backend="openvino", sandbox=False) as s:
        assert s.backend.details["inference_precision"] == "f32"


# ------------------------------------------------------------------------------------ hostile cases (issue 9's reviews)
def test_litert_messages_keep_their_separators():
    need("tflite")
    from edge_runtime.runtime.backends.tflite_backend import _impl, _short

    _, mod = _impl()
    interp = mod.Interpreter(model_path=str(artifact("digits_cnn", "_int8.tflite")))
    interp.resize_tensor_input(interp.get_input_details()[0]["index"], [1, 64])
    with pytest.raises(RuntimeError) as err:
        interp.allocate_tensors()
    raw = str(err.value)
    assert ")Node number" in raw  # LiteRT's own text runs together
    text = _short(err.value)
    assert "); Node number 0 (CONV_2D) failed to prepare." in text and ")Node" not in text
