"""A KServe v2 HTTP server that lies, for the tests of issue 24: every answer the harness gets must be checked, and
every failure must keep its cause. One process serves every way of lying at once, each as a model of its own name
(`kserve+http://127.0.0.1:PORT/wrong-shape`), all with the inputs and outputs of
models/digits_cnn/digits_cnn_int8.onnx (input 'input' FP32 [1,8,8,1], output 'logits' FP32 [1,10]):

    honest          right answers, binary or JSON as asked
    wrong-shape     'logits' [1,11] (its data consistent with that shape)
    wrong-dtype     'logits' FP64
    renamed         the output is called 'scores'
    short           binary: 20 bytes where 40 are declared; JSON: 5 values for [1,10]
    huge            binary: binary_data_size 2**62 (40 bytes sent); JSON: shape [1, 2**62]
    not-object      a JSON array for a body
    refuses-binary  400 to a request with binary inputs, but honours Inference-Header-Content-Length as Triton does
                    (so a JSON request that carries a stale one is cut short and refused: "JSON parse error")
    busy            503 with Retry-After: 7
    no-batch-1      400 "batch size 1 is not supported"
    closes          declares a 1000-byte body, sends 10 bytes and closes the connection
    slow            answers honestly after SLOW_S seconds (longer than a test's ?timeout=1)
    wrong-input     its metadata says the input is INT8 (the file says FP32): a --model run must be refused
    sometimes       every other answer on a connection is wrong-shape's, the others honest

    python tests/servers/liar_server.py [--port 0] [--grpc-port 0]   # prints `ready http=H:P [grpc=H:P]`

With --grpc-port, the same models over gRPC too (tritonclient's own service stubs, grpcio's server in threads),
lying the same ways where the gRPC protocol can: wrong shape, dtype and name, a raw content shorter than the shape
(`short`), a shape of 2**62 (`huge`), and the honest and wrong-input models; the others answer honestly there.

asyncio streams, one task per connection, keep-alive; TCP_NODELAY on every connection (an answer in two writes
must not wait for the client's delayed ACK). Listens on 127.0.0.1 only; no statistics or config endpoint (404, as
MLServer). Test scaffolding: it never binds another address."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import struct

MODES = ("honest", "wrong-shape", "wrong-dtype", "renamed", "short", "huge", "not-object", "refuses-binary", "busy",
         "no-batch-1", "closes", "slow", "wrong-input", "sometimes")  # fmt: skip
SLOW_S = 3.0
INPUT = {"name": "input", "datatype": "FP32", "shape": [1, 8, 8, 1]}
OUTPUT = {"name": "logits", "datatype": "FP32", "shape": [1, 10]}
MAX_REQUEST = 1 << 20


def metadata(model: str) -> dict:
    inp = {**INPUT, "datatype": "INT8"} if model == "wrong-input" else INPUT
    return {"name": model, "versions": ["1"], "platform": "liar", "inputs": [inp], "outputs": [OUTPUT]}


def reply(status: int, body: bytes, headers: dict | None = None, reason: str = "") -> bytes:
    reason = reason or {200: "OK", 400: "Bad Request", 404: "Not Found", 503: "Service Unavailable"}.get(status, "")
    head = {"Content-Length": str(len(body)), "Content-Type": "application/json", **(headers or {})}
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in head.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def error(status: int, words: str, headers: dict | None = None) -> bytes:
    return reply(status, json.dumps({"error": words}).encode(), headers)


def lie(model: str, huge_shape: bool) -> tuple[str, str, list[int], int]:
    """The output `model` answers with, over HTTP and gRPC alike: (name, datatype, shape, values sent)."""
    name, dtype, shape, n = "logits", "FP32", [1, 10], 10
    if model == "wrong-shape":
        shape, n = [1, 11], 11
    elif model == "wrong-dtype":
        dtype = "FP64"
    elif model == "renamed":
        name = "scores"
    elif model == "huge" and huge_shape:
        shape = [1, 2**62]
    return name, dtype, shape, n


def answer(model: str, binary: bool) -> bytes:
    """A 200 answer as `model` lies (or not), binary or JSON."""
    name, dtype, shape, n = lie(model, huge_shape=not binary)
    values = [float(i) for i in range(n)]
    raw = struct.pack(f"<{n}{'d' if dtype == 'FP64' else 'f'}", *values)
    out = {"name": name, "datatype": dtype, "shape": shape}
    if binary:
        out["parameters"] = {"binary_data_size": 2**62 if model == "huge" else len(raw)}
        if model == "short":
            raw = raw[:20]
        head = json.dumps({"model_name": model, "model_version": "1", "outputs": [out]}).encode()
        return reply(200, head + raw, {"Content-Type": "application/octet-stream",
                                       "Inference-Header-Content-Length": str(len(head))})  # fmt: skip
    out["data"] = values[:5] if model == "short" else values
    return reply(200, json.dumps({"model_name": model, "model_version": "1", "outputs": [out]}).encode())


async def infer(model: str, headers: dict, body: bytes, writer, answered: list[int]) -> bytes | None:
    """The answer to POST /v2/models/MODEL/infer (None: the connection was closed mid-body here); `answered` counts
    the connection's answers (for `sometimes`)."""
    length = headers.get("inference-header-content-length")
    try:  # as Triton: the JSON part is the first Inference-Header-Content-Length bytes when that header is given
        request = json.loads(body[: int(length)] if length is not None else body)
    except ValueError as err:
        return error(400, f"failed to parse the request JSON buffer: JSON parse error: {err}")
    if not isinstance(request, dict):
        return error(400, "the request is not a JSON object")
    binary_in = any("binary_data_size" in (i.get("parameters") or {}) for i in request.get("inputs") or [])
    binary_out = any((o.get("parameters") or {}).get("binary_data") for o in request.get("outputs") or [])
    if model == "refuses-binary" and binary_in:
        return error(400, "binary tensor data is not supported by this server")
    if model == "busy":
        return error(503, "the server is busy", {"Retry-After": "7"})
    if model == "no-batch-1":
        return error(400, "batch size 1 is not supported")
    if model == "not-object":
        return reply(200, b"[1, 2, 3]")
    if model == "closes":
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"outputs":')
        await writer.drain()
        return None
    if model == "slow":
        await asyncio.sleep(SLOW_S)
    if model == "sometimes":
        answered[0] += 1
        return answer("wrong-shape" if answered[0] % 2 else "honest", binary_out)
    return answer(model, binary_out)


def get(path: str) -> bytes:
    parts = path.strip("/").split("/")
    if parts in (["v2", "health", "live"], ["v2", "health", "ready"]):
        return reply(200, b"")
    if parts == ["v2"]:
        return reply(200, json.dumps({"name": "liar", "version": "0.1", "extensions": ["binary_tensor_data"]}).encode())
    if len(parts) >= 3 and parts[:2] == ["v2", "models"] and parts[2] in MODES:
        rest = [p for p in parts[3:] if p]
        if rest[:1] == ["versions"]:
            rest = rest[2:]
        if not rest:
            return reply(200, json.dumps(metadata(parts[2])).encode())
        if rest == ["ready"]:
            return reply(200, b"")
    return error(404, f"no such endpoint: {path}")


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    answered = [0]
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            method, path, _ = line.decode("latin-1").split(" ", 2)
            headers = {}
            while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
                k, _, v = h.decode("latin-1").partition(":")
                headers[k.strip().lower()] = v.strip()
            size = int(headers.get("content-length") or 0)
            if size > MAX_REQUEST:
                writer.write(error(400, "request too large"))
                return
            body = await reader.readexactly(size) if size else b""
            parts = path.split("?")[0].strip("/").split("/")
            if method == "POST" and len(parts) >= 4 and parts[:2] == ["v2", "models"] and parts[-1] == "infer":
                known = parts[2] in MODES
                out = await infer(parts[2], headers, body, writer, answered) if known else error(404, "no model")
            else:
                out = get(path.split("?")[0])
            if out is None:
                return  # closed mid-body
            writer.write(out)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        return
    finally:
        writer.close()


def grpc_server(port: int):
    """The gRPC liar (started, with its port), built on tritonclient's service stubs."""
    from concurrent import futures

    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc as stubs

    class Liar(stubs.GRPCInferenceServiceServicer):
        def ServerLive(self, request, context):
            return pb.ServerLiveResponse(live=True)

        def ServerReady(self, request, context):
            return pb.ServerReadyResponse(ready=True)

        def ModelReady(self, request, context):
            return pb.ModelReadyResponse(ready=request.name in MODES)

        def ServerMetadata(self, request, context):
            return pb.ServerMetadataResponse(name="liar", version="0.1", extensions=["binary_tensor_data"])

        def ModelMetadata(self, request, context):
            if request.name not in MODES:
                context.abort(grpc.StatusCode.NOT_FOUND, f"no model {request.name!r}")
            m = metadata(request.name)
            tensor = pb.ModelMetadataResponse.TensorMetadata
            return pb.ModelMetadataResponse(name=m["name"], versions=m["versions"], platform=m["platform"],
                                            inputs=[tensor(**t) for t in m["inputs"]],
                                            outputs=[tensor(**t) for t in m["outputs"]])  # fmt: skip

        def ModelInfer(self, request, context):
            model = request.model_name
            name, dtype, shape, n = lie(model, huge_shape=True)
            raw = struct.pack(f"<{n}{'d' if dtype == 'FP64' else 'f'}", *[float(i) for i in range(n)])
            out = pb.ModelInferResponse.InferOutputTensor(name=name, datatype=dtype, shape=shape)
            return pb.ModelInferResponse(model_name=model, outputs=[out],
                                         raw_output_contents=[raw[:20] if model == "short" else raw])  # fmt: skip

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    stubs.add_GRPCInferenceServiceServicer_to_server(Liar(), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server, bound


async def serve(port: int, grpc_port: int | None) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    said = f"ready http=127.0.0.1:{server.sockets[0].getsockname()[1]}"
    rpc = None
    if grpc_port is not None:
        rpc, bound = grpc_server(grpc_port)
        said += f" grpc=127.0.0.1:{bound}"
    print(said, flush=True)
    async with server:
        await stop.wait()
    if rpc is not None:
        rpc.stop(grace=1.0).wait(5.0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0, help="the HTTP port on 127.0.0.1 (0: any free one, said on stdout)")
    p.add_argument("--grpc-port", type=int, default=None, help="serve gRPC too, on this port (0: any free one)")
    args = p.parse_args()
    asyncio.run(serve(args.port, args.grpc_port))


if __name__ == "__main__":
    main()
