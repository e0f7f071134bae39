"""Session.infer against each backend's own idiomatic call on the same model, interleaved A B A B in one run.

Goal: Session.infer costs at most 3% more than the raw call (ratio <= 1.03), on digits_cnn INT8 (a ~10 us model,
where any Python overhead shows) and resnet8 INT8. Both sides run one thread, same model file, same input array, and
both return output arrays the caller owns. Reported as ratios (see the summary after the run), not asserted: timings
on a shared 2-core machine vary run to run.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import artifact, need

import edge_runtime

from .conftest import report_ratio

FILES = {"onnxruntime": "_int8.onnx", "openvino": "_int8.xml", "tflite": "_int8.tflite"}
SIZES = {"digits_cnn": (300, 31), "resnet8": (20, 31)}  # calls per block, rounds


def raw_call(backend: str, path, x: np.ndarray, lowest: bool = False):
    """The call a user of the library would write, with the same settings the Session uses. `lowest`: the library's
    own lowest-overhead way (inputs bound once, outputs into preallocated memory, copied out), where it has one."""
    if backend == "onnxruntime" and lowest:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        binding = sess.io_binding()
        binding.bind_ortvalue_input(sess.get_inputs()[0].name, ort.OrtValue.ortvalue_from_numpy(x))
        o = sess.get_outputs()[0]
        out = np.empty(o.shape, dtype=np.float32)
        binding.bind_ortvalue_output(o.name, ort.OrtValue.ortvalue_from_numpy(out))

        def call():
            sess.run_with_iobinding(binding)
            return [out.copy()]

        return call
    if backend == "openvino" and lowest:
        import openvino as ov

        config = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "INFERENCE_NUM_THREADS": 1}
        req = (
            ov.Core()
            .compile_model(str(path), "CPU", {**config, "INFERENCE_PRECISION_HINT": "f32"})
            .create_infer_request()
        )
        req.set_input_tensor(0, ov.Tensor(x, shared_memory=True))

        def call():
            req.infer()
            return [req.get_output_tensor(0).data.copy()]

        return call
    if backend == "onnxruntime":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        feeds = {sess.get_inputs()[0].name: x}
        return lambda: sess.run(None, feeds)
    if backend == "openvino":
        import openvino as ov

        core = ov.Core()
        config = {
            "PERFORMANCE_HINT": "LATENCY",
            "NUM_STREAMS": 1,
            "INFERENCE_NUM_THREADS": 1,
            "INFERENCE_PRECISION_HINT": "f32",
        }
        req = core.compile_model(str(path), "CPU", config).create_infer_request()
        return lambda: req.infer({0: x})
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path), num_threads=1)
    it.allocate_tensors()
    i, o = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]

    def call():
        it.set_tensor(i, x)
        it.invoke()
        return it.get_tensor(o)

    return call


def _first(result) -> np.ndarray:
    if isinstance(result, list):  # onnxruntime
        return result[0]
    if hasattr(result, "values"):  # openvino OVDict
        return next(iter(result.values()))
    return result  # tflite


def _block(fn, n: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n / 1e3


REFERENCES = [(b, "idiomatic") for b in FILES] + [("onnxruntime", "lowest"), ("openvino", "lowest")]


@pytest.mark.parametrize("model", list(SIZES))
@pytest.mark.parametrize(("backend", "reference"), REFERENCES, ids=[f"{b}-{r}" for b, r in REFERENCES])
def test_session_infer_vs_raw_call(benchmark, backend, reference, model):
    need(backend)
    path = artifact(model, FILES[backend])
    session = edge_runtime.load(path, backend=backend, threads=1, sandbox=False)
    t = session.inputs[0]
    x = t.quantize(np.random.default_rng(0).random(t.shape, dtype=np.float32))
    feeds = {t.name: x}
    raw = raw_call(backend, path, x, lowest=reference == "lowest")
    ours = lambda: session.infer(feeds)  # noqa: E731
    # Both sides do the same work: same answer.
    np.testing.assert_array_equal(_first(raw()), ours()[session.outputs[0].name])
    n, rounds = SIZES[model]
    for fn in (raw, ours):  # warm-up both
        _block(fn, n)
    raw_t, ours_t, ratios = [], [], []
    state = {"round": 0}

    def one_round():
        k = state["round"]
        state["round"] += 1
        if k % 2:  # alternate which goes first: A B, B A, ...
            b = _block(ours, n)
            a = _block(raw, n)
        else:
            a = _block(raw, n)
            b = _block(ours, n)
        raw_t.append(a)
        ours_t.append(b)
        ratios.append(b / a)

    benchmark.group = f"{model} on {backend} vs {reference} call"
    benchmark.pedantic(one_round, rounds=rounds, iterations=1, warmup_rounds=0)
    report_ratio(benchmark, f"{model} int8 {backend} vs {reference}", raw_t, ours_t, goal=1.03, per_round=ratios)
    session.close()
    assert len(ratios) == rounds
