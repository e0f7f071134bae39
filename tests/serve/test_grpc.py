"""Issue 26, the KServe v2 gRPC face (edge_runtime/serve/grpc_server.py) on real parts: the core built from the
committed digits_cnn (fixed batch) and a dynamic-batch copy of resnet8 (tests/batchmodels.py), ONNX Runtime sessions
in the batcher's threads, the server on 127.0.0.1 and tritonclient.grpc as the client (and a bare grpc stub where a
request is built by hand). Outputs are compared with a local Session on the same input.

Timing: no speed is asserted; the one "at once" (a full queue is refused without waiting) is a ratio of the batching
window the queued requests wait through.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from batchmodels import dynamic_batch
from conftest import MODELS, need

import edge_runtime
from edge_runtime.serve.app import Settings, build_core

grpc = pytest.importorskip("grpc", reason="grpcio not installed: pip install 'edge-runtime[serve]'")
tc = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] not installed: pip install tritonclient[grpc]")
from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

from edge_runtime.serve.grpc_server import start_grpc  # noqa: E402

DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"
RESNET = MODELS / "resnet8" / "resnet8_int8.onnx"
DYN = "resnet8_int8_dynamic"  # the dynamic copy's model name (its file name)
FIX = "digits_cnn_int8"
WINDOW_US = 3_000_000  # a batching window long enough that queued requests are surely still queued


class Served:
    def __init__(self, core, server, lines):
        self.core, self.server, self.lines = core, server, lines

    def client(self) -> tc.InferenceServerClient:
        return tc.InferenceServerClient(self.server.address)


@pytest.fixture(scope="module")
def dyn_path(tmp_path_factory):
    need("onnxruntime")
    return dynamic_batch(RESNET, tmp_path_factory.mktemp("models") / f"{DYN}.onnx")


def serve(specs, settings: Settings, **kwargs) -> Served:
    core = build_core([str(s) for s in specs], settings, {"backend": "onnxruntime"})
    lines: list[str] = []
    return Served(core, start_grpc(core, log=lines.append, **kwargs), lines)


def stop(s: Served) -> None:
    s.server.close(grace_s=5)
    s.core.close(timeout_s=10)


@pytest.fixture(scope="module")
def served(dyn_path):
    s = serve([dyn_path, DIGITS], Settings(max_batch=4, max_delay_us=2000, queue=16))
    yield s
    stop(s)


def infer_input(name: str, x: np.ndarray, datatype: str = "FP32") -> tc.InferInput:
    inp = tc.InferInput(name, list(x.shape), datatype)
    inp.set_data_from_numpy(x)
    return inp


def local(path, x: np.ndarray) -> dict:
    s = edge_runtime.load(str(path), backend="onnxruntime")
    try:
        return s.infer({"input": x})
    finally:
        s.close()


def rng_x(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


def refused(fn) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        fn()
    return info.value


def stats_of(s: Served, name: str) -> dict:
    return s.core.statistics(name)["model_stats"][0]


def test_outputs_equal_a_local_session_on_both_models(served, dyn_path):
    c = served.client()
    for name, path, x in [(FIX, DIGITS, rng_x(1, 8, 8, 1)), (DYN, dyn_path, rng_x(3, 32, 32, 3, seed=1))]:
        r = c.infer(name, [infer_input("input", x)], request_id=f"req-{name}")
        want = local(path, x)
        assert r.get_response().id == f"req-{name}" and r.get_response().model_name == name
        for out, arr in want.items():
            got = r.as_numpy(out)
            assert got.shape == arr.shape and got.dtype == arr.dtype
            np.testing.assert_allclose(got, arr, rtol=1e-5, atol=1e-6)


def test_a_request_built_by_hand_with_typed_contents(served, dyn_path):
    x = rng_x(2, 32, 32, 3, seed=2)
    req = service_pb2.ModelInferRequest(model_name=DYN, id="typed")
    t = req.inputs.add(name="input", datatype="FP32", shape=list(x.shape))
    t.contents.fp32_contents.extend(x.ravel().tolist())
    req.outputs.add(name="probabilities")
    with grpc.insecure_channel(served.server.address) as channel:
        reply = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(req, timeout=60)
    assert reply.id == "typed" and [o.name for o in reply.outputs] == ["probabilities"]
    out = reply.outputs[0]
    assert out.datatype == "FP32" and list(out.shape) == [2, 10]
    got = np.frombuffer(reply.raw_output_contents[0], np.float32).reshape(2, 10)
    np.testing.assert_allclose(got, local(dyn_path, x)["probabilities"], rtol=1e-5, atol=1e-6)


def test_metadata_config_and_statistics_carry_names_shapes_and_batching(served):
    c = served.client()
    assert c.is_server_live() and c.is_server_ready() and c.is_model_ready(DYN)
    assert c.get_server_metadata().name == "edge-runtime"
    md = c.get_model_metadata(DYN)
    assert md.name == DYN and md.versions == ["1"]
    assert [(t.name, t.datatype, list(t.shape)) for t in md.inputs] == [("input", "FP32", [-1, 32, 32, 3])]
    assert [(t.name, list(t.shape)) for t in md.outputs] == [("probabilities", [-1, 10])]
    cfg = c.get_model_config(DYN).config
    assert cfg.name == DYN and cfg.max_batch_size == 4
    assert [(t.name, list(t.dims)) for t in cfg.input] == [("input", [32, 32, 3])]
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 2000
    fixed = c.get_model_config(FIX).config
    assert fixed.max_batch_size == 0 and list(fixed.input[0].dims) == [1, 8, 8, 1]
    assert not fixed.HasField("dynamic_batching")
    c.infer(FIX, [infer_input("input", rng_x(1, 8, 8, 1))])
    (st,) = c.get_inference_statistics(FIX).model_stats
    want = stats_of(served, FIX)
    assert st.name == FIX and st.version == "1" and st.inference_count == want["inference_count"] >= 1
    assert st.inference_stats.success.count == want["inference_stats"]["success"]["count"] >= 1
    assert sorted(s.name for s in c.get_inference_statistics().model_stats) == sorted([DYN, FIX])


def test_eight_clients_are_batched_up_to_max_batch(served):
    before = {b["batch_size"]: b["compute_infer"]["count"] for b in stats_of(served, DYN)["batch_stats"]}

    def client(i: int) -> None:
        c = served.client()
        x = rng_x(1, 32, 32, 3, seed=i)
        for _ in range(15):
            r = c.infer(DYN, [infer_input("input", x)])
            assert r.as_numpy("probabilities").shape == (1, 10)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(client, range(8)))
    (st,) = served.client().get_inference_statistics(DYN).model_stats
    after = {b.batch_size: b.compute_infer.count for b in st.batch_stats}
    grown = {size: n - before.get(size, 0) for size, n in after.items() if n > before.get(size, 0)}
    assert max(after) <= 4, after
    assert any(size > 1 for size in grown), f"no batch above 1 row: {grown}"


def raw_request(model: str, shape, datatype: str, raw: bytes) -> service_pb2.ModelInferRequest:
    req = service_pb2.ModelInferRequest(model_name=model)
    req.inputs.add(name="input", datatype=datatype, shape=list(shape))
    req.raw_input_contents.append(raw)
    return req


def stub_call(address: str, req, metadata=None):
    """The raw call: (reply, None) or (None, the grpc.RpcError with its code and trailing metadata)."""
    with grpc.insecure_channel(address) as channel:
        try:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            return stub.ModelInfer(req, timeout=60, metadata=metadata), None
        except grpc.RpcError as err:
            return None, err


BAD = [
    ("wrong shape", "INVALID_ARGUMENT", lambda c: c.infer(FIX, [infer_input("input", rng_x(1, 8, 8, 2))])),
    ("wrong dtype", "INVALID_ARGUMENT",
     lambda c: c.infer(FIX, [infer_input("input", rng_x(1, 8, 8, 1).astype(np.float64), "FP64")])),
    ("unknown model", "NOT_FOUND", lambda c: c.infer("nope", [infer_input("input", rng_x(1, 8, 8, 1))])),
    ("a name with ../", "NOT_FOUND", lambda c: c.get_model_metadata("../etc/passwd")),
    ("unknown output", "INVALID_ARGUMENT",
     lambda c: c.infer(FIX, [infer_input("input", rng_x(1, 8, 8, 1))], outputs=[tc.InferRequestedOutput("x")])),
]  # fmt: skip


@pytest.mark.parametrize("what,code,call", BAD, ids=[b[0] for b in BAD])
def test_a_bad_request_is_refused_in_one_line_and_the_next_is_served(served, what, code, call):
    c = served.client()
    n = len(served.lines)
    err = refused(lambda: call(c))
    assert err.status() == f"StatusCode.{code}", (what, err)
    assert len(served.lines) == n + 1 and served.lines[-1].startswith(f"edge-runtime serve: {code} grpc ")
    assert "\n" not in served.lines[-1] and "127.0.0.1" in served.lines[-1]
    assert c.infer(FIX, [infer_input("input", rng_x(1, 8, 8, 1))]).as_numpy("logits").shape == (1, 10)


@pytest.mark.parametrize("size", [8 * 8 * 4 - 1, 8 * 8 * 4 + 4, 0])
def test_raw_contents_of_the_wrong_length_are_refused(served, size):
    n = len(served.lines)
    reply, err = stub_call(served.server.address, raw_request(FIX, [1, 8, 8, 1], "FP32", b"\0" * size))
    assert reply is None and err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"{size} bytes of raw contents" in err.details() and "256" in err.details()
    assert len(served.lines) == n + 1
    reply, err = stub_call(served.server.address, raw_request(FIX, [1, 8, 8, 1], "FP32", rng_x(1, 8, 8, 1).tobytes()))
    assert err is None and list(reply.outputs[0].shape) == [1, 10]


@pytest.mark.parametrize("field,value", [("string_param", "soon"), ("int64_param", -5), ("double_param", float("nan"))])
def test_a_timeout_parameter_that_is_not_microseconds_is_refused(served, field, value):
    req = raw_request(FIX, [1, 8, 8, 1], "FP32", rng_x(1, 8, 8, 1).tobytes())
    setattr(req.parameters["timeout"], field, value)
    _, err = stub_call(served.server.address, req)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "parameter 'timeout'" in err.details()


def test_a_message_over_max_message_bytes_is_refused_by_grpc(dyn_path):
    s = serve([DIGITS], Settings(max_batch=1, queue=4), max_message_bytes=1024)
    try:
        _, err = stub_call(s.server.address, raw_request(FIX, [1, 8, 8, 1], "FP32", b"\0" * 2048))
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        reply, err = stub_call(s.server.address, raw_request(FIX, [1, 8, 8, 1], "FP32", rng_x(1, 8, 8, 1).tobytes()))
        assert err is None and list(reply.outputs[0].shape) == [1, 10]
    finally:
        stop(s)


def test_a_huge_declared_shape_is_refused_without_allocating(served):
    _, err = stub_call(served.server.address, raw_request(FIX, [1 << 40, 1 << 20], "FP32", b"\0" * 16))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "bytes of raw contents" in err.details()


def test_a_full_queue_is_refused_at_once_with_retry_after(dyn_path):
    s = serve([dyn_path], Settings(max_batch=4, max_delay_us=WINDOW_US, queue=2))
    try:
        x = rng_x(1, 32, 32, 3)
        with ThreadPoolExecutor(2) as pool:
            waiting = [pool.submit(s.client().infer, DYN, [infer_input("input", x)]) for _ in range(2)]
            until = time.monotonic() + 30
            while s.core.models[DYN].batcher.queued() < 2 and time.monotonic() < until:
                time.sleep(0.01)
            t = time.monotonic()
            reply, err = stub_call(s.server.address, raw_request(DYN, x.shape, "FP32", x.tobytes()))
            took = time.monotonic() - t
            assert reply is None and err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err
            assert dict(err.trailing_metadata()).get("retry-after") == "1"
            assert took < WINDOW_US / 1e6 / 2, f"refused after {took:.2f} s: it waited for the window"
            assert all(not f.done() for f in waiting)  # still in their window: the refusal did not wait for them
            assert [f.result(timeout=60).as_numpy("probabilities").shape for f in waiting] == [(1, 10)] * 2
        assert stats_of(s, DYN)["rejected"] == 1 and len(s.lines) == 1 and "RESOURCE_EXHAUSTED" in s.lines[0]
    finally:
        stop(s)


def test_a_token_is_required_when_given_but_not_for_health(dyn_path):
    s = serve([DIGITS], Settings(max_batch=1, queue=4), token=b"s3cret-token")
    try:
        c = s.client()
        x = [infer_input("input", rng_x(1, 8, 8, 1))]
        assert c.is_server_live() and c.is_server_ready()
        no = "StatusCode.UNAUTHENTICATED"
        for headers in (None, {"authorization": "Bearer wrong"}, {"authorization": "s3cret-token"}):
            assert refused(lambda h=headers: c.infer(FIX, x, headers=h)).status() == no
            assert refused(lambda h=headers: c.get_model_config(FIX, headers=h)).status() == no
        good = {"authorization": "Bearer s3cret-token"}
        assert c.infer(FIX, x, headers=good).as_numpy("logits").shape == (1, 10)
        assert c.get_model_config(FIX, headers=good).config.name == FIX
        assert len(s.lines) == 6 and all("UNAUTHENTICATED" in line for line in s.lines)
        assert not any("s3cret" in line for line in s.lines)
    finally:
        stop(s)


def test_deadlines_expire_requests_and_are_counted(served):
    c = served.client()
    x = [infer_input("input", rng_x(1, 32, 32, 3))]
    before = stats_of(served, DYN)
    # the request's own timeout parameter, 1 microsecond: it has passed before any batch is taken
    err = refused(lambda: c.infer(DYN, x, timeout=1, client_timeout=60))
    assert err.status() == "StatusCode.DEADLINE_EXCEEDED" and "deadline" in err.message().lower()
    mid = stats_of(served, DYN)
    assert mid["expired"] == before["expired"] + 1
    assert mid["inference_stats"]["fail"]["count"] == before["inference_stats"]["fail"]["count"] + 1
    # the call's deadline, already tiny: the client gives up; the server expired it or answered it, nothing else
    err = refused(lambda: c.infer(DYN, x, client_timeout=0.0002))
    assert err.status() == "StatusCode.DEADLINE_EXCEEDED"
    assert c.infer(DYN, x).as_numpy("probabilities").shape == (1, 10)
    after = stats_of(served, DYN)
    expired = after["expired"] - mid["expired"]
    assert expired in (0, 1)
    assert after["inference_stats"]["fail"]["count"] - mid["inference_stats"]["fail"]["count"] == expired
    assert after["cancelled"] - mid["cancelled"] + expired <= 1


def test_close_lets_the_calls_in_flight_finish(dyn_path):
    s = serve([dyn_path], Settings(max_batch=4, max_delay_us=WINDOW_US / 3, queue=4))
    closed = threading.Event()
    try:
        x = rng_x(2, 32, 32, 3)
        with ThreadPoolExecutor(3) as pool:
            flying = [pool.submit(s.client().infer, DYN, [infer_input("input", x[i : i + 1])]) for i in range(2)]
            until = time.monotonic() + 30
            while s.core.models[DYN].batcher.queued() < 2 and time.monotonic() < until:
                time.sleep(0.01)
            closing = pool.submit(lambda: (s.server.close(grace_s=30), closed.set()))
            time.sleep(0.2)
            late, err = stub_call(s.server.address, raw_request(DYN, [1, 32, 32, 3], "FP32", x[:1].tobytes()))
            assert late is None and err.code() == grpc.StatusCode.UNAVAILABLE
            got = [f.result(timeout=60).as_numpy("probabilities") for f in flying]
            closing.result(timeout=60)
        want = local(dyn_path, x)["probabilities"]
        np.testing.assert_allclose(np.concatenate(got), want, rtol=1e-5, atol=1e-6)
        assert closed.is_set()
    finally:
        s.core.close(timeout_s=10)
