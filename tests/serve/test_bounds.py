"""Issue 26, what a hostile review of `edge-runtime serve` found, each now a test: gRPC calls beyond the queue refused
instead of waiting in gRPC's own unbounded queue; a JSON part bounded apart from the body; names a client sends
bounded in the error and the log; a deadline honoured inside a batching window; a call gRPC cancels counted as
cancelled, not failed; outputs checked before anything runs; odd header values and parameters refused in one line;
the Bearer scheme in any case. Real servers on 127.0.0.1, real clients."""

from __future__ import annotations

import http.client
import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from conftest import MODELS, need
from helpers import end

from edge_runtime.serve import Batcher, DeadlineExpired, session_loader
from edge_runtime.serve.app import Settings, build_core
from edge_runtime.serve.kserve import Cancelled, Core

grpc = pytest.importorskip("grpc", reason="grpcio not installed: pip install 'edge-runtime[serve]'")
from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: E402

from edge_runtime.serve.grpc_server import start_grpc  # noqa: E402
from edge_runtime.serve.http_server import start_http  # noqa: E402

RESNET_DYN = MODELS / "resnet8" / "resnet8_int8_dynamic.onnx"
DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"


def request(n_rows: int = 1, model: str = "resnet8_int8_dynamic") -> service_pb2.ModelInferRequest:
    r = service_pb2.ModelInferRequest(model_name=model)
    r.inputs.add(name="input", datatype="FP32", shape=[n_rows, 32, 32, 3])
    r.raw_input_contents.append(np.zeros((n_rows, 32, 32, 3), np.float32).tobytes())
    return r


def test_grpc_calls_beyond_the_queue_are_refused_not_held():
    """40 calls at once at a server whose queue takes 4, held there by a 2 s window: the 4 are answered when it ends,
    every other call is refused at once (the batcher's refusal, with retry-after, or gRPC's own call limit), none is
    held in a queue nothing bounds."""
    from test_serve_cli import started

    need("onnxruntime")
    proc, where, _log = started(str(RESNET_DYN), "--queue", "4", "--max-batch", "8", "--max-delay-us", "2000000")
    try:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(where["grpc"]))

        def one(_):
            t = time.monotonic()
            try:
                stub.ModelInfer(request(), timeout=60)
                return "ok", None, time.monotonic() - t
            except grpc.RpcError as err:
                return err.code().name, dict(err.trailing_metadata() or ()).get("retry-after"), time.monotonic() - t

        with ThreadPoolExecutor(40) as pool:
            got = list(pool.map(one, range(40)))
    finally:
        end(proc)
    codes = [c for c, _, _ in got]
    assert codes.count("ok") == 4 and codes.count("RESOURCE_EXHAUSTED") == 36, codes
    assert any(retry == "1" for c, retry, _ in got if c == "RESOURCE_EXHAUSTED"), got
    refused = [took for c, _, took in got if c != "ok"]
    answered = [took for c, _, took in got if c == "ok"]
    assert max(refused) < min(answered), (refused, answered)  # refused at once, not after the window


def test_log_lines_stay_whole_under_a_flood_of_refusals():
    from test_serve_cli import started

    need("onnxruntime")
    proc, where, log = started(str(RESNET_DYN))
    try:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(where["grpc"]))
        bad = request()
        bad.inputs[0].shape[1] = 31  # wrong shape: refused, one line each

        def one(_):
            try:
                stub.ModelInfer(bad, timeout=60)
            except grpc.RpcError as err:
                return err.code().name
            return "ok"

        with ThreadPoolExecutor(16) as pool:
            codes = list(pool.map(one, range(200)))
        time.sleep(0.5)
    finally:
        end(proc)
    assert set(codes) == {"INVALID_ARGUMENT"}
    lines = [ln for ln in "".join(log).splitlines() if "INVALID_ARGUMENT" in ln]
    assert len(lines) == 200, len(lines)
    assert all(ln.startswith("edge-runtime serve: INVALID_ARGUMENT") and ln.count("edge-runtime serve:") == 1
               for ln in lines)  # fmt: skip


@pytest.fixture(scope="module")
def faces():
    need("onnxruntime")
    lines: list[str] = []
    core = build_core([str(RESNET_DYN)], Settings(max_batch=4, max_delay_us=0, queue=8), {"threads": 1})
    h = start_http(core, "127.0.0.1", 0, token=b"s3cret-s3cret-s3cret", log=lines.append)
    g = start_grpc(core, "127.0.0.1", 0, log=lines.append)
    yield core, h, g, lines
    h.close()
    g.close()
    core.close()


def post(port: int, body: bytes, headers: dict) -> tuple[int, dict]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", "/v2/models/resnet8_int8_dynamic/infer", body,
              {"Authorization": "Bearer s3cret-s3cret-s3cret", **headers})  # fmt: skip
    r = c.getresponse()
    out = r.status, json.loads(r.read() or b"{}")
    c.close()
    return out


def test_a_json_part_above_its_bound_is_refused_before_it_is_parsed(faces):
    _, h, _, _lines = faces
    data = [0.5] * (1_100_000)  # ~5.5 MB of JSON
    body = json.dumps({"inputs": [{"name": "input", "shape": [1, 32, 32, 3], "datatype": "FP32", "data": data}]})
    status, answer = post(h.port, body.encode(), {})
    assert status == 413 and "JSON part of" in answer["error"] and "binary" in answer["error"]
    flat = json.dumps({"inputs": [{"name": "input", "shape": [1, 32, 32, 3], "datatype": "FP32", "data": [1] * 5}]})
    status, answer = post(h.port, flat.encode(), {})
    assert status == 400 and "5 values for shape [1, 32, 32, 3]" in answer["error"]


@pytest.mark.parametrize(
    "headers, binary_param, words",
    [
        ({"Inference-Header-Content-Length": "\u00b2"}, True, "Inference-Header-Content-Length"),
        ({}, "false", "binary_data 'false': expected true or false"),
    ],
)
def test_odd_header_values_and_parameters_are_400(faces, headers, binary_param, words):
    _, h, _, _ = faces
    req = {"inputs": [{"name": "input", "shape": [1, 32, 32, 3], "datatype": "FP32", "data": [0.0] * 3072}],
           "outputs": [{"name": "probabilities", "parameters": {"binary_data": binary_param}}]}  # fmt: skip
    status, answer = post(h.port, json.dumps(req).encode(), headers)
    assert status == 400 and words in answer["error"], answer


def test_the_bearer_scheme_is_taken_in_any_case(faces):
    _, h, _, _ = faces
    c = http.client.HTTPConnection("127.0.0.1", h.port, timeout=30)
    c.request("GET", "/v2/models/resnet8_int8_dynamic", headers={"Authorization": "bearer s3cret-s3cret-s3cret"})
    assert c.getresponse().status == 200


def test_names_a_grpc_client_sends_are_bounded_in_the_answer_and_the_log(faces):
    _, _, g, lines = faces
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(f"127.0.0.1:{g.port}"))
    r = service_pb2.ModelInferRequest(model_name="resnet8_int8_dynamic")
    for i in range(50):
        r.inputs.add(name=f"n{i:05d}" + "A" * 5000, datatype="FP32", shape=[0])
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(r, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and len(err.value.details()) < 1000
    assert len(lines[-1]) < 1200, len(lines[-1])


def test_an_unknown_grpc_output_is_refused_before_anything_runs(faces):
    core, _, g, _ = faces
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(f"127.0.0.1:{g.port}"))
    before = core.statistics("resnet8_int8_dynamic")["model_stats"][0]["execution_count"]
    for name, params in (("nope", {}), ("probabilities", {"classification": 3})):
        r = request()
        o = r.outputs.add(name=name)
        for k, v in params.items():
            o.parameters[k].int64_param = v
        with pytest.raises(grpc.RpcError) as err:
            stub.ModelInfer(r, timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert core.statistics("resnet8_int8_dynamic")["model_stats"][0]["execution_count"] == before


def test_a_deadline_inside_the_window_is_kept():
    """A 2 s window, a 0.1 s deadline: the request is dropped when its deadline passes, not when the window ends."""
    need("onnxruntime")
    with Batcher(session_loader(RESNET_DYN, threads=1), max_batch=8, max_delay_us=2_000_000, queue=8) as b:
        t = time.monotonic()
        f = b.submit({"input": np.zeros((1, 32, 32, 3), np.float32)}, deadline=t + 0.1)
        with pytest.raises(DeadlineExpired):
            f.result(timeout=10)
        assert time.monotonic() - t < 1.0  # half the window: the window did not hold it
        assert b.stats()["expired"] == 1


def test_a_request_its_client_cancelled_ends_as_cancelled():
    need("onnxruntime")
    core = build_core([str(DIGITS)], Settings(max_batch=1, queue=8), {"threads": 1})
    try:
        b = core.models["digits_cnn_int8"].batcher
        with b._cond:  # hold the worker away from the queue while the client gives up
            f = core.submit("digits_cnn_int8", None, {"input": np.zeros((1, 8, 8, 1), np.float32)})
            assert f.cancel()
        with pytest.raises(Cancelled) as err:
            Core.outcome(f)
        assert err.value.grpc_code == "CANCELLED"
        time.sleep(0.2)
        assert core.statistics()["model_stats"][0]["cancelled"] == 1
    finally:
        core.close()
