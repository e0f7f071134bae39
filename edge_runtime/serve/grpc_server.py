"""The KServe v2 gRPC face of `edge-runtime serve` (issue 26): the service Triton speaks, from the definitions
tritonclient ships (`tritonclient.grpc.service_pb2_grpc`, not a copy of the proto), answered from the `Core`.

Served: ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelConfig, ModelInfer and ModelStatistics;
every other method answers UNIMPLEMENTED (the generated base class's default). A refused request is one log line and
the ServeError's gRPC code with its one-line message (RESOURCE_EXHAUSTED with trailing metadata `retry-after` for a
full queue); the server keeps serving.

Threads: the server is gRPC's synchronous one. A ModelInfer waits for its batch in a worker thread (Core.infer), so
`workers` requests can wait at once while the batcher forms batches; a call beyond that is refused at once by gRPC
itself (RESOURCE_EXHAUSTED, `maximum_concurrent_rpcs`), never queued unbounded. `edge-runtime serve` gives it
enough workers for the batcher's queue and batches in flight, so the batcher's own bound (with `retry-after`) is the
one a client meets first.

Measured (digits_cnn_int8.onnx, fixed batch, ONNX Runtime, one instance; 127.0.0.1 on a 2-vCPU x86 VM shared with
other work, load average 4-5; client in its own process, 4 s after 1 s of warm-up, 3 alternating rounds):
  tritonclient.grpc (threads, one client each)   concurrency 1: 730-910 requests/s   concurrency 8: 990-1310 requests/s
  the same rounds, a grpc.aio prototype           concurrency 1: 270-680 requests/s   concurrency 8: 860-1340 requests/s
  perf_analyzer 2.41.0 -i grpc, this server       concurrency 1: 903 requests/s       concurrency 8: 1522 requests/s
grpc.aio was not clearly better (the batcher answers through concurrent futures on its own threads either way), so the
synchronous server stays: simpler, and a thread per waiting request costs little next to an inference on a board.

Never trusted: a declared size. Raw contents must be exactly prod(shape) x itemsize bytes, typed contents exactly
prod(shape) values, and both arrive inside the message size limit (`max_message_bytes`, receive and send).
"""

from __future__ import annotations

import hmac
import math
import sys
from collections.abc import Callable
from concurrent import futures

import grpc
import numpy as np
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

from edge_runtime.errors import UserError
from edge_runtime.serve.kserve import VERSION, BadRequest, Core, ServeError, datatype_of, dtype_of

# KServe v2 typed contents: the field each datatype travels in (FP16 has none: raw contents only)
CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
}
MAX_DIMS = 32  # more dimensions than any served model has; a longer shape is refused before any arithmetic


def _stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _peer(context) -> str:
    """The client's address without gRPC's scheme: 'ipv4:127.0.0.1:5000' -> '127.0.0.1'."""
    peer = context.peer() or "unknown"
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]")
    return peer


def _timeout_s(request, context) -> float | None:
    """The smaller of the call's own deadline and the request's `timeout` parameter (microseconds, as tritonclient's
    infer(timeout=...) sends it); None when neither is set. 0 means no timeout (Triton's reading)."""
    found = []
    remaining = context.time_remaining()
    if remaining is not None:
        found.append(remaining)
    if "timeout" in request.parameters:
        p = request.parameters["timeout"]
        which = p.WhichOneof("parameter_choice")
        if which not in ("int64_param", "uint64_param", "double_param"):
            raise BadRequest(f"parameter 'timeout': a {which or 'empty value'}, expected microseconds as a number")
        value = getattr(p, which)
        if not math.isfinite(value) or value < 0:
            raise BadRequest(f"parameter 'timeout' {value!r}: expected microseconds >= 0")
        if value > 0:
            found.append(value / 1e6)
    # A deadline already past still goes to the core (a timeout <= 0): the batcher drops it as expired and counts it,
    # so every DEADLINE_EXCEEDED this face answers is in the statistics' `expired`
    return min(found) if found else None


MAX_INPUTS = 64  # a request naming more inputs than any model here has is refused before any is read


def _shape(t, what: str) -> tuple[int, ...]:
    if len(t.shape) > MAX_DIMS or any(d < 0 for d in t.shape):
        raise BadRequest(f"{what}: shape {list(t.shape)[:MAX_DIMS]} is not a shape (at most {MAX_DIMS} sizes >= 0)")
    return tuple(int(d) for d in t.shape)


def _array(t, raw: bytes | None, what: str) -> np.ndarray:
    """One input tensor as an array: from its raw bytes when the request carries raw contents, else its typed ones."""
    dtype = dtype_of(t.datatype, what)
    shape = _shape(t, what)
    count = math.prod(shape)
    if raw is not None:
        need = count * dtype.itemsize
        if len(raw) != need:
            raise BadRequest(f"{what}: {len(raw)} bytes of raw contents; shape {list(shape)} of {t.datatype} is {need}")
        return np.frombuffer(raw, dtype).reshape(shape)
    field = CONTENTS.get(t.datatype)
    if field is None:
        raise BadRequest(f"{what}: {t.datatype} travels only in raw_input_contents")
    values = getattr(t.contents, field)
    if len(values) != count:
        raise BadRequest(f"{what}: {len(values)} values in {field}; shape {list(shape)} holds {count}")
    try:
        return np.array(values, dtype=dtype).reshape(shape)
    except (OverflowError, ValueError) as err:
        raise BadRequest(f"{what}: {field} do not fit {t.datatype}: {str(err)[:100]}") from None


def feeds_of(request) -> dict[str, np.ndarray]:
    """The request's inputs by name, checked against what the request itself declares (the core checks them
    against the model)."""
    raw = request.raw_input_contents
    if len(request.inputs) > MAX_INPUTS:
        raise BadRequest(f"request: {len(request.inputs):,} inputs (at most {MAX_INPUTS} taken)")
    if raw and len(raw) != len(request.inputs):
        n = len(request.inputs)
        raise BadRequest(f"request: {len(raw)} raw_input_contents for {n} inputs (one each, in input order)")
    feeds: dict[str, np.ndarray] = {}
    for i, t in enumerate(request.inputs):
        what = f"input {t.name[:80]!r}"
        if t.name in feeds:
            raise BadRequest(f"{what}: given twice")
        feeds[t.name] = _array(t, raw[i] if raw else None, what)
    return feeds


def wanted_outputs(model, request) -> list[str]:
    """The outputs asked for (all, in the model's order, when none is named), checked before anything runs: an
    unknown name or an extension this server does not do (classification) is refused, not computed for nothing."""
    names = [t.name for t in model.tensors("outputs")]
    wanted = [o.name for o in request.outputs] or names
    for o in request.outputs:
        if o.name not in names:
            raise BadRequest(f"requested output {o.name[:80]!r}: the model gives {names!r}")
        if "classification" in o.parameters:
            raise BadRequest(f"requested output {o.name[:80]!r}: the classification extension is not served")
    if len(set(wanted)) != len(wanted):
        raise BadRequest("requested outputs: a name given twice")
    return wanted


def response_of(model, request, outputs: dict[str, np.ndarray]) -> service_pb2.ModelInferResponse:
    """The outputs asked for (wanted_outputs) as raw_output_contents."""
    wanted = wanted_outputs(model, request)
    reply = service_pb2.ModelInferResponse(model_name=model.name, model_version=VERSION, id=request.id)
    for name in wanted:
        arr = np.asarray(outputs[name])
        reply.outputs.add(name=name, datatype=datatype_of(arr.dtype), shape=list(arr.shape))
        reply.raw_output_contents.append(arr.tobytes())
    return reply


class Servicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """The KServe v2 methods, each a call on the core; see the module doc."""

    def __init__(self, core: Core, token: bytes | None, log: Callable[[str], None]):
        self.core = core
        self._expected = None if token is None else b"Bearer " + token
        self.log = log

    # -- the one place a request is answered or refused -----------------------------------------------------------
    def _answer(self, method: str, context, fn, *, about: str = "", auth: bool = True):
        try:
            if auth:
                self._authorize(context)
            return fn()
        except ServeError as err:
            self._refuse(context, method, about, err.grpc_code, str(err), err.retry_after_s)
        except Exception as err:  # noqa: BLE001 - one line for the client and the log, never a traceback; keep serving
            self._refuse(context, method, about, "INTERNAL", f"internal error: {type(err).__name__}: {str(err)[:300]}")

    def _authorize(self, context) -> None:
        if self._expected is None:
            return
        got = ""
        for key, value in context.invocation_metadata():
            if key == "authorization":
                got = value
        given = got.encode() if isinstance(got, str) else bytes(got)
        if not hmac.compare_digest(given, self._expected):
            raise _Unauthenticated("missing or wrong token (metadata authorization: Bearer <token>)")

    def _refuse(self, context, method, about, code: str, message: str, retry_after_s=None):
        self.log(f"edge-runtime serve: {code} grpc {method}{about} from {_peer(context)}: {message}")
        if retry_after_s is not None:
            context.set_trailing_metadata((("retry-after", str(int(retry_after_s))),))
        context.abort(grpc.StatusCode[code], message)

    # -- health and metadata ---------------------------------------------------------------------------------------
    def ServerLive(self, request, context):
        return self._answer(
            "ServerLive", context, lambda: service_pb2.ServerLiveResponse(live=self.core.live()), auth=False
        )

    def ServerReady(self, request, context):
        return self._answer(
            "ServerReady", context, lambda: service_pb2.ServerReadyResponse(ready=self.core.ready()), auth=False
        )

    def ModelReady(self, request, context):
        def ready():
            return service_pb2.ModelReadyResponse(ready=self.core.model_ready(request.name, request.version))

        return self._answer("ModelReady", context, ready, about=_about(request.name))

    def ServerMetadata(self, request, context):
        def metadata():
            return json_format.ParseDict(self.core.metadata(), service_pb2.ServerMetadataResponse())

        return self._answer("ServerMetadata", context, metadata)

    def ModelMetadata(self, request, context):
        def metadata():
            doc = self.core.model(request.name, request.version).metadata()
            return json_format.ParseDict(doc, service_pb2.ModelMetadataResponse(), ignore_unknown_fields=True)

        return self._answer("ModelMetadata", context, metadata, about=_about(request.name))

    def ModelConfig(self, request, context):
        def config():
            doc = self.core.model(request.name, request.version).config()
            cfg = json_format.ParseDict(doc, model_config_pb2.ModelConfig(), ignore_unknown_fields=True)
            return service_pb2.ModelConfigResponse(config=cfg)

        return self._answer("ModelConfig", context, config, about=_about(request.name))

    def ModelStatistics(self, request, context):
        def statistics():
            doc = self.core.statistics(request.name or None, request.version or None)
            return json_format.ParseDict(doc, service_pb2.ModelStatisticsResponse(), ignore_unknown_fields=True)

        return self._answer("ModelStatistics", context, statistics, about=_about(request.name))

    # -- inference ---------------------------------------------------------------------------------------------------
    def ModelInfer(self, request, context):
        def infer():
            model = self.core.model(request.model_name, request.model_version)
            wanted_outputs(model, request)
            feeds, timeout_s = feeds_of(request), _timeout_s(request, context)
            future = self.core.submit(model.name, request.model_version, feeds, timeout_s, inline=True)
            context.add_callback(future.cancel)  # a client gone before its batch ran frees its place in the queue
            return response_of(model, request, self.core.outcome(future))

        return self._answer("ModelInfer", context, infer, about=_about(request.model_name))


class _Unauthenticated(ServeError):
    status = 401
    grpc_code = "UNAUTHENTICATED"


def _about(name: str) -> str:
    return f" {name[:80]!r}" if name else ""


class GrpcServer:
    """A running gRPC face: `port` is the bound port, `address` host:port; `close()` stops it."""

    def __init__(self, server: grpc.Server, executor: futures.ThreadPoolExecutor, host: str, port: int):
        self._server = server
        self._executor = executor
        self.host = host
        self.port = port
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def close(self, grace_s: float = 10.0) -> None:
        """Take no new call; let the calls in flight finish for up to `grace_s` seconds, then cancel the rest. The
        core is not closed here (the CLI owns it: both faces answer from it)."""
        self._server.stop(grace_s).wait()
        self._executor.shutdown(wait=False)

    def __enter__(self) -> GrpcServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _whole(name: str, value, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise UserError(f"{name} {value!r}: expected a whole number of at least {low}")


def start_grpc(
    core: Core,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    token: bytes | None = None,
    log: Callable[[str], None] | None = None,
    max_message_bytes: int = 64 << 20,
    workers: int = 32,
) -> GrpcServer:
    """Serve `core` over KServe v2 gRPC on host:port (port 0 picks a free one) with `workers` threads; when `token` is
    given every call but ServerLive/ServerReady must carry metadata `authorization: Bearer <token>`. `log(line)`
    takes one line per refused request (default: standard error)."""
    _whole("port", port, 0)
    _whole("max_message_bytes", max_message_bytes, 1024)
    _whole("workers", workers, 1)
    if token is not None and (not isinstance(token, bytes) or not token):
        raise UserError("token: expected non-empty bytes")
    size = min(max_message_bytes, 2**31 - 1)  # gRPC's limits are C ints
    options = [("grpc.max_receive_message_length", size), ("grpc.max_send_message_length", size)]
    executor = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="serve-grpc")
    # No more calls than threads: beyond, gRPC answers RESOURCE_EXHAUSTED at once instead of holding whole messages in
    # a queue of its own that nothing bounds (the CLI sizes `workers` so the batcher's --queue fills first)
    server = grpc.server(executor, options=options, maximum_concurrent_rpcs=workers)
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Servicer(core, token, log or _stderr), server)
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(where)
    except RuntimeError:
        bound = 0
    if not bound:
        server.stop(None)
        executor.shutdown(wait=False)
        raise UserError(f"grpc {where}: cannot listen there (port in use, or not an address of this machine)")
    server.start()
    return GrpcServer(server, executor, host, bound)
