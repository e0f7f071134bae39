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
    """kserve+http://HOST:PORT/MODEL[?options] -> its parts; a one-line UserError for anything else (issue 24: every
    malformed URL is the user's to fix, exit 2). Credentials (`user:password@`) are refused and never echoed: an
    access token goes in a header (`--header`, a campaign's [target.headers] with ${VAR}), which is not stored. A
    model name may hold an `@` written as %40; `.`, `..`, `/`, control characters and over 255 characters are
    refused, as is a version that is not digits or a plain name: they would name another path on the server."""
    shown = redact(url)
    if _CONTROL.search(url):  # urllib drops tabs and line ends silently: a name holding one is refused, not changed
        raise UserError(f"target {shown!r}: control characters in a URL")
    if "@" in url.partition("?")[0].partition("#")[0]:
        raise UserError(f"target {shown!r}: credentials in a URL are refused (they would be stored with every run): "
                        "give a token with --header 'NAME: VALUE' or a campaign's [target.headers]")  # fmt: skip
    try:
        u = urllib.parse.urlsplit(url)
    except ValueError as err:  # "Invalid IPv6 URL"
        raise UserError(f"target {shown!r}: not a URL ({err})") from None
    protocol = u.scheme.partition("+")[2]
    if u.scheme not in SCHEMES:
        raise UserError(f"target {shown!r}: a KServe v2 URL is kserve+http://HOST:PORT/MODEL or kserve+grpc://...")
    if u.fragment:
        raise UserError(f"target {shown!r}: a KServe v2 URL has no #fragment")
    try:
        port = u.port
    except ValueError:
        port = -1
    if not u.hostname or not _HOST.fullmatch(u.hostname) or port is None or not 0 < port < 65536:
        raise UserError(f"target {shown!r}: HOST:PORT is needed (kserve+{protocol}://127.0.0.1:8000/MODEL)")
    model = urllib.parse.unquote(u.path.strip("/"))
    if not model or "/" in u.path.strip("/"):
        raise UserError(f"target {shown!r}: the path names the model: kserve+{protocol}://HOST:PORT/MODEL")
    check_name(model, "model name", shown)
    opts: dict = {}
    for key, values in urllib.parse.parse_qs(u.query, keep_blank_values=True).items():
        if key not in OPTIONS:
            raise UserError(f"target {shown!r}: unknown option {key!r} (known: {', '.join(sorted(OPTIONS))})")
        opts[key] = values[-1]
    version = opts.get("version", "")
    if version and (not _VERSION.fullmatch(version) or ".." in version):
        raise UserError(f"target {shown!r}: version {version!r}: digits or a name of letters, digits, '_', '-', '.'")
    t = _timeout(opts.get("timeout", "30"), shown)
    if opts.get("tensors", "binary") not in ("binary", "json"):
        raise UserError(f"target {shown!r}: tensors {opts['tensors']!r}: binary or json")
    metrics = opts.get("metrics")
    if metrics is not None:
        bracketed = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
        metrics = metrics if (":" in metrics and not metrics.isdigit()) else f"{bracketed}:{metrics}"
        if not re.fullmatch(r"[A-Za-z0-9.\-\[\]:]+:\d{1,5}", metrics) or not 0 < int(metrics.rsplit(":", 1)[1]) < 65536:
            raise UserError(
                f"target {shown!r}: metrics {opts['metrics']!r}: PORT or HOST:PORT (a port from 1 to 65535)"
            )
    host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
    load_options(url)  # engine= and processes=, checked here like every option (used by kserve_fast.py)
    return {"protocol": protocol, "address": f"{host}:{port}", "model": model, "version": version,
            "metrics": metrics, "timeout": t, "tensors": opts.get("tensors")}  # fmt: skip


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HOST = re.compile(r"[A-Za-z0-9._-]+|[0-9A-Fa-f:.]+(%[A-Za-z0-9._-]+)?")  # a name, an IPv4 address, an IPv6 one
_VERSION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
MAX_NAME = 255


def redact(url: str) -> str:
    """The URL as an error may show it: whatever stands between `//` and the last `@` before the query (a user and
    a password) becomes `***`."""
    head, sep, rest = url.partition("?")
    if "@" not in head:
        return url
    scheme, slashes, after = head.partition("//")
    host = (after if slashes else head).rpartition("@")[2]
    return f"{scheme}{slashes}***@{host}{sep}{rest}" if slashes else f"***@{host}{sep}{rest}"


def check_name(name: str, what: str, shown: str) -> None:
    """A model name as a server's path can hold it: not empty, `.` or `..`, no `/` or `\\`, no control characters,
    at most MAX_NAME characters."""
    if name in (".", "..") or "/" in name or "\\" in name or _CONTROL.search(name) or len(name) > MAX_NAME:
        why = f"over {MAX_NAME} characters" if len(name) > MAX_NAME else f"{name!r} is not a name a server can hold"
        raise UserError(f"target {shown!r}: {what}: {why} (no '.', '..', '/', '\\' or control characters)")


def _timeout(timeout: str, shown: str) -> float:
    try:
        t = float(timeout)
    except ValueError:
        t = float("nan")
    if not 0.001 <= t <= 3600:  # under a millisecond no request can be answered: every query would fail
        raise UserError(f"target {shown!r}: timeout {timeout!r}: seconds from 0.001 to 3600")
    return t


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
                               "broken pipe", "remote end closed", "connection aborted", "eof",
                               "incomplete response")):  # fmt: skip
        return "connection lost"
    if status:
        return f"status {status}"
    return type(err).__name__


ENGINES = ("auto", "fast", "tritonclient")


def load_options(url: str) -> tuple[str, int | None]:
    """The URL's `engine=auto|fast|tritonclient` (default auto: fast for binary tensors over HTTP, else
    tritonclient) and `processes=N` (client processes, 1 to 256; default: one per
    connection, at most this machine's usable CPUs). One UserError line for a bad value."""
    q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query, keep_blank_values=True))
    engine = q.get("engine", "auto")
    if engine not in ENGINES:
        raise UserError(f"target {url!r}: engine {engine!r}: one of {', '.join(ENGINES)}")
    processes = q.get("processes")
    if processes is None:
        return engine, None
    if not (processes.isascii() and processes.isdigit() and 1 <= int(processes) <= 256):
        raise UserError(f"target {url!r}: processes {processes!r}: a whole number from 1 to 256")
    return engine, int(processes)
