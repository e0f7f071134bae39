"""Messages: what a link carries. One message = a JSON object (its `type` and fields) and an optional binary blob
(a chunk of a model file), as `u32 length | JSON | blob`. Sans-I/O like the rest of wire/.

The message types and what each carries are the protocol of the agent (DESIGN.md, "Wire protocol"):

    request   {id, op, args}            host -> agent; `id` makes it idempotent: asked twice, answered once
    response  {id, op, ok: true, result} | {id, op, ok: false, error: {kind, message}}
    progress  {id, text}                agent -> host during a long request
    error     {error: {kind, message}}  agent -> host: a frame or message it could not take (no request to answer)

Request ids are chosen by the host: 1 to 64 of [A-Za-z0-9._-], since the agent names outbox files after them.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field
from typing import Any

PROTOCOL_VERSION = 1
_LEN = struct.Struct("!I")
MAX_HEADER = 32 << 20  # a result with a long thermal timeline; the agent takes far smaller requests
REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
TYPES = ("request", "response", "progress", "error")


class MessageError(ValueError):
    """Bytes that are not a message of this protocol (the agent answers with an error message, and goes on)."""


@dataclass(frozen=True)
class Msg:
    type: str
    fields: dict[str, Any] = field(default_factory=dict)
    blob: bytes = b""

    def get(self, key: str, default=None):
        return self.fields.get(key, default)


def encode(msg: Msg) -> bytes:
    head = json.dumps({"type": msg.type, **msg.fields}, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return _LEN.pack(len(head)) + head + bytes(msg.blob)


def decode(data: bytes) -> Msg:
    if len(data) < _LEN.size:
        raise MessageError(f"a message of {len(data)} bytes: too short to hold its header")
    (n,) = _LEN.unpack_from(data)
    if n > MAX_HEADER or _LEN.size + n > len(data):
        raise MessageError(f"header length {n:,} does not fit the message of {len(data):,} bytes")

    def refuse_constant(name: str):
        raise ValueError(f"{name} is not JSON")

    try:
        head = json.loads(data[_LEN.size : _LEN.size + n].decode("utf-8"), parse_constant=refuse_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise MessageError(f"header is not JSON ({' '.join(str(err).split())[:100]})") from None
    if not isinstance(head, dict) or head.get("type") not in TYPES:
        kind = head.get("type") if isinstance(head, dict) else type(head).__name__
        raise MessageError(f"unknown message type {kind!r}"[:200])
    t = head.pop("type")
    return Msg(t, head, bytes(data[_LEN.size + n :]))


def request(rid: str, op: str, args: dict | None = None, blob: bytes = b"") -> Msg:
    return Msg("request", {"id": rid, "op": op, "args": args or {}}, blob)


def ok(rid: str, op: str, result: Any) -> Msg:
    return Msg("response", {"id": rid, "op": op, "ok": True, "result": result})


def failed(rid: str | None, op: str | None, kind: str, message: str) -> Msg:
    error = {"kind": kind, "message": " ".join(str(message).split())[:2000]}
    if rid is None:
        return Msg("error", {"error": error})
    return Msg("response", {"id": rid, "op": op, "ok": False, "error": error})


def progress(rid: str, text: str) -> Msg:
    return Msg("progress", {"id": rid, "text": text[:500]})
