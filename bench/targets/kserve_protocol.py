"""What the Open Inference Protocol (KServe v2) says, without a connection: a target's URL
(`kserve+http://HOST:PORT/MODEL[?options]`, `kserve+grpc://...`) read into its parts or refused in one line naming
what is wrong, the protocol's datatypes, tritonclient's answers as plain data, and a failed request's kind and words.
Nothing here connects (bench/targets/kserve.py does)."""

from __future__ import annotations

import re
import urllib.parse

from edge_runtime.errors import UserError

SCHEMES = ("kserve+http", "kserve+grpc")
OPTIONS = {"version", "metrics", "timeout", "tensors", "engine", "processes"}  # the last two: kserve_fast.py
DTYPES = {"BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64", "INT8": "int8",
          "INT16": "int16", "INT32": "int32", "INT64": "int64", "FP16": "float16", "FP32": "float32",
          "FP64": "float64"}  # fmt: skip


def parse_url(url: str) -> dict:
    """kserve+http://HOST:PORT/MODEL[?options] -> its parts; a one-line UserError for anything else."""
    u = urllib.parse.urlsplit(url)
    protocol = u.scheme.partition("+")[2]
    if u.scheme not in SCHEMES:
        raise UserError(f"target {url!r}: a KServe v2 URL is kserve+http://HOST:PORT/MODEL or kserve+grpc://...")
    try:
        port = u.port
    except ValueError:
        port = -1
    if not u.hostname or port is None or not 0 < port < 65536:
        raise UserError(f"target {url!r}: HOST:PORT is needed (kserve+{protocol}://127.0.0.1:8000/MODEL)")
    model = urllib.parse.unquote(u.path.strip("/"))
    if not model or "/" in model:
        raise UserError(f"target {url!r}: the path names the model: kserve+{protocol}://HOST:PORT/MODEL")
    opts: dict = {}
    for key, values in urllib.parse.parse_qs(u.query, keep_blank_values=True).items():
        if key not in OPTIONS:
            raise UserError(f"target {url!r}: unknown option {key!r} (known: {', '.join(sorted(OPTIONS))})")
        opts[key] = values[-1]
    timeout = opts.get("timeout", "30")
    try:
        t = float(timeout)
    except ValueError:
        t = float("nan")
    if not 0.001 <= t <= 3600:  # under a millisecond no request can be answered: every query would fail
        raise UserError(f"target {url!r}: timeout {timeout!r}: seconds from 0.001 to 3600")
    if opts.get("tensors", "binary") not in ("binary", "json"):
        raise UserError(f"target {url!r}: tensors {opts['tensors']!r}: binary or json")
    metrics = opts.get("metrics")
    if metrics is not None:
        bracketed = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
        metrics = metrics if (":" in metrics and not metrics.isdigit()) else f"{bracketed}:{metrics}"
        if not re.fullmatch(r"[A-Za-z0-9.\-\[\]:]+:\d{1,5}", metrics) or not 0 < int(metrics.rsplit(":", 1)[1]) < 65536:
            raise UserError(f"target {url!r}: metrics {opts['metrics']!r}: PORT or HOST:PORT (a port from 1 to 65535)")
    host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
    return {"protocol": protocol, "address": f"{host}:{port}", "model": model, "version": opts.get("version", ""),
            "metrics": metrics, "timeout": t, "tensors": opts.get("tensors")}  # fmt: skip


def plain(obj):
    """tritonclient answers dicts over HTTP and protobuf messages over gRPC: both as plain JSON-able data."""
    if isinstance(obj, (dict, list)):
        return obj
    try:
        from google.protobuf.json_format import MessageToDict

        return MessageToDict(obj, preserving_proto_field_name=True)
    except Exception:  # noqa: BLE001
        return {}


def why_failed(err: Exception) -> str:
    text = str(getattr(err, "message", lambda: None)() if callable(getattr(err, "message", None)) else err)
    text = " ".join((text or type(err).__name__).split())
    status = status_of(err)
    return (f"{status}: " if status and status not in text else "") + text[:200]


def status_of(err: Exception) -> str | None:
    status = getattr(err, "status", None)
    s = status() if callable(status) else status
    return str(s) if s else None


def failure_kind(err: Exception) -> str:
    """A failed request's kind, for counting: a timeout, a server that cannot be reached, a connection lost in the
    middle of a request, or the HTTP or gRPC status the server answered."""
    text = f"{type(err).__name__} {err}".lower()
    status = status_of(err)
    if "timed out" in text or "timeout" in text or "deadline" in text:
        return "timeout"
    if any(w in text for w in ("connection refused", "failed to connect", "connect call failed", "unavailable",
                               "name or service not known", "no route to host")):  # fmt: skip
        return "unreachable"
    if any(w in text for w in ("connectionclosed", "connection closed", "reset by peer", "connectionreset",
                               "broken pipe", "remote end closed", "connection aborted", "eof")):  # fmt: skip
        return "connection lost"
    if status:
        return f"status {status}"
    return type(err).__name__
