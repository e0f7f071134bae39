"""The first inference request to a KServe v2 server over HTTP, sent without tritonclient so that a failure keeps
its real cause (issue 24): the status and the server's own words (a 400's "batch size 1 is not supported"), a 503's
Retry-After and how long, a timeout as a timeout, a connection closed mid-body with how much came. tritonclient keeps
none of the reply's headers in its exception and, given one headers dict, writes its Inference-Header-Content-Length
into it, so a JSON request after a binary one once went out with the binary one's length and every cause read as
"JSON parse error". Here each request builds its own headers.

The request is the one tritonclient sends (KServe v2 binary tensor extension: a JSON header, then the raw inputs;
or JSON `data`), and the answer is checked with bench/targets/kserve_answers.py as every later one is. The reply's
body is read up to a cap (MAX_BODY), and the whole exchange within `timeout_s` (a deadline, not per read).

Never: follow a redirect, keep the connection, read more than the cap, or echo a header's value."""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from dataclasses import dataclass

import numpy as np

from bench.targets.kserve_answers import check_answer

MAX_BODY = 64 << 20  # bytes of a reply read at most: a model's outputs here are small; a larger reply is refused
CHUNK = 1 << 16
DTYPE_NAMES = {"bool": "BOOL", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64",
               "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64", "float16": "FP16",
               "float32": "FP32", "float64": "FP64"}  # fmt: skip


class ProbeFailed(Exception):
    """The request failed: `kind` as the run counts failures (status 503, timeout, connection lost, ...), `words`
    its cause in one line."""

    def __init__(self, kind: str, words: str):
        super().__init__(words)
        self.kind, self.words = kind, words


@dataclass(frozen=True)
class Answer:
    status: int
    header: object  # the JSON part of the answer (an object when the server is right)
    body_len: int  # bytes after the JSON part
    wrong: str | None  # what check_answer said (None: right)


def request_body(feeds: dict[str, np.ndarray], outputs: list[str], binary: bool) -> tuple[bytes, dict[str, str]]:
    """The KServe v2 inference request for `feeds` asking for `outputs`, and its own headers: the bytes
    tritonclient sends, so the first request is answered as the run's are."""
    inputs, raw = [], []
    for name, arr in feeds.items():
        t = {"name": name, "shape": list(arr.shape), "datatype": DTYPE_NAMES[arr.dtype.name]}
        if binary:
            data = np.ascontiguousarray(arr).tobytes()
            t["parameters"] = {"binary_data_size": len(data)}
            raw.append(data)
        else:
            t["data"] = arr.flatten().tolist()
        inputs.append(t)
    head = json.dumps({"inputs": inputs, "outputs": [{"name": n, "parameters": {"binary_data": binary}}
                                                     for n in outputs]}).encode()  # fmt: skip
    if not binary:  # no Content-Type, as tritonclient sends none (MLServer answers a binary octet-stream with 500)
        return head, {}
    return head + b"".join(raw), {"Inference-Header-Content-Length": str(len(head))}


def infer_path(model: str, version: str) -> str:
    path = f"/v2/models/{urllib.parse.quote(model, safe='')}"
    return path + (f"/versions/{urllib.parse.quote(version, safe='')}" if version else "") + "/infer"


def probe(address: str, model: str, version: str, feeds, expected, *, binary: bool, headers: dict[str, str],
          timeout_s: float) -> Answer:  # fmt: skip
    """One inference request; the answer checked against `expected` (kserve_answers.Expected), or ProbeFailed."""
    body, own = request_body(feeds, [e.name for e in expected], binary)
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout_s
    conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout_s)
    try:
        try:
            conn.request("POST", infer_path(model, version), body=body, headers={**headers, **own})
            conn.sock.settimeout(max(0.001, deadline - time.monotonic()))
            resp = conn.getresponse()
            data = _read(resp, conn, deadline)
        except TimeoutError:
            raise ProbeFailed("timeout", f"timeout: no whole answer within {timeout_s:g} s") from None
        except http.client.IncompleteRead as err:
            raise ProbeFailed("connection lost", f"the connection closed mid-body ({len(err.partial):,} of "
                              f"{len(err.partial) + (err.expected or 0):,} bytes came)") from None  # fmt: skip
        except http.client.RemoteDisconnected:
            raise ProbeFailed("connection lost", "the server closed the connection without an answer") from None
        except (OSError, http.client.HTTPException) as err:
            raise ProbeFailed("unreachable" if isinstance(err, ConnectionRefusedError) else "connection lost",
                              f"{type(err).__name__}: {' '.join(str(err).split())[:160]}") from None  # fmt: skip
    finally:
        conn.close()
    if resp.status != 200:
        raise ProbeFailed(f"status {resp.status}", _refusal(resp, data))
    return _answer(resp, data, expected)


def _read(resp, conn, deadline: float) -> bytes:
    """The body, up to MAX_BODY, by the deadline (a server that trickles it ends in a timeout, not a hang)."""
    length = resp.getheader("Content-Length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY:
        raise ProbeFailed("too large", f"an answer of {int(length):,} bytes (at most {MAX_BODY:,} are read)")
    parts, got = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        conn.sock.settimeout(left)
        chunk = resp.read(CHUNK)
        if not chunk:
            if resp.length:  # http.client's read(n) returns b"" when the peer closes early: the bytes still owed
                raise http.client.IncompleteRead(b"".join(parts), resp.length)
            return b"".join(parts)
        parts.append(chunk)
        got += len(chunk)
        if got > MAX_BODY:
            raise ProbeFailed("too large", f"an answer of over {MAX_BODY:,} bytes")


def _refusal(resp, data: bytes) -> str:
    """A refused request in one line: the status, Retry-After (how long), the server's own words."""
    words = f"{resp.status} {resp.reason}".strip()
    retry = resp.getheader("Retry-After")
    if retry is not None:
        retry = " ".join(retry.split())[:40]
        words += f" (Retry-After: {retry} s)" if retry.isdigit() else f" (Retry-After: {retry})"
    try:
        said = json.loads(data)
        said = said.get("error", said) if isinstance(said, dict) else said
    except ValueError:
        said = data.decode(errors="replace")
    said = " ".join(str(said).split())[:200]
    return f"{words}: {said}" if said else words


def _answer(resp, data: bytes, expected) -> Answer:
    """A 200 answer split into its JSON part and the binary part after it, and checked."""
    length = resp.getheader("Inference-Header-Content-Length")
    try:
        n = int(length) if length is not None else len(data)
        if not 0 <= n <= len(data):
            raise ValueError(f"Inference-Header-Content-Length {n:,} of a {len(data):,}-byte body")
        header = json.loads(data[:n])
    except ValueError as err:
        why = f"the answer could not be read ({' '.join(str(err).split())[:160]})"
        return Answer(200, None, 0, why)
    return Answer(200, header, len(data) - n, check_answer(expected, header, len(data) - n))


def choose(address: str, model: str, version: str, feeds, expected, *, headers: dict[str, str], timeout_s: float,
           extensions) -> tuple[bool, str]:  # fmt: skip
    """Binary tensors when the first binary request is answered (right or wrong: a wrong answer is the run's to
    count), else JSON, and the record's words for why; ProbeFailed with both causes when JSON fails too."""
    kw = {"expected": expected, "headers": headers, "timeout_s": timeout_s}
    try:
        probe(address, model, version, feeds, binary=True, **kw)
        return True, "binary (the binary tensor extension)"
    except ProbeFailed as err:
        why = err.words
    try:
        probe(address, model, version, feeds, binary=False, **kw)
    except ProbeFailed as err:
        raise ProbeFailed(err.kind, f"the first inference failed with binary tensors ({why}) and with JSON tensors "
                          f"({err.words})") from None  # fmt: skip
    listed = "" if "binary_tensor_data" in (extensions or []) else "; it does not list the binary_tensor_data extension"
    return False, f"json (the server refused binary tensors: {why}{listed})"
