"""The KServe v2 REST protocol of `edge-runtime serve` (issue 26), without a transport: a request's method, target,
headers and body in; a status, headers and body out. http_server.py owns the sockets; this module never touches one,
so every route, check and refusal is testable with bytes alone.

Routes (Triton's): GET /v2/health/live, /v2/health/ready, /v2, /v2/models/stats, /metrics, and under
/v2/models/{m}[/versions/{v}]: GET (metadata), /ready, /config, /stats; POST /infer with JSON tensors or the binary
tensor extension (Inference-Header-Content-Length). Every refusal is a JSON {"error": ...} with the ServeError's status
(Retry-After when it says when to retry) and one line through `log`.
"""

from __future__ import annotations

import hmac
import json
import math
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

import numpy as np

from edge_runtime.serve.kserve import BadRequest, Core, NotFound, ServeError, datatype_of, dtype_of

PREFIX = "edge-runtime serve"
HEADER_LENGTH = "inference-header-content-length"
_JSON = {"Content-Type": "application/json"}
_MAX_DIMS = 16
MAX_JSON_BYTES = 4 << 20  # the JSON part of a request at most (its tensors parsed take ~10x that)


class Unauthorized(ServeError):
    status = 401
    grpc_code = "UNAUTHENTICATED"


class _Refused(ServeError):
    """A refusal with a status of its own (405, 411, 413, 415, 501)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Response:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass
class Pending:
    """An inference under way: wait for `future` (a thread blocks, a loop awaits it), then `respond()`."""

    future: Future
    respond: Callable[[], Response]


def stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def printable(text: str, limit: int = 160) -> str:
    """A client's text made safe for one log line: no control characters, bounded."""
    out = "".join(c if c.isprintable() else f"\\x{ord(c) & 0xFF:02x}" for c in text[:limit])
    return out + ("..." if len(text) > limit else "")


def json_response(status: int, obj: object, headers: Mapping[str, str] | None = None) -> Response:
    return Response(status, {**_JSON, **(headers or {})}, json.dumps(obj, separators=(",", ":")).encode())


class Rest:
    """The REST face of a `Core`. `token` (bytes) guards every route but health; `log` gets one line per refusal."""

    def __init__(self, core: Core, *, token: bytes | None = None, log=None, max_body_bytes: int = 64 << 20):
        self.core = core
        self.token = token
        self.log = log if log is not None else stderr_log
        self.max_body_bytes = max_body_bytes
        self.max_json_bytes = min(max_body_bytes, MAX_JSON_BYTES)

    # -- the transport's two calls ------------------------------------------------------------------------------------
    def check_head(self, method: str, target: str, headers: Mapping[str, str], peer: str) -> Response | None:
        """Before the body is read: a refusal (auth, length, encoding), or None to read `body_length()` bytes."""
        try:
            self._authorize(target, headers)
            if "transfer-encoding" in headers and headers["transfer-encoding"].strip().lower() != "identity":
                raise _Refused(411, "chunked bodies are not taken: send Content-Length")
            encoding = headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise _Refused(415, f"Content-Encoding {printable(encoding, 20)!r}: not taken (send it uncompressed)")
            self.body_length(headers)
        except ServeError as err:
            return self.refusal(err, method, target, peer)
        return None

    def body_length(self, headers: Mapping[str, str]) -> int:
        text = headers.get("content-length", "0").strip()
        if not text.isdigit() or len(text) > 19:
            raise BadRequest(f"Content-Length {printable(text, 40)!r}: expected a whole number of bytes")
        n = int(text)
        if n > self.max_body_bytes:
            raise _Refused(413, f"body of {n} bytes: above the limit of {self.max_body_bytes} bytes")
        return n

    def handle(self, method: str, target: str, headers: Mapping[str, str], body: bytes, peer: str):
        """A Response, or a Pending inference. Never raises for anything a client sends."""
        try:
            return self._route(method, target, headers, body, peer)
        except ServeError as err:
            return self.refusal(err, method, target, peer)
        except Exception as err:  # noqa: BLE001 - a fault of ours: one line and a 500, never a traceback on the wire
            return self.refusal(_Refused(500, f"internal error: {type(err).__name__}: {err}"), method, target, peer)

    def refusal(self, err: ServeError, method: str, target: str, peer: str) -> Response:
        self.log(f"{PREFIX}: {err.status} {printable(method, 10)} {printable(target)} from {peer}: {err}")
        headers = {"Retry-After": str(int(err.retry_after_s))} if err.retry_after_s is not None else {}
        if err.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        return json_response(err.status, {"error": str(err)}, headers)

    # -- routes -------------------------------------------------------------------------------------------------------
    def _authorize(self, target: str, headers: Mapping[str, str]) -> None:
        if self.token is None or urlsplit(target).path in ("/v2/health/live", "/v2/health/ready"):
            return
        scheme, _, given = headers.get("authorization", "").strip().partition(" ")
        ok = scheme.lower() == "bearer"  # the scheme is case-insensitive (RFC 7235); the token is not
        if not hmac.compare_digest(given.strip().encode("latin-1", "replace"), self.token) or not ok:
            raise Unauthorized("missing or wrong token: send Authorization: Bearer <token>")

    def _route(self, method: str, target: str, headers: Mapping[str, str], body: bytes, peer: str):
        self._authorize(target, headers)
        parts = [unquote(p) for p in urlsplit(target).path.split("/")[1:]]
        core = self.core
        if parts == ["metrics"]:
            return self._get(method, self._metrics)
        if parts[:1] != ["v2"]:
            raise NotFound(f"path {printable(target, 80)!r}: not a KServe v2 route")
        rest = parts[1:]
        if rest in ([], [""]):
            return self._get(method, lambda: json_response(200, core.metadata()))
        if rest == ["health", "live"]:
            return self._get(method, lambda: Response(200 if core.live() else 503))
        if rest == ["health", "ready"]:
            return self._get(method, lambda: Response(200 if core.ready() else 503))
        if rest == ["models", "stats"]:
            return self._get(method, lambda: json_response(200, core.statistics()))
        if len(rest) < 2 or rest[0] != "models":
            raise NotFound(f"path {printable(target, 80)!r}: not a KServe v2 route")
        name, version, action = _model_route(rest[1:], target)
        if action == "infer":
            if method != "POST":
                raise _Refused(405, f"{printable(method, 10)} {printable(target, 80)}: infer takes POST")
            return self._infer(name, version, headers, body, (target, peer))
        if action == "":
            return self._get(method, lambda: json_response(200, core.model(name, version).metadata()))
        if action == "ready":
            return self._get(method, lambda: Response(200 if core.model_ready(name, version) else 503))
        if action == "config":
            return self._get(method, lambda: json_response(200, core.model(name, version).config()))
        if action == "stats":
            return self._get(method, lambda: json_response(200, core.statistics(name, version)))
        raise NotFound(f"path {printable(target, 80)!r}: not a KServe v2 route")

    @staticmethod
    def _get(method: str, answer: Callable[[], Response]) -> Response:
        if method not in ("GET", "HEAD"):
            raise _Refused(405, f"{printable(method, 10)}: this route takes GET")
        return answer()

    def _metrics(self) -> Response:
        try:
            from edge_runtime.serve.metrics import exposition
        except ImportError:
            raise _Refused(501, "metrics are not available in this build") from None
        data, content_type = exposition(self.core)
        return Response(200, {"Content-Type": content_type}, data)

    # -- inference ----------------------------------------------------------------------------------------------------
    def _infer(self, name: str, version: str | None, headers: Mapping[str, str], body: bytes, where) -> Pending:
        model = self.core.model(name, version)  # an unknown model is 404 before the body is looked at
        request, binary = split_body(headers, body, self.max_json_bytes)
        feeds = decode_inputs(request, binary, {t.name: t for t in model.tensors("inputs")})
        wanted = requested_outputs(request, [t.name for t in model.tensors("outputs")])
        future = self.core.submit(name, version, feeds, timeout_of(request))

        def respond() -> Response:
            try:
                return encode_response(name, request.get("id"), self.core.outcome(future), wanted)
            except ServeError as err:
                return self.refusal(err, "POST", *where)
            except Exception as err:  # noqa: BLE001 - as in handle()
                return self.refusal(_Refused(500, f"internal error: {type(err).__name__}: {err}"), "POST", *where)

        return Pending(future, respond)


def _model_route(parts: list[str], target: str) -> tuple[str, str | None, str]:
    """[m] | [m, versions, v] followed by one action or none: (name, version, action)."""
    name, tail, version = parts[0], parts[1:], None
    if tail[:1] == ["versions"] and len(tail) >= 2:
        version, tail = tail[1] or None, tail[2:]
    if len(tail) > 1:
        raise NotFound(f"path {printable(target, 80)!r}: not a KServe v2 route")
    return name, version, tail[0] if tail else ""


def split_body(headers: Mapping[str, str], body: bytes, max_json_bytes: int = 4 << 20) -> tuple[dict, bytes]:
    """The JSON request and the binary tensors after it (Inference-Header-Content-Length says where they start). The
    JSON part is bounded apart from the body: parsed, a JSON list of numbers takes ~10x its bytes in memory."""
    cut = len(body)
    if HEADER_LENGTH in headers:
        text = headers[HEADER_LENGTH].strip()
        if not (text.isascii() and text.isdecimal()) or int(text) > len(body):
            raise BadRequest(
                f"Inference-Header-Content-Length {printable(text, 40)!r}: not within the body's {cut} bytes"
            )
        cut = int(text)
    if cut > max_json_bytes:
        raise _Refused(
            413,
            f"JSON part of {cut} bytes: above {max_json_bytes} bytes (send large tensors as binary: "
            "the binary tensor extension)",
        )
    try:
        request = json.loads(body[:cut])
    except (ValueError, RecursionError) as err:
        raise BadRequest(f"request body: not JSON ({printable(str(err), 80)})") from None
    if not isinstance(request, dict):
        raise BadRequest(f"request body: expected a JSON object, got {type(request).__name__}")
    return request, body[cut:]


def _params(obj: dict, what: str) -> dict:
    p = obj.get("parameters", {})
    if not isinstance(p, dict):
        raise BadRequest(f"{what}: parameters must be an object")
    return p


def timeout_of(request: dict) -> float | None:
    """Triton's `timeout` parameter (microseconds) as seconds, or None."""
    us = _params(request, "request").get("timeout")
    if us is None:
        return None
    if isinstance(us, bool) or not isinstance(us, (int, float)) or not math.isfinite(us) or us <= 0:
        raise BadRequest(f"parameter timeout {printable(repr(us), 40)}: expected a positive number of microseconds")
    return us / 1e6


def decode_inputs(request: dict, binary: bytes, model_inputs: Mapping) -> dict[str, np.ndarray]:
    inputs = request.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise BadRequest("request: 'inputs' must be a non-empty list")
    feeds: dict[str, np.ndarray] = {}
    offset = 0
    for item in inputs:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise BadRequest("request: each input must be an object with a 'name'")
        name = item["name"]
        what = f"input {printable(name, 60)!r}"
        if name not in model_inputs:
            raise BadRequest(f"{what}: not an input of the model (inputs: {', '.join(model_inputs)})")
        if name in feeds:
            raise BadRequest(f"{what}: given twice")
        shape = _shape(item.get("shape"), what)
        dtype = dtype_of(item.get("datatype"), what)
        expected = np.dtype(model_inputs[name].dtype)
        if dtype != expected:
            raise BadRequest(f"{what}: datatype {item['datatype']}, the model takes {datatype_of(expected)}")
        size = _params(item, what).get("binary_data_size")
        if size is None:
            if "data" not in item:
                raise BadRequest(f"{what}: neither 'data' nor parameters.binary_data_size")
            feeds[name] = json_tensor(item["data"], shape, dtype, what)
            continue
        if isinstance(size, bool) or not isinstance(size, int) or size < 0 or offset + size > len(binary):
            raise BadRequest(f"{what}: binary_data_size {printable(repr(size), 30)} is beyond the body's binary part")
        feeds[name] = binary_tensor(binary[offset : offset + size], shape, dtype, what)
        offset += size
    if offset != len(binary):
        raise BadRequest(f"request: {len(binary) - offset} bytes of binary data after the last input's")
    return feeds


def _shape(shape: object, what: str) -> tuple[int, ...]:
    if (
        not isinstance(shape, list)
        or len(shape) > _MAX_DIMS
        or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 40 for d in shape)
    ):
        raise BadRequest(f"{what}: shape {printable(repr(shape), 60)} is not a list of non-negative whole numbers")
    return tuple(shape)


def binary_tensor(raw: bytes, shape: tuple[int, ...], dtype: np.dtype, what: str) -> np.ndarray:
    count = math.prod(shape)
    if len(raw) != count * dtype.itemsize:
        expected = count * dtype.itemsize
        raise BadRequest(f"{what}: {len(raw)} bytes for shape {list(shape)} of {datatype_of(dtype)}, not {expected}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def json_tensor(data: object, shape: tuple[int, ...], dtype: np.dtype, what: str) -> np.ndarray:
    """`data` (flat or nested lists) as an array of `dtype` and `shape`, every value checked to fit the dtype."""
    count = math.prod(shape)
    if isinstance(data, list) and data and not isinstance(data[0], list) and len(data) != count:
        raise BadRequest(f"{what}: {len(data)} values for shape {list(shape)} (expected {count})")  # before an array
    try:
        arr = np.array(data)
    except (ValueError, OverflowError):
        raise BadRequest(f"{what}: data is not a regular list of numbers") from None
    if arr.dtype.kind not in "biuf":
        raise BadRequest(f"{what}: data must be numbers (or true/false for BOOL)")
    if arr.size != count:
        raise BadRequest(f"{what}: {arr.size} values for shape {list(shape)} (expected {count})")
    arr = arr.reshape(-1)
    if dtype.kind == "b":
        if arr.dtype.kind != "b":
            raise BadRequest(f"{what}: BOOL data must be true or false")
    elif dtype.kind == "f":
        if arr.dtype.kind == "b":
            raise BadRequest(f"{what}: true/false given for {datatype_of(dtype)}")
        big = np.abs(arr[np.isfinite(arr)]) if arr.dtype.kind == "f" else np.abs(arr.astype(np.float64))
        if big.size and big.max() > np.finfo(dtype).max:
            raise BadRequest(f"{what}: value {big.max():g} is out of range for {datatype_of(dtype)}")
    else:
        _check_integers(arr, dtype, what)
    return arr.astype(dtype).reshape(shape)


def _check_integers(arr: np.ndarray, dtype: np.dtype, what: str) -> None:
    name = datatype_of(dtype)
    if arr.dtype.kind == "b":
        raise BadRequest(f"{what}: true/false given for {name}")
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all():
            raise BadRequest(f"{what}: NaN or infinity given for {name} (integers only)")
        if (arr != np.floor(arr)).any():
            raise BadRequest(f"{what}: a fractional value given for {name} (integers only)")
    if arr.size:
        info = np.iinfo(dtype)
        low, high = int(arr.min()), int(arr.max())
        if low < info.min or high > info.max:
            bad = low if low < info.min else high
            raise BadRequest(f"{what}: value {bad} is out of range for {name} ({info.min} to {info.max})")


def requested_outputs(request: dict, names: list[str]) -> list[tuple[str, bool]]:
    """(name, binary) for each output to return: those asked for, in their order, or all of them."""
    default_binary = _params(request, "request").get("binary_data_output") is True
    asked = request.get("outputs")
    if asked is None:
        return [(n, default_binary) for n in names]
    if not isinstance(asked, list) or not all(isinstance(o, dict) and isinstance(o.get("name"), str) for o in asked):
        raise BadRequest("request: 'outputs' must be a list of objects with a 'name'")
    out = []
    for o in asked:
        what = f"output {printable(o['name'], 60)!r}"
        if o["name"] not in names:
            raise BadRequest(f"{what}: not an output of the model (outputs: {', '.join(names)})")
        p = _params(o, what)
        if p.get("classification"):
            raise BadRequest(f"{what}: the classification extension is not served")
        binary = p.get("binary_data", default_binary)
        if not isinstance(binary, bool):
            raise BadRequest(f"{what}: parameter binary_data {printable(repr(binary), 20)}: expected true or false")
        out.append((o["name"], binary))
    return out


def encode_response(model: str, request_id: object, outputs: Mapping[str, np.ndarray], wanted) -> Response:
    head: dict = {"model_name": model, "model_version": "1"}
    if isinstance(request_id, str) and request_id:
        head["id"] = request_id
    blobs: list[bytes] = []
    head["outputs"] = []
    for name, binary in wanted:
        arr = np.ascontiguousarray(outputs[name])
        one = {"name": name, "datatype": datatype_of(arr.dtype), "shape": list(arr.shape)}
        if binary:
            blob = arr.tobytes()
            one["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            one["data"] = arr.ravel().tolist()
        head["outputs"].append(one)
    text = json.dumps(head, separators=(",", ":")).encode()
    if not blobs:
        return Response(200, dict(_JSON), text)
    headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(text))}
    return Response(200, headers, b"".join([text, *blobs]))
